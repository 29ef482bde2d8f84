"""Regenerate the HLO test corpus: ``python tests/data/hlo/generate_corpus.py`` (needs jax).

Each case is a small jitted JAX function; ``NAME.before.hlo`` is what
``jax.jit(f).lower(*args).as_text(dialect="hlo")`` prints (unoptimized HLO) and
``NAME.after.hlo`` is what ``.compile().as_text()`` prints (optimized HLO on CPU, with fusions).
The ``.hlo`` files are committed, so tests never need jax to read them; rerun this script only
to refresh the corpus after a jax upgrade.  Shapes are kept small on purpose.
"""
from __future__ import annotations

import pathlib
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

jax.config.update("jax_enable_x64", True)

OUT_DIR = pathlib.Path(__file__).resolve().parent


def _f32(*shape):
    return jnp.asarray(np.arange(np.prod(shape), dtype=np.float32).reshape(shape) / 7.0)


def _bf16(*shape):
    return _f32(*shape).astype(jnp.bfloat16)


def _s32(*shape):
    return jnp.asarray(np.arange(np.prod(shape), dtype=np.int32).reshape(shape) - 3)


def _u32(*shape):
    return jnp.asarray(np.arange(np.prod(shape), dtype=np.uint32).reshape(shape))


def gelu(x):
    return jax.nn.gelu(x, approximate=True)


def softmax(x):
    return jax.nn.softmax(x, axis=-1)


def layernorm(x, g, b):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean((x - mean) ** 2, axis=-1, keepdims=True)
    return (x - mean) * lax.rsqrt(var + 1e-5) * g + b


def rmsnorm(x, g):
    return x * lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * g


def swiglu(x, w1, w2):
    return jax.nn.silu(x @ w1) * (x @ w2)


def transpose(x):
    return jnp.transpose(x, (2, 0, 1)) + 1.0


def reductions(x):
    return jnp.sum(x, axis=0), jnp.max(x, axis=1), jnp.argmax(x, axis=1)


def concatenate(a, b):
    return jnp.concatenate([a, b, a], axis=1)


def pad(x):
    return lax.pad(x, jnp.float32(0.5), ((1, 2, 0), (-1, 1, 2)))


def slices(x):
    return x[1:3, ::2] + x[0:2, 1:6:2]


def dynamic_slice(x, i):
    return lax.dynamic_slice(x, (i, jnp.int32(1)), (2, 3))


def dynamic_update_slice(x, u, i):
    return lax.dynamic_update_slice(x, u, (i, jnp.int32(0)))


def gather(x, idx):
    return x[idx]


def scatter(x, idx, u):
    return x.at[idx].add(u)


def matmul(a, b):
    return a @ b


def batched_einsum(a, b):
    return jnp.einsum("bij,bjk->bik", a, b)


def cumsum(x):
    return jnp.cumsum(x, axis=1)


def max_pool(x):
    return lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")


def sort(x):
    return jnp.sort(x, axis=-1)


def fori_loop(x):
    return lax.fori_loop(0, 5, lambda i, v: v * 1.5 + i, x)


def cond(p, x):
    return lax.cond(p > 0, lambda v: jnp.sin(v), lambda v: jnp.cos(v), x)


def integer_ops(a, b):
    return (a << 2, a >> 1, lax.shift_right_logical(a, jnp.int32(1)), a // (b + 10), a % 7,
            lax.population_count(a), a & b, a | b, a ^ b, ~a)


def compare_select(a, b):
    return jnp.where(a < b, a, b), jnp.clip(a, -1.0, 2.0), a == b, a >= b


def iota_convert(x):
    return (jnp.arange(8, dtype=jnp.int32).reshape(2, 4) + x).astype(jnp.float32)


def bitcast_convert(x):
    return lax.bitcast_convert_type(x, jnp.int32) ^ 0x7F


def reverse(x):
    return jnp.flip(x, axis=(0, 1))


def erf_atan2(a, b):
    return jax.scipy.special.erf(a) + jnp.arctan2(a, b)


def bf16_softmax(x):
    return jax.nn.softmax(x, axis=-1)


def bf16_gelu(x):
    return jax.nn.gelu(x, approximate=False)


def f64_constants(x):
    return x * jnp.float64(0.1) + jnp.array([[1.0, 2.0], [3.0, 4.0]])


def broadcast_reshape(x):
    return jnp.broadcast_to(x.reshape(3, 1), (3, 4)) * 2.0


CASES = {
    "gelu": (gelu, (_f32(4, 8),)),
    "softmax": (softmax, (_f32(4, 8),)),
    "layernorm": (layernorm, (_f32(4, 8), _f32(8), _f32(8))),
    "rmsnorm": (rmsnorm, (_f32(4, 8), _f32(8))),
    "swiglu": (swiglu, (_f32(2, 4), _f32(4, 6), _f32(4, 6))),
    "transpose": (transpose, (_f32(2, 3, 4),)),
    "reductions": (reductions, (_f32(3, 5),)),
    "concatenate": (concatenate, (_f32(2, 3), _f32(2, 2))),
    "pad": (pad, (_f32(3, 4),)),
    "slices": (slices, (_f32(4, 6),)),
    "dynamic_slice": (dynamic_slice, (_f32(5, 6), jnp.int32(2))),
    "dynamic_update_slice": (dynamic_update_slice, (_f32(5, 4), _f32(2, 4), jnp.int32(1))),
    "gather": (gather, (_f32(6, 3), jnp.array([4, 0, 5], jnp.int32))),
    "scatter": (scatter, (_f32(6, 3), jnp.array([1, 1, 4], jnp.int32), _f32(3, 3))),
    "matmul": (matmul, (_f32(3, 4), _f32(4, 5))),
    "batched_einsum": (batched_einsum, (_f32(2, 3, 4), _f32(2, 4, 5))),
    "cumsum": (cumsum, (_f32(3, 6),)),
    "max_pool": (max_pool, (_f32(1, 4, 4, 2),)),
    "sort": (sort, (_f32(3, 5),)),
    "fori_loop": (fori_loop, (_f32(4),)),
    "cond": (cond, (jnp.int32(1), _f32(4))),
    "integer_ops": (integer_ops, (_s32(2, 3), _s32(2, 3))),
    "compare_select": (compare_select, (_f32(2, 3), _f32(2, 3) - 1.0)),
    "iota_convert": (iota_convert, (_s32(2, 4),)),
    "bitcast_convert": (bitcast_convert, (_f32(2, 3),)),
    "reverse": (reverse, (_f32(3, 4),)),
    "erf_atan2": (erf_atan2, (_f32(2, 3), _f32(2, 3) + 1.0)),
    "bf16_softmax": (bf16_softmax, (_bf16(2, 8),)),
    "bf16_gelu": (bf16_gelu, (_bf16(2, 8),)),
    "f64_constants": (f64_constants, (jnp.ones((2, 2), jnp.float64),)),
    "broadcast_reshape": (broadcast_reshape, (_f32(3),)),
}


def main() -> int:
    for name, (fn, args) in CASES.items():
        lowered = jax.jit(fn).lower(*args)
        (OUT_DIR / f"{name}.before.hlo").write_text(lowered.as_text(dialect="hlo"))
        (OUT_DIR / f"{name}.after.hlo").write_text(lowered.compile().as_text())
    print(f"wrote {2 * len(CASES)} files to {OUT_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
