"""Complex values through scatters and layouts, compiled: a scatter of complex values runs as
the variadic scatter of its parts (``complex_scatters``: add, multiply, set; one or two
dims), and a complex fusion's real parts keep the layout its root declares (a transposed
operand used to reach a dot transposed: ``tril(h.T) @ h`` and a complex Cholesky factor
times a matrix were wrong).  Truth: JAX running the same programs on the CPU."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from triton_backend import compile_hlo

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

RNG = np.random.default_rng(0)
C = (RNG.random((6, 6)) + 1j * RNG.random((6, 6))).astype(np.complex64)
X8 = (np.arange(8) * (1 + 2j)).astype(np.complex64)
INDEX = np.array([1, 3, 1], np.int32)
UPDATE = np.array([1 + 1j, 2 - 1j, 3j], np.complex64)

PROGRAMS = {
    "scatter_add": (lambda x, i, u: x.at[i].add(u), (X8, INDEX, UPDATE)),
    "scatter_multiply": (lambda x, i, u: x.at[i].multiply(u), (X8, INDEX, UPDATE)),
    "scatter_set_2d": (lambda x, i, u: x.at[i, 1:].set(u[:, None] * 2j),
                       (np.ones((5, 3), np.complex64), np.array([0, 4], np.int32), UPDATE[:2])),
    "transposed_tril_matmul": (lambda h: jnp.tril(h.T) @ h, (C,)),
    "cholesky_matmul": (lambda h: jnp.linalg.cholesky(h) @ h,
                        ((C @ C.conj().T + 6 * np.eye(6)).astype(np.complex64),)),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_compiled_matches_jax(name):
    f, args = PROGRAMS[name]
    text = jax.jit(f).lower(*args).as_text(dialect="hlo")
    want = np.asarray(jax.jit(f)(*args))
    (got,) = compile_hlo(text, cache=False)(*(torch.from_numpy(np.array(a)) for a in args))
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
