"""LAPACK's tridiagonal solve ``?gtsv`` on JAX's operands, for NumPy arrays and torch tensors.

``jax.lax.linalg.tridiagonal_solve(dl, d, du, b)`` solves ``A X = B`` for tridiagonal ``A``
given by its sub-, main and superdiagonals, each ``[..., n]`` (``dl[..., 0]`` and
``du[..., n-1]`` are not read), with ``b`` ``[..., n, nrhs]``.  On the CPU JAX calls LAPACK's
``?gtsv`` (``lapack_sgtsv_ffi``: LAPACK's ``DL`` is ``dl[..., 1:]``), which returns the
overwritten diagonals (``U``'s diagonal, first and second superdiagonals), the solution and
``info``, the first zero pivot (1-based; the routine stops there, leaving the rest as it
was); on an NVIDIA GPU cuSPARSE's ``gtsv2`` returns the solution only.

:func:`gtsv` is LAPACK's algorithm step for step (Gaussian elimination with partial pivoting:
rows ``k`` and ``k+1`` swap when ``|d_k| < |dl_{k+1}|``, ``|re| + |im|`` for complex values
as ``cgtsv`` compares them, whose zero subdiagonal needs no step), batched over the leading
dims: the evaluator runs it on NumPy arrays, the host on the device's torch tensors, with the
same roundings.

>>> dl = np.array([0.0, 1.0, 1.0]); d = np.array([2.0, 2.0, 2.0]); du = np.array([1.0, 1.0, 0.0])
>>> x = gtsv_numpy(dl, d, du, np.array([[3.0], [4.0], [3.0]]))[3]
>>> x.ravel().tolist()
[1.0, 1.0, 1.0]
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

Where = Callable[[Any, Any, Any], Any]


def _magnitude(x: Any, is_complex: bool) -> Any:
    return abs(x.real) + abs(x.imag) if is_complex else abs(x)


def gtsv(dl: Any, d: Any, du: Any, b: Any, info: Any, where: Where, is_complex: bool
         ) -> tuple[Any, Any, Any, Any, Any]:
    """LAPACK ``?gtsv`` (module docstring), overwriting its arguments as LAPACK does:
    ``(dl, d, du, b)`` become the factor's diagonals and the solution, ``info`` (zeros of the
    batch dims, ``int32``) the first zero pivot.  ``where`` is ``numpy.where`` or
    ``torch.where``."""
    n = d.shape[-1]
    for k in range(n - 1):
        live = info == 0
        # copies (``+ 0``): a slice is a view, and the assignments below overwrite its source
        sub, dk = dl[..., k + 1] + 0, d[..., k] + 0
        if is_complex:  # cgtsv: a zero subdiagonal needs no step
            skip = sub == 0
            singular = skip & (dk == 0)
            keep = ~skip & (_magnitude(dk, True) >= _magnitude(sub, True))
        else:
            skip = sub != sub  # never: NaN compares unequal, so no element skips
            keep = abs(dk) >= abs(sub)
            singular = keep & (dk == 0)
        info = where(live & singular, k + 1, info)
        live = live & ~singular & ~skip
        swap, keep = live & ~keep, live & keep
        fact = where(keep, sub / where(keep, dk, 1), dk / where(swap, sub, 1))
        below, upper = d[..., k + 1] + 0, du[..., k] + 0
        d[..., k + 1] = where(keep, below - fact * upper, where(swap, upper - fact * below, below))
        d[..., k] = where(swap, sub, dk)
        du[..., k] = where(swap, below, upper)
        if k < n - 2:
            second = du[..., k + 1] + 0
            dl[..., k + 1] = where(keep, 0, where(swap, second, sub))
            du[..., k + 1] = where(swap, -fact * second, second)
        row, next_row = b[..., k, :] + 0, b[..., k + 1, :] + 0
        keep_rows, swap_rows = keep[..., None], swap[..., None]
        f = fact[..., None]
        b[..., k + 1, :] = where(keep_rows, next_row - f * row,
                                 where(swap_rows, row - f * next_row, next_row))
        b[..., k, :] = where(swap_rows, next_row, row)
    info = where((info == 0) & (d[..., n - 1] == 0), n, info)
    solved = (info == 0)[..., None]
    x = [None] * n
    for k in reversed(range(n)):
        value = b[..., k, :] + 0
        if k + 1 < n:
            value = value - du[..., k, None] * x[k + 1]
        if k + 2 < n:
            value = value - dl[..., k + 1, None] * x[k + 2]
        x[k] = value / where(solved, d[..., k, None], 1)
    for k in range(n):
        b[..., k, :] = where(solved, x[k], b[..., k, :])
    return dl, d, du, b, info


def gtsv_numpy(dl: np.ndarray, d: np.ndarray, du: np.ndarray, b: np.ndarray
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`gtsv` on copies of NumPy arrays: ``(dl, d, du, x, info)``."""
    copies = [np.array(a, copy=True) for a in (dl, d, du, b)]
    info = np.zeros(d.shape[:-1], np.int32)
    with np.errstate(all="ignore"):  # the masked-off lanes divide by zero
        out = gtsv(*copies, info, np.where, np.iscomplexobj(d))
    return out[:4] + (np.asarray(out[4], np.int32),)


__all__ = ["gtsv", "gtsv_numpy"]
