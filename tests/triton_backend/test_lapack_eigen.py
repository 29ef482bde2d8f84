"""General eigen-decompositions and the reductions behind them: ``jax.lax.linalg.eig`` and
``jnp.linalg.eig`` (LAPACK's ``geev`` on the CPU, ``cuhybrid_eig_*`` for an NVIDIA GPU),
``jax.scipy.linalg.schur`` (``gees``), ``jax.lax.linalg.hessenberg`` (``gehrd``) and
``jax.lax.linalg.tridiagonal`` (``sytrd``/``hetrd``, ``cusolver_sytrd_ffi`` for a GPU).
Truths: XLA itself (JAX running the same program, bit for bit: jaxlib calls SciPy's LAPACK,
as the evaluator and the host rules do), and the eigen-equations by reconstruction for the
NumPy fallback of ``geev``, whose vectors may differ from XLA's by each column's phase."""
from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

from fusion.errors import EvaluationError, FusionCompilerError
from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo
from triton_backend import compile_hlo

jax = pytest.importorskip("jax")
pytest.importorskip("scipy")
import jax.numpy as jnp  # noqa: E402


def _matrices(dtype, seed: int = 1) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((3, 5, 5))
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal((3, 5, 5))
    x = x.astype(dtype)
    x[2, 1, 3] = np.nan  # a matrix LAPACK cannot decompose: NaN results, as JAX gives them
    return x


def _lowered(x, left: bool) -> str:
    return jax.jit(lambda a: jax.lax.linalg.eig(a, compute_left_eigenvectors=left)).lower(
        x).as_text(dialect="hlo")


def _matches_xla_bit_for_bit(f, x, target: str) -> None:
    """``f``'s program, evaluated and compiled, gives what JAX gives, bit for bit."""
    text = jax.jit(f).lower(x).as_text(dialect="hlo")
    assert target in text
    want = [np.asarray(w) for w in jax.tree_util.tree_leaves(jax.jit(f)(x))]
    evaluated = evaluate(parse_hlo(text), x)
    compiled = [t.numpy() for t in compile_hlo(text, cache=False)(torch.from_numpy(x))]
    for e, c, w in zip(evaluated, compiled, want):
        np.testing.assert_array_equal(e, w)
        np.testing.assert_array_equal(c, w)


@pytest.mark.parametrize("dtype, left", [(np.float32, True), (np.complex64, True),
                                         (np.float32, False)])
def test_evaluated_and_compiled_match_xla_bit_for_bit(dtype, left):
    _matches_xla_bit_for_bit(lambda a: jax.lax.linalg.eig(a, compute_left_eigenvectors=left),
                             _matrices(dtype), "geev_ffi")


def test_the_gpu_call_computes_what_the_cpu_call_does():
    """``cuhybrid_eig_real`` (its config carries a string: ``magma = "auto"``)."""
    x = _matrices(np.float32)
    text = _lowered(x, True)
    gpu = text.replace('custom_call_target="lapack_sgeev_ffi"',
                       'custom_call_target="cuhybrid_eig_real"').replace(
        "backend_config={compute_left = 86 : ui8, compute_right = 86 : ui8}",
        'backend_config={left = true, magma = "auto", right = true}')
    assert "cuhybrid_eig_real" in gpu and "magma" in gpu
    for g, c in zip(evaluate(parse_hlo(gpu), x), evaluate(parse_hlo(text), x)):
        np.testing.assert_array_equal(g, c)


def test_without_scipy_the_eigen_equations_hold(monkeypatch):
    """NumPy's ``geev`` (another LAPACK build): the eigenvalues are XLA's; each right vector
    solves ``A v = w v`` and each left one ``u^H A = w u^H``, with norm 1."""
    monkeypatch.setitem(sys.modules, "scipy", None)
    monkeypatch.setitem(sys.modules, "scipy.linalg", None)
    x = _matrices(np.float64)[:2]
    with jax.enable_x64(True):
        text = _lowered(x, True)
        want = jax.jit(lambda a: jnp.linalg.eigvals(a))(x)
    w, vl, vr = evaluate(parse_hlo(text), x)
    np.testing.assert_allclose(w, np.asarray(want), rtol=1e-12, atol=1e-12)
    for a, values, left, right in zip(x, w, vl, vr):
        np.testing.assert_allclose(a @ right, right * values, atol=1e-10)
        np.testing.assert_allclose(left.conj().T @ a, values[:, None] * left.conj().T,
                                   atol=1e-10)
        np.testing.assert_allclose(np.linalg.norm(left, axis=0), 1, atol=1e-12)


REDUCTIONS = {
    "schur": lambda a: jax.scipy.linalg.schur(a[0]),
    "hessenberg": lambda a: jax.lax.linalg.hessenberg(a),
    "tridiagonal_lower": lambda a: jax.lax.linalg.tridiagonal(a, lower=True),
    "tridiagonal_upper": lambda a: jax.lax.linalg.tridiagonal(a, lower=False),
}


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
@pytest.mark.parametrize("dtype", [np.float32, np.complex64])
def test_reductions_evaluated_and_compiled_match_xla_bit_for_bit(name, dtype):
    _matches_xla_bit_for_bit(REDUCTIONS[name], _matrices(dtype)[:2], "_ffi")


def test_the_gpu_tridiagonal_call_and_the_refusals():
    x = _matrices(np.float32)[:2]
    text = jax.jit(REDUCTIONS["tridiagonal_lower"]).lower(x).as_text(dialect="hlo")
    gpu = text.replace('custom_call_target="lapack_ssytrd_ffi"',
                       'custom_call_target="cusolver_sytrd_ffi"').replace(
        "backend_config={uplo = 76 : ui8}", "backend_config={lower = true}")
    assert "cusolver_sytrd_ffi" in gpu
    for g, c in zip(evaluate(parse_hlo(gpu), x), evaluate(parse_hlo(text), x)):
        np.testing.assert_array_equal(g, c)
    schur = jax.jit(REDUCTIONS["schur"]).lower(x).as_text(dialect="hlo")
    with pytest.raises(FusionCompilerError, match="sort 'S'"):
        evaluate(parse_hlo(schur.replace("sort = 78", "sort = 83")), x)


def test_without_scipy_the_reductions_are_located_errors(monkeypatch):
    monkeypatch.setitem(sys.modules, "scipy", None)
    monkeypatch.setitem(sys.modules, "scipy.linalg", None)
    x = _matrices(np.float32)[:2]
    text = jax.jit(REDUCTIONS["hessenberg"]).lower(x).as_text(dialect="hlo")
    with pytest.raises(EvaluationError, match="runs through SciPy, which is not installed") as err:
        evaluate(parse_hlo(text), x)
    assert "lapack_sgehrd_ffi" in str(err.value) and str(err.value)[0].isdigit()
