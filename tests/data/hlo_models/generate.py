"""Regenerate the model-library corpus: training steps of small models from Hugging Face
``transformers`` (Flax classes) with ``optax`` optimizers, lowered by JAX.

Needs ``jax``, ``flax``, ``optax`` and ``transformers<5`` (the last releases with Flax
models), none of which the project depends on; the tests read only the committed files:

- ``NAME.before.hlo``: ``jax.jit(step).lower(...).as_text(dialect="hlo")`` (unoptimized), or
- ``NAME.after.hlo``: ``.compile().as_text()``, XLA:CPU's optimized module (``ynn_fusion``
  library fusions included);
- ``NAME.inputs.npz``: the step's real arguments ``p0..pN`` (initial weights, optimizer
  state, token ids), in the modules' parameter order (``keep_unused=True`` keeps them all);
- ``NAME.xla_outputs.npz``: XLA:CPU's results ``o0..oM`` of that step on those arguments
  (running the text through XLA again in every test run would cost seconds).

Run: ``python tests/data/hlo_models/generate.py`` in an environment with those packages.
"""
from __future__ import annotations

import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import optax
from transformers import (BertConfig, FlaxBertForSequenceClassification, FlaxGPT2LMHeadModel,
                          GPT2Config)

OUT_DIR = pathlib.Path(__file__).resolve().parent
BATCH, SEQ, VOCAB = 2, 8, 64


def gpt2_adamw_dropout():
    """GPT-2 language-model step, dropout on (threefry bit arithmetic), AdamW."""
    config = GPT2Config(vocab_size=VOCAB, n_positions=SEQ, n_embd=32, n_layer=1, n_head=4)
    model = FlaxGPT2LMHeadModel(config, seed=0)

    def loss(params, ids):
        logits = model(ids, params=params, dropout_rng=jax.random.PRNGKey(1), train=True).logits
        return optax.softmax_cross_entropy_with_integer_labels(logits[:, :-1], ids[:, 1:]).mean()

    return model.params, optax.adamw(1e-3), loss


def bert_classifier_adam():
    """BERT sequence-classification step with a padding mask, Adam."""
    config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1,
                        num_attention_heads=4, intermediate_size=64,
                        max_position_embeddings=SEQ, num_labels=3)
    model = FlaxBertForSequenceClassification(config, seed=0)

    def loss(params, ids):
        logits = model(ids, attention_mask=(ids > 0).astype(jnp.int32), params=params).logits
        return optax.softmax_cross_entropy_with_integer_labels(logits, ids[:, 0] % 3).mean()

    return model.params, optax.adam(1e-3), loss


def write(name: str, params, optimizer, loss, variants=("before", "after")) -> None:
    ids = jnp.asarray(np.random.default_rng(0).integers(0, VOCAB, size=(BATCH, SEQ)), jnp.int32)
    state = optimizer.init(params)

    def step(params, state, ids):
        value, grads = jax.value_and_grad(loss)(params, ids)
        updates, state = optimizer.update(grads, state, params)
        return optax.apply_updates(params, updates), state, value

    jitted = jax.jit(step, keep_unused=True)
    lowered = jitted.lower(params, state, ids)
    if "before" in variants:
        (OUT_DIR / f"{name}.before.hlo").write_text(lowered.as_text(dialect="hlo"))
    if "after" in variants:
        (OUT_DIR / f"{name}.after.hlo").write_text(lowered.compile().as_text())
    leaves = jax.tree_util.tree_leaves((params, state, ids))
    np.savez_compressed(OUT_DIR / f"{name}.inputs.npz",
                        **{f"p{i}": np.asarray(x) for i, x in enumerate(leaves)})
    results = jax.tree_util.tree_leaves(jitted(params, state, ids))
    np.savez_compressed(OUT_DIR / f"{name}.xla_outputs.npz",
                        **{f"o{i}": np.asarray(x) for i, x in enumerate(results)})


if __name__ == "__main__":
    # One form of each keeps the tests' interpreter time down (seconds per step): GPT-2 as
    # JAX lowers it (dropout's bit arithmetic is fused differently after XLA's passes), BERT
    # after XLA:CPU's passes (``ynn_fusion``s, the gather of a broadcast constant start).
    write("gpt2_adamw_dropout", *gpt2_adamw_dropout(), variants=("before",))
    write("bert_classifier_adam", *bert_classifier_adam(), variants=("after",))
