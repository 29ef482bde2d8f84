"""JAX programs drawing random numbers from ``rbg`` keys (an ``rng-bit-generator`` in the HLO,
refused before): compiled, they draw XLA's bits exactly, and the generator, written as integer
ops (``fusion.transforms.rng_expansion``), is computed inside the kernel that reads it."""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from triton_backend import compile_hlo  # noqa: E402
from triton_backend.host.input_validation import tensor_from_numpy, tensor_to_numpy  # noqa: E402

KEY = np.array([1, 2, 3, 0xFFFFFFFF], np.uint32)


def _run(fn, *args):
    """(XLA's outputs, ours, the compiled module) of ``fn`` as JAX lowers it."""
    with jax.enable_x64(True):
        text = jax.jit(fn).lower(*args).as_text(dialect="hlo")
        want = jax.jit(fn)(*args)
    compiled = compile_hlo(text, cache=False)
    module_args = [tensor_from_numpy(a, p.shape.dtype)
                   for a, p in zip(args, compiled.module.entry.parameters)]
    got = [tensor_to_numpy(t) for t in compiled(*module_args)]
    want = [np.asarray(w) for w in (want if isinstance(want, (tuple, list)) else (want,))]
    return want, got, compiled


def test_dropout_by_an_rbg_key_is_xlas_mask_in_one_kernel():
    def dropout(key_data, x):
        keep = jax.random.bernoulli(jax.random.wrap_key_data(key_data, impl="rbg"), 0.8, x.shape)
        return jnp.where(keep, x / 0.8, 0)

    x = np.random.default_rng(0).standard_normal((33, 70)).astype(np.float32)
    (want,), (got,), compiled = _run(dropout, KEY, x)
    np.testing.assert_array_equal(got, want)
    assert 0.7 < np.mean(got != 0) < 0.9
    # The key's words, the generator and the dropout: one kernel, the mask never stored.
    assert len(compiled.fusions) == 1


def test_normal_noise_threefry_and_64_bit_bits_and_the_new_state_match_xla():
    def draws(key_data, x):
        noise = jax.random.normal(jax.random.wrap_key_data(key_data, impl="unsafe_rbg"),
                                  x.shape, x.dtype)
        state = lax.bitcast_convert_type(key_data.reshape(2, 2), jnp.uint64)
        new, threefry = lax.rng_bit_generator(state, (5, 9), jnp.uint32,
                                              algorithm=lax.RandomAlgorithm.RNG_THREE_FRY)
        _, wide = lax.rng_bit_generator(new, (3, 7), jnp.uint64)
        return x + noise, threefry, wide, new

    x = np.random.default_rng(1).standard_normal((16, 24)).astype(np.float32)
    want, got, _ = _run(draws, KEY, x)
    np.testing.assert_allclose(got[0], want[0], rtol=2e-6, atol=2e-6)  # log, sin, cos
    for g, w in zip(got[1:], want[1:]):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
