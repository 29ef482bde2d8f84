"""Complex values through scatters, sorts and layouts, compiled: a scatter or a sort of complex
values runs as the same op over their parts (``complex_variadic_ops``: scatter add,
multiply, set in one or two dims; ``sort_complex``, a complex key with a real payload and a
real key with a complex one, whose comparators take each operand's pair in turn), and a complex fusion's real parts keep the layout its root declares (a transposed
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
    "sort_complex": (jnp.sort_complex, (np.array([2 - 1j, 1 + 3j, 2 - 2j, -1j, 1 + 3j, 0.5],
                                                 np.complex64),)),
    "sort_complex_key_real_payload": (lambda c, v: jax.lax.sort((c, v), dimension=0, num_keys=1),
                                      (C[:, :3].real.round(1) + 1j * C[:, :3].imag,
                                       np.arange(18, dtype=np.float32).reshape(6, 3))),
    "sort_real_key_complex_payload": (lambda k, c: jax.lax.sort((k, c), num_keys=1),
                                      (np.array([[3, 1, 2, 1, 0, 5]] * 2, np.int32), C[:2])),
    "transposed_tril_matmul": (lambda h: jnp.tril(h.T) @ h, (C,)),
    "cholesky_matmul": (lambda h: jnp.linalg.cholesky(h) @ h,
                        ((C @ C.conj().T + 6 * np.eye(6)).astype(np.complex64),)),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_compiled_matches_jax(name):
    f, args = PROGRAMS[name]
    text = jax.jit(f).lower(*args).as_text(dialect="hlo")
    got = compile_hlo(text, cache=False)(*(torch.from_numpy(np.array(a)) for a in args))
    for g, w in zip(got, jax.tree_util.tree_leaves(jax.jit(f)(*args)), strict=True):
        w = np.asarray(w)
        np.testing.assert_allclose(g.numpy(), w, rtol=1e-5, atol=1e-5 * np.abs(w).max())
