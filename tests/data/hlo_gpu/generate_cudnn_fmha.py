"""Writes the ``cudnn_fmha_*.hlo`` dumps here: JAX's cuDNN attention as JAX lowers it for CUDA.

``jax.nn.dot_product_attention(..., implementation="cudnn")`` lowers to ``__cudnn$fmha*``
custom-calls.  JAX lowers for CUDA on a CPU-only machine too (``lowering_platforms``); only its
cuDNN check needs a GPU, so this script tells that check cuDNN 9.1 is present.  The dumps are
then exactly what a GPU machine's ``jax.jit(f).lower(...).as_text(dialect="hlo")`` prints.

    python tests/data/hlo_gpu/generate_cudnn_fmha.py
"""
from __future__ import annotations

from pathlib import Path

import jax
import jax.numpy as jnp
from jax._src.cudnn import fused_attention_stablehlo as cudnn_attention

HERE = Path(__file__).resolve().parent
B, T, N, KV_HEADS, H = 2, 32, 4, 2, 16


def _pretend_cudnn() -> None:
    cudnn_attention.check_cudnn_version = lambda: 91000
    cudnn_attention.check_compute_capability = lambda capability: True
    cudnn_attention.is_cuda_compute_capability_equal = lambda capability: False


def _lower(f, *args) -> str:
    return jax.jit(f).trace(*args).lower(lowering_platforms=("cuda",)).as_text(dialect="hlo")


def programs() -> dict[str, str]:
    """Name -> HLO text of each dump."""
    _pretend_cudnn()
    attention = jax.nn.dot_product_attention
    q = jax.ShapeDtypeStruct((B, T, N, H), jnp.bfloat16)
    kv = jax.ShapeDtypeStruct((B, T, KV_HEADS, H), jnp.bfloat16)
    bias = jax.ShapeDtypeStruct((1, N, T, T), jnp.bfloat16)
    lengths = jax.ShapeDtypeStruct((B,), jnp.int32)
    half = jax.ShapeDtypeStruct((B, T, N, H), jnp.float16)
    cotangent = jax.ShapeDtypeStruct((B, T, N, H), jnp.float32)

    def causal_gqa(q, k, v):
        return attention(q, k, v, scale=0.25, is_causal=True, implementation="cudnn")

    def padded_causal(q, k, v, q_len, kv_len):
        return attention(q, k, v, scale=0.25, is_causal=True, query_seq_lengths=q_len,
                         key_value_seq_lengths=kv_len, implementation="cudnn")

    def sliding_window(q, k, v):
        return attention(q, k, v, is_causal=True, local_window_size=(7, 0),
                         implementation="cudnn")

    def loss(w, q, k, v, *bias, causal):  # w: the output's cotangent
        o = attention(q, k, v, *bias, scale=0.25, is_causal=causal, implementation="cudnn")
        return (o.astype(jnp.float32) * w).sum()

    def train_bias(q, k, v, b, w):
        return jax.grad(lambda *a: loss(w, *a, causal=False), argnums=(0, 1, 2, 3))(q, k, v, b)

    def train_causal(q, k, v, w):
        return jax.grad(lambda *a: loss(w, *a, causal=True), argnums=(0, 1, 2))(q, k, v)

    return {"cudnn_fmha_causal_gqa": _lower(causal_gqa, q, kv, kv),
            "cudnn_fmha_padded_causal": _lower(padded_causal, q, kv, kv, lengths, lengths),
            "cudnn_fmha_sliding_window_f16": _lower(sliding_window, half, half, half),
            "cudnn_fmha_train_bias": _lower(train_bias, q, kv, kv, bias, cotangent),
            "cudnn_fmha_train_causal_gqa": _lower(train_causal, q, kv, kv, cotangent)}


def main() -> None:
    for name, text in programs().items():
        (HERE / f"{name}.hlo").write_text(text)
        print(f"wrote {name}.hlo")


if __name__ == "__main__":
    main()
