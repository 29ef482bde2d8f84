"""Regenerate the coverage programs: ``python bench/programs/coverage/generate.py`` (needs jax).

Small JAX programs of what XLA accepts and a kernel computes in a form only a GPU compiles
(the bitonic network's warp-shuffle partners, the small floats moved as bytes, an integer
implicit GEMM summing on the CUDA cores, a host view between kernels, a sort's passes meeting
at barriers, Philox's and Threefry's 32x32-bit products and rotations): ``bench/gpu_session.sh``
runs them on a lent GPU against the reference evaluator (``bench/gpu_corpus_check.py``).
Each ``NAME.hlo`` is ``jax.jit(f).lower(*args).as_text(dialect="hlo")``.
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
RNG = np.random.default_rng(0)


def two_key_sort(a, b):
    """``lax.sort`` with two keys: the comparator network on 512 lanes."""
    return lax.sort((jnp.round(a), b, a), dimension=1, num_keys=2)


def argsort_f64(x):
    """x64 mode's stable argsort: 64-bit keys, 1024 lanes."""
    return jnp.argsort(x, axis=-1, stable=True), jnp.sort(x, axis=-1, descending=True)


def long_lexsort(a, b):
    """``jnp.lexsort`` of rows of 10,000: the network through scratch memory, its passes
    meeting at barriers (which the interpreter cannot check)."""
    return jnp.lexsort((b, a), axis=-1)


def conv_int32(x, w, b):
    """An int32 convolution with a bias: the implicit GEMM summing its own products."""
    y = lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    return y + b


def small_floats(x):
    """Every small float XLA has, rounded and computed in, and a width-changing bitcast."""
    out = []
    for t in (jnp.float8_e4m3fnuz, jnp.float8_e5m2fnuz, jnp.float8_e4m3b11fnuz, jnp.float8_e4m3,
              jnp.float8_e3m4, jnp.float8_e8m0fnu, jnp.float4_e2m1fn):
        y = x.astype(t)
        out.append((y * y).astype(jnp.float32) + y.astype(jnp.float32))
    return jnp.stack(out), lax.bitcast_convert_type(x * 3, jnp.uint16)


def random_bits(key_data, x):
    """JAX's ``rbg`` keys: dropout and normal noise from Philox (``rng_default``), Threefry's
    bits and 64-bit bits by ``lax.rng_bit_generator``, each generator inside its reader."""
    keep = jax.random.bernoulli(jax.random.wrap_key_data(key_data, impl="rbg"), 0.9, x.shape)
    noise = jax.random.normal(jax.random.wrap_key_data(key_data, impl="unsafe_rbg"), x.shape,
                              x.dtype)
    state = lax.bitcast_convert_type(key_data.reshape(2, 2), jnp.uint64)
    new, threefry = lax.rng_bit_generator(state, (333, 17), jnp.uint32,
                                          algorithm=lax.RandomAlgorithm.RNG_THREE_FRY)
    _, wide = lax.rng_bit_generator(new, (1000, 3), jnp.uint64)
    return jnp.where(keep, x / 0.9, 0) + noise, threefry, wide


CASES = {
    "two_key_sort": (two_key_sort, (RNG.standard_normal((64, 300)).astype(np.float32) * 4,
                                    RNG.standard_normal((64, 300)).astype(np.float32))),
    "argsort_f64": (argsort_f64, (RNG.integers(-50, 50, (32, 1000)).astype(np.float64) / 4,)),
    "long_lexsort": (long_lexsort, (RNG.integers(-20, 20, (8, 10000)).astype(np.int32),
                                    RNG.standard_normal((8, 10000)).astype(np.float32))),
    "conv_int32": (conv_int32, (RNG.integers(-9, 9, (4, 16, 16, 8)).astype(np.int32),
                                RNG.integers(-9, 9, (3, 3, 8, 16)).astype(np.int32),
                                RNG.integers(-9, 9, (16,)).astype(np.int32))),
    "random_bits": (random_bits, (np.array([7, 1, 2**32 - 1, 5], np.uint32),
                                  RNG.standard_normal((512, 1024)).astype(np.float32))),
    "small_floats": (small_floats, (RNG.standard_normal((64, 256)).astype(np.float32) * 3,)),
}


def main(names: list[str]) -> int:
    for name, (fn, args) in CASES.items():
        if not names or name in names:
            (OUT_DIR / f"{name}.hlo").write_text(jax.jit(fn).lower(*args).as_text(dialect="hlo"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
