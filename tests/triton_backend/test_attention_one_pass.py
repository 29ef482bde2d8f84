"""The attention template's one-pass form (online softmax) and the key blocks masks let it skip.

Every kernel is run under the interpreter and compared with the reference evaluator on the
whole module; which form a kernel took, and which key blocks it visits, are read from
``attention_form`` and checked against the mask itself (brute force over every query and key).
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fusion
from tests.triton_backend.test_attention_fusion import S, hlo, run_and_check
from tiling.fusion_pass.attention_mask import KeyBand
from triton_backend.templates.attention.driver import attention_form, attention_pattern


def masked_attention(visible, fill=-jnp.inf, normalize=jax.nn.softmax):
    """Attention over ``[batch, heads, tokens, head]`` whose scores are ``fill`` where
    ``visible(q, k)`` (index arrays) is false."""
    def f(q, k, v):
        s = jnp.einsum("...qd,...kd->...qk", q, k) / 4.0
        t, n = q.shape[-2], k.shape[-2]
        qi, ki = jnp.arange(t)[:, None], jnp.arange(n)[None, :]
        s = jnp.where(visible(qi, ki), s, fill)
        return jnp.einsum("...qk,...kd->...qd", normalize(s), v)
    return f


def compiled_attention(text: str, tiles=(16, 16)):
    """Compile and check at the interpreter's tiling, and at ``tiles`` (several query and key
    blocks); returns the module and the attention fusion's name."""
    compiled = run_and_check(text)
    (name,) = [n for n, f in compiled.fusions.items() if f.kind == "attention"]
    run_and_check(text, tiling={name: tiles})
    return compiled.module, name


def _shapes(dtype=jnp.float32, t=48, n=48, d=8):
    return S((1, 2, t, d), dtype), S((1, 2, n, d), dtype), S((1, 2, n, d), dtype)


MASKS = {
    # name: (visible(q, k), the band the kernel may skip outside of)
    "causal": (lambda q, k: k <= q, KeyBand(None, 0)),
    "sliding_window": (lambda q, k: (k <= q) & (k > q - 8), KeyBand(-7, 0)),
    "future_only": (lambda q, k: k >= q, KeyBand(0, None)),
    "unmasked": (lambda q, k: q >= 0, None),
    # the first 20 keys hidden from every row: no band (the first key visited is -inf for
    # every row, the running max starts at -inf)
    "padding": (lambda q, k: k >= 20 + 0 * q, None),
}


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("name", sorted(MASKS))
def test_one_pass_attention_matches_and_skips_only_hidden_key_blocks(name, dtype):
    """bf16 (tensor-core dots) also runs the blocks inside the band in a loop without the
    mask (``KeyBand.unmasked_at``)."""
    visible, band = MASKS[name]
    text = hlo(masked_attention(visible), *_shapes(dtype))
    module, fusion_name = compiled_attention(text)
    form = attention_form(module, fusion_name)
    assert form.name == "one-pass" and form.reason == "", form.reason
    assert (form.band and (form.band.low, form.band.high)) == (band and (band.low, band.high))
    if band is not None:
        assert form.band.unmasked_at is not None  # the blocks inside the band skip the mask  # every skipped block is hidden from every row of its program
        pattern = attention_pattern(module, fusion_name)
        truth = np.asarray(visible(np.arange(48)[:, None], np.arange(48)[None, :]))
        truth = np.broadcast_to(truth, (48, 48))
        for q0 in range(0, 48, 16):
            first, end = band.key_range(q0, 16, pattern.keys)
            rows = truth[q0:q0 + 16]
            assert not rows[:, :first].any() and not rows[:, end:].any()
        assert form.visited_fraction(pattern, 16, 16) < 1.0


def test_causal_bf16_and_a_huge_negative_fill_skip_too():
    text = hlo(masked_attention(lambda q, k: k <= q, fill=-1e30), *_shapes(jnp.bfloat16))
    module, fusion_name = compiled_attention(text)
    form = attention_form(module, fusion_name)
    assert form.name == "one-pass" and (form.band.low, form.band.high) == (None, 0)


def test_a_small_fill_hides_nothing():
    """-10 is no mask: its exp is not 0 next to the scores, every key block counts."""
    text = hlo(masked_attention(lambda q, k: k <= q, fill=-10.0), *_shapes())
    module, fusion_name = compiled_attention(text)
    form = attention_form(module, fusion_name)
    assert form.name == "one-pass" and form.band is None


def _plus_one(s):
    e = jnp.exp(s - jnp.max(s, axis=-1, keepdims=True))
    return e / (jnp.sum(e, axis=-1, keepdims=True) + 1.0)


def _no_max(s):
    e = jnp.exp(s)
    return e / jnp.sum(e, axis=-1, keepdims=True)


@pytest.mark.parametrize("normalize, why", [(_plus_one, "is not exp"), (_no_max, "reductions")])
def test_other_normalizations_keep_the_multi_pass_form(normalize, why):
    text = hlo(masked_attention(lambda q, k: k <= q, normalize=normalize), *_shapes(t=16, n=16))
    compiled = run_and_check(text)
    (name,) = [n for n, f in compiled.fusions.items() if f.kind == "attention"]
    form = attention_form(compiled.module, name)
    assert form.name == "multi-pass" and why in form.reason, form.reason


def test_report_names_the_form_and_the_visited_key_blocks():
    from triton_backend import compile_hlo
    from triton_backend.reports.compile_report import build_report

    text = hlo(masked_attention(lambda q, k: k <= q), *_shapes())
    report = build_report(compile_hlo(fusion.parse_hlo(text), tiling=None))
    (kernel,) = [f for f in report.to_json()["fusions"] if f["emitter_kind"] == "attention"]
    assert kernel["attention_form"] == "one-pass"
    assert 0 < kernel["kv_blocks_visited_fraction"] <= 1.0


def _one_iota(text: str) -> str:
    """``text`` with its equal iotas merged into the first, as XLA's CSE merges
    ``jnp.arange(t)[:, None]`` and ``jnp.arange(n)[None, :]`` when ``t == n``."""
    from dataclasses import replace

    module = fusion.parse_hlo(text)
    entry = module.entry
    iotas = [i for i in entry.instructions if i.opcode == "iota"]
    first, *others = [i for i in iotas if (str(i.shape), i.attributes) ==
                      (str(iotas[0].shape), iotas[0].attributes)]
    assert others, "the mask's two aranges"
    merged = {o.name for o in others}
    instructions = tuple(i.replace(operands=tuple(first.name if o in merged else o
                                                  for o in i.operands))
                         for i in entry.instructions if i.name not in merged)
    entry = replace(entry, instructions=instructions)
    return fusion.print_hlo(replace(module, computations=tuple(
        entry if c.name == entry.name else c for c in module.computations)))


@pytest.mark.parametrize("name", ["sliding_window"])
def test_a_mask_whose_positions_share_one_iota_skips_the_same_key_blocks(name):
    """The query and key positions read from one iota (``index_splitting`` gives each reader
    its copy, so each is one coordinate): the same band as two iotas, and the same values."""
    visible, band = MASKS[name]
    text = _one_iota(hlo(masked_attention(visible), *_shapes()))
    assert sum(" iota(" in line for line in text.splitlines()) == 1
    module, fusion_name = compiled_attention(text)
    form = attention_form(module, fusion_name)
    assert form.name == "one-pass" and (form.band.low, form.band.high) == (band.low, band.high)
