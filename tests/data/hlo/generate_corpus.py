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


# Loops over dynamic slices and in-place updates (issue 15: their kernels compare a scalar
# dynamic-slice start inside a block mask, which the Triton interpreter used to reject).
def scan_carry(x):
    def body(c, v):
        c = c * v + 1.0
        return c, c
    return lax.scan(body, jnp.float32(1.0), x)


def while_dynamic_slice(x):
    def body(state):
        i, acc = state
        return i + 1, acc + lax.dynamic_slice(x, (i, jnp.int32(0)), (1, 3))[0]
    return lax.while_loop(lambda s: s[0] < 4, body, (jnp.int32(0), jnp.zeros(3, jnp.float32)))[1]


def unique(x):
    return jnp.unique(x, size=6, fill_value=-1)


def median(x):
    return jnp.median(x, axis=1)


def kv_cache_update(cache, ks, pos):
    def body(i, c):
        return lax.dynamic_update_slice(c, ks[i][None], (pos + i, jnp.int32(0)))
    return lax.fori_loop(0, 3, body, cache)


# A CNN block (issue 15: convolution): conv + bias + relu, and its gradient (whose convolutions
# have lhs dilation and a reversed kernel, and feature/batch dims swapped).
def cnn_block(x, w, b):
    y = lax.conv_general_dilated(x, w, (2, 2), ((1, 1), (1, 1)),
                                 dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return jnp.maximum(y + b, 0.0)


def cnn_block_grad(x, w, b):
    return jax.grad(lambda x, w, b: jnp.sum(cnn_block(x, w, b)), argnums=(0, 1, 2))(x, w, b)


# Special values (issue 15).  The constants go through a select on the input, so XLA cannot
# fold the program away.  JAX prints -0.0 as ``-0``, which XLA's parser reads as +0 (so do we);
# no denormals: XLA:CPU flushes them to zero, a GPU does not.
_SPECIAL_A = [0.0, -0.0, 1.0, np.inf, -np.inf, np.nan, -np.nan, -2.5, 3e38, 0.5]
_SPECIAL_B = [1.0, -1.0, -0.0, np.inf, np.nan, np.inf, -np.inf, 2.0, 3e38, 0.0]


def special_floats(x):
    a = jnp.where(x > -1e30, jnp.array(_SPECIAL_A, x.dtype), x)
    b = jnp.where(x > -1e30, jnp.array(_SPECIAL_B, x.dtype), x)
    return (jnp.maximum(a, b), jnp.minimum(a, b), jnp.clip(a, -1.0, 1.0), jnp.sign(a), a % b,
            a ** b, jnp.arctan2(a, b), a / b, a < b, jnp.where(a > b, a, b), jnp.max(a),
            jnp.min(b), jnp.argmax(a), a.astype(jnp.int32), jnp.exp(a), jnp.log(a), jnp.sqrt(a))


def reduce_precision(x, y):
    # Rounded to f16's and to an f8-like (4, 3) format, in f32, f16 and bf16 (issue 15).
    return (lax.reduce_precision(x * 3.0, 5, 10), lax.reduce_precision(x, 4, 3) + 1.0,
            lax.reduce_precision(y, 5, 2), lax.reduce_precision(y.astype(jnp.bfloat16), 4, 3))


# Library calls (issue 15): FFTs, the LAPACK custom-calls JAX emits, top-k.  The outputs do
# not depend on the eigen-/singular-vector signs LAPACK happens to pick (reconstructions and
# magnitudes), so any correct backend matches XLA.
def fft_filter(x, h):
    spectrum = jnp.fft.rfft(x)
    smoothed = jnp.fft.irfft(spectrum * h, n=x.shape[-1])
    full = jnp.fft.fft(x.astype(jnp.complex64))
    return smoothed, jnp.abs(spectrum) ** 2, jnp.sum(full * jnp.conj(full), axis=-1), \
        jnp.fft.ifft(full).real


def cholesky_solve(a, b):
    spd = a @ a.T + a.shape[0] * jnp.eye(a.shape[0], dtype=a.dtype)
    factor = jnp.linalg.cholesky(spd)
    return factor, jax.scipy.linalg.cho_solve((factor, True), b)


def lu_solve(a, b):
    a = a + a.shape[0] * jnp.eye(a.shape[0], dtype=a.dtype)
    lu, pivots = jax.scipy.linalg.lu_factor(a)
    return lu, pivots, jnp.linalg.solve(a, b)


def qr(a):
    q, r = jnp.linalg.qr(a)
    return q @ r, jnp.abs(q), jnp.abs(r)


def eigh(a):
    w, v = jnp.linalg.eigh(a + a.T)
    return w, (v * w) @ v.T, jnp.abs(v)


def svd(a):
    u, s, vt = jnp.linalg.svd(a, full_matrices=False)
    return s, (u * s) @ vt, jnp.abs(u), jnp.abs(vt)


def top_k(x):
    return lax.top_k(x, 3)


# Indexed ops (issue 15): gathers and scatters with batching dims (jnp.take_along_axis with
# batch dims, vmapped indexing), a max-pool gradient (select-and-scatter before XLA's passes)
# and a KV-cache update returning its new row too.  JAX has no API emitting a variadic scatter;
# tests/triton_backend/test_batched_gather.py writes one by hand.
def take_along_axis_batched(x, idx):
    return jnp.take_along_axis(x, idx, axis=1)


def vmap_gather(x, idx):
    return jax.vmap(lambda row, i: row[i])(x, idx)


def vmap_scatter(x, idx, u):
    return jax.vmap(lambda row, i, v: row.at[i].add(v))(x, idx, u)


def max_pool_grad(x):
    def pool_loss(x):
        pooled = lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
        return jnp.sum(jnp.sin(pooled))
    return jax.grad(pool_loss)(x)


def kv_cache_side_output(cache, k, pos):
    row = jnp.tanh(k)
    return lax.dynamic_update_slice(cache, row, (pos, jnp.int32(0))), row


def top_p_sampling(logits):
    """Nucleus sampling's mask over a vocabulary longer than one sort tile (4,096)."""
    order = jnp.argsort(logits, axis=-1, descending=True)
    ranked = jnp.take_along_axis(logits, order, axis=-1)
    probs = jax.nn.softmax(ranked, axis=-1)
    keep = jnp.cumsum(probs, axis=-1) - probs < 0.9
    return jnp.where(keep, ranked, -jnp.inf), order


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
    "scan_carry": (scan_carry, (_f32(5),)),
    "while_dynamic_slice": (while_dynamic_slice, (_f32(5, 3),)),
    "unique": (unique, (jnp.array([3, 1, 3, 2, 1, 5], jnp.int32),)),
    "median": (median, (_f32(3, 4),)),
    "kv_cache_update": (kv_cache_update, (_f32(8, 4), _f32(3, 4), jnp.int32(2))),
    "special_floats": (special_floats, (_f32(10),)),
    "bf16_special_floats": (special_floats, (_bf16(10),)),
    "reduce_precision": (reduce_precision, (_f32(3, 8), _f32(4, 4).astype(jnp.float16))),
    "cnn_block": (cnn_block, (_f32(2, 8, 8, 4), _f32(3, 3, 4, 8), _f32(8))),
    "cnn_block_grad": (cnn_block_grad, (_f32(2, 8, 8, 4), _f32(3, 3, 4, 8), _f32(8))),
    "fft_filter": (fft_filter, (_f32(2, 8), _f32(5))),
    "cholesky_solve": (cholesky_solve, (_f32(4, 4), _f32(4, 2))),
    "lu_solve": (lu_solve, (_f32(4, 4), _f32(4, 2))),
    "qr": (qr, (_f32(4, 3),)),
    "eigh": (eigh, (_f32(4, 4),)),
    "svd": (svd, (_f32(4, 3),)),
    "top_k": (top_k, (_f32(3, 6),)),
    "take_along_axis_batched": (take_along_axis_batched,
                                (_f32(2, 5), jnp.array([[4, 0, 2], [1, 1, 3]], jnp.int32))),
    "vmap_gather": (vmap_gather, (_f32(3, 5), jnp.array([4, 0, 2], jnp.int32))),
    "vmap_scatter": (vmap_scatter, (_f32(3, 5), jnp.array([[1, 1], [0, 4], [2, 2]], jnp.int32),
                                    _f32(3, 2))),
    "max_pool_grad": (max_pool_grad, (_f32(1, 4, 6, 2),)),
    "kv_cache_side_output": (kv_cache_side_output, (_f32(8, 4), _f32(2, 4), jnp.int32(3))),
    "top_p_sampling": (top_p_sampling, (jnp.sin(_f32(2, 5000)) * 4,)),
}


def main(names: list[str]) -> int:
    """Write every case, or only the cases named on the command line."""
    unknown = sorted(set(names) - set(CASES))
    if unknown:
        print(f"unknown cases {unknown}; known: {sorted(CASES)}", file=sys.stderr)
        return 2
    for name, (fn, args) in CASES.items():
        if names and name not in names:
            continue
        lowered = jax.jit(fn).lower(*args)
        (OUT_DIR / f"{name}.before.hlo").write_text(lowered.as_text(dialect="hlo"))
        (OUT_DIR / f"{name}.after.hlo").write_text(lowered.compile().as_text())
    print(f"wrote {2 * len(names or CASES)} files to {OUT_DIR}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
