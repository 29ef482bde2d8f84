"""LAPACK's reductions NumPy does not expose, through SciPy's LAPACK: the Schur decomposition
``gees`` (``jax.scipy.linalg.schur``, ``sqrtm``), the Hessenberg reduction ``gehrd``
(``jax.lax.linalg.hessenberg``) and the tridiagonal reduction ``sytrd``/``hetrd``
(``jax.lax.linalg.tridiagonal``).

jaxlib runs XLA:CPU's LAPACK custom-calls with SciPy's LAPACK, asking each routine for its
optimal workspace first; so does this module, so its outputs are XLA:CPU's, bit for bit:
the packed reflectors with their ``tau``, the Schur form and vectors, ``info``.  Batched over
leading dims; each routine computes in its operand's precision.  SciPy is optional (it is
installed with jax): without it these raise ``LapackUnavailable``.

>>> t, vs, values, sdim, info = gees(np.array([[2.0, 1.0], [0.0, 3.0]]), compute_v=True)
>>> t.tolist(), values.tolist(), int(info)
([[2.0, 1.0], [0.0, 3.0]], [(2+0j), (3+0j)], 0)
"""
from __future__ import annotations

from typing import Any

import numpy as np

from fusion.evaluator.linalg_reference import eigenvalue_outputs


class LapackUnavailable(ImportError):
    """SciPy, whose LAPACK these routines call, is not installed."""


def _functions(name: str, a: np.ndarray) -> Any:
    try:
        from scipy.linalg import lapack  # noqa: PLC0415 - optional: installed with jax
    except ImportError:
        raise LapackUnavailable(f"LAPACK's {name} runs through SciPy, which is not installed "
                                "(pip install scipy; it comes with jax)") from None
    return lapack, lapack.get_lapack_funcs(name, (a,))


def _optimal_lwork(lapack: Any, name: str, a: np.ndarray, *args: Any, **kwargs: Any) -> int:
    query = lapack.get_lapack_funcs(name + "_lwork", (a,))
    work, _ = query(*args, **kwargs)
    return max(1, int(np.real(work)))


def _stack(a: np.ndarray) -> tuple[np.ndarray, tuple[int, ...]]:
    a = np.asarray(a)
    return a.reshape((-1,) + a.shape[-2:]), a.shape[:-2]


def gees(a: np.ndarray, compute_v: bool) -> tuple[np.ndarray, ...]:
    """Schur decomposition ``a = vs t vs^H`` of each matrix, unsorted: (t, vs, eigenvalues
    (complex), sdim, info); ``vs`` zeros when not computed."""
    stack, batch = _stack(a)
    lapack, gees_fn = _functions("gees", stack[0])
    n = stack.shape[-1]
    t, vs = np.empty_like(stack), np.zeros_like(stack)
    values = np.empty((len(stack), n), np.result_type(stack.dtype, np.complex64))
    sdim, info = np.zeros(len(stack), np.int32), np.zeros(len(stack), np.int32)
    for b, matrix in enumerate(stack):
        # The workspace query: gees with lwork=-1 returns the optimal size in work[0].
        query = gees_fn(lambda *x: 0, matrix, compute_v=int(compute_v), lwork=-1)
        lwork = max(1, int(np.real(query[-2][0])))
        out = gees_fn(lambda *x: 0, matrix, compute_v=int(compute_v), lwork=lwork)
        if np.iscomplexobj(matrix):
            t[b], sdim[b], values[b], vectors, _, info[b] = out
        else:
            t[b], sdim[b], wr, wi, vectors, _, info[b] = out
            values[b] = wr + 1j * wi.astype(values.dtype)
        if compute_v:
            vs[b] = vectors
    shaped = lambda x: x.reshape(batch + x.shape[1:])  # noqa: E731
    return shaped(t), shaped(vs), shaped(values), shaped(sdim), shaped(info)


def gees_outputs(a: np.ndarray, compute_v: bool) -> tuple[np.ndarray, ...]:
    """The outputs of JAX's ``gees`` calls: the Schur form and vectors, the eigenvalues
    (``linalg_reference.eigenvalue_outputs``), sdim and info."""
    t, vs, values, sdim, info = gees(a, compute_v)
    return (t, vs, *eigenvalue_outputs(values, np.asarray(a).dtype), sdim, info)


def gehrd(a: np.ndarray, low: int, high: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Hessenberg reduction of rows and columns ``low..high`` (1-based, as LAPACK's ilo and
    ihi) of each matrix: (the Hessenberg form with the reflectors packed below it, their
    ``tau`` (``n - 1``), info)."""
    stack, batch = _stack(a)
    lapack, gehrd_fn = _functions("gehrd", stack[0])
    n = stack.shape[-1]
    packed, taus = np.empty_like(stack), np.zeros((len(stack), max(n - 1, 0)), stack.dtype)
    info = np.zeros(len(stack), np.int32)
    lwork = _optimal_lwork(lapack, "gehrd", stack[0], n, lo=low - 1, hi=high - 1)
    for b, matrix in enumerate(stack):
        packed[b], taus[b], info[b] = gehrd_fn(matrix, lo=low - 1, hi=high - 1, lwork=lwork)
    shaped = lambda x: x.reshape(batch + x.shape[1:])  # noqa: E731
    return shaped(packed), shaped(taus), shaped(info)


def sytrd(a: np.ndarray, lower: bool) -> tuple[np.ndarray, ...]:
    """Tridiagonal reduction of each symmetric (Hermitian) matrix's ``lower`` or upper
    triangle: (the reflectors packed in that triangle around the tridiagonal, its diagonal
    ``d`` and off-diagonal ``e`` (real), ``tau``, info)."""
    stack, batch = _stack(a)
    name = "hetrd" if np.iscomplexobj(stack) else "sytrd"
    lapack, fn = _functions(name, stack[0])
    n = stack.shape[-1]
    real = np.real(np.zeros((), stack.dtype)).dtype
    packed = np.empty_like(stack)
    d, e = np.empty((len(stack), n), real), np.empty((len(stack), max(n - 1, 0)), real)
    taus = np.empty((len(stack), max(n - 1, 0)), stack.dtype)
    info = np.zeros(len(stack), np.int32)
    lwork = _optimal_lwork(lapack, name, stack[0], n, lower=int(lower))
    for b, matrix in enumerate(stack):
        packed[b], d[b], e[b], taus[b], info[b] = fn(matrix, lower=int(lower), lwork=lwork)
    shaped = lambda x: x.reshape(batch + x.shape[1:])  # noqa: E731
    return shaped(packed), shaped(d), shaped(e), shaped(taus), shaped(info)


__all__ = ["LapackUnavailable", "gees", "gees_outputs", "gehrd", "sytrd"]
