"""Reference rules of the library calls: ``cholesky``, ``custom-call`` (the targets of
:data:`fusion.analysis.library_calls.TARGETS`), ``fft``, ``topk`` and ``triangular-solve``.

FFTs use ``numpy.fft`` in the operand's precision (NumPy 2 transforms ``complex64`` in single
precision); the linear algebra uses ``linalg_reference`` (LAPACK's conventions) and
``tridiagonal_reference`` (LAPACK's ``gtsv``, step for step); ``topk`` is a
stable sort in XLA's total order (``-NaN < -inf < -0 < +0 < inf < NaN``; ties: the lower index
first), and the ``TopK`` custom-call sorts by its own comparator.  A custom-call to any other
target is an error naming it.

>>> from fusion.ir.hlo_module import HloInstruction
>>> from fusion.ir.shape import ArrayShape, TupleShape
>>> i = HloInstruction("t", "topk", TupleShape((ArrayShape("f32", (2,)), ArrayShape("s32", (2,)))),
...                    ("x",), (("k", 2), ("largest", True)))
>>> values, indices = eval_topk(None, i, [np.array([1.0, 3.0, 3.0, -0.0], np.float32)])
>>> values.tolist(), indices.tolist()
([3.0, 3.0], [1, 2])
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

import numpy as np

from fusion.errors import UnsupportedOpError
from fusion.evaluator import linalg_reference as lapack
from fusion.analysis.cudnn_conv_calls import is_cudnn_conv_call
from fusion.analysis.cudnn_fmha_calls import is_cudnn_fmha_call
from fusion.analysis.gemm_calls import is_gemm_call
from fusion.analysis.scaled_dots import is_block_scaled_dot_call
from fusion.analysis.sharding import is_sharding_call
from fusion.evaluator.collective_ops import eval_sharding_call
from fusion.evaluator.failures import op_error
from fusion.evaluator.cudnn_conv_ops import eval_cudnn_conv_call
from fusion.evaluator.cudnn_fmha_ops import eval_cudnn_fmha_call
from fusion.evaluator.gemm_ops import eval_gemm_call
from fusion.evaluator import scipy_lapack
from fusion.evaluator.numerics import total_order_key
from fusion.evaluator.scipy_lapack import LapackUnavailable
from fusion.evaluator.scaled_dot_ops import eval_scaled_dot
from fusion.evaluator.sort_ops import eval_sort
from fusion.evaluator.tridiagonal_reference import gtsv_numpy
from fusion.ir.hlo_module import HloInstruction
from fusion.analysis.library_calls import (
    LibraryCall, TARGETS, jacobi_svd_is_thin, layout_problem, library_call,
)
from fusion.ir.shape import ArrayShape, TupleShape

Rule = Callable[[Any, HloInstruction, list], Any]


def _call(instr: HloInstruction) -> LibraryCall:
    try:
        return library_call(instr)
    except UnsupportedOpError as err:
        raise op_error(instr, err.message) from None


# ---- FFT ------------------------------------------------------------------------------------

def fft_reference(x: np.ndarray, fft_type: str, lengths: tuple[int, ...]) -> np.ndarray:
    """XLA's ``fft`` over the last ``len(lengths)`` dims, in ``x``'s precision.

    >>> fft_reference(np.array([1, 0, 0, 0], np.float32), "RFFT", (4,)).tolist()
    [(1+0j), (1+0j), (1+0j)]
    """
    axes = tuple(range(x.ndim - len(lengths), x.ndim))
    if 0 in lengths:  # NumPy refuses empty transforms; XLA's result is empty
        lead = x.shape[:x.ndim - len(lengths)]
        dims = {"FFT": x.shape, "IFFT": x.shape, "IRFFT": lead + lengths,
                "RFFT": lead + lengths[:-1] + (0,)}[fft_type]
        return np.zeros(dims, np.float64 if fft_type == "IRFFT" else np.complex128)
    if fft_type == "FFT":
        return np.fft.fftn(x, axes=axes)
    if fft_type == "IFFT":
        return np.fft.ifftn(x, axes=axes)
    if fft_type == "RFFT":
        return np.fft.rfftn(x, s=lengths, axes=axes)
    return np.fft.irfftn(x, s=lengths, axes=axes)


def eval_fft(ev: Any, instr: HloInstruction, args: list) -> np.ndarray:
    call = _call(instr)
    return fft_reference(args[0], call.fft_type, call.fft_length)


# ---- top-k ----------------------------------------------------------------------------------

def topk_reference(x: np.ndarray, k: int, largest: bool) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` largest (or smallest) along the last dim in XLA's total order, ties by index."""
    key = total_order_key(x)
    if key.dtype == np.bool_:
        key = key.astype(np.int8)
    # ~key reverses an integer order without overflow; a stable sort keeps ties by index.
    order = np.argsort(~key if largest else key, axis=-1, kind="stable")[..., :k]
    return np.take_along_axis(x, order, axis=-1), order.astype(np.int32)


def eval_topk(ev: Any, instr: HloInstruction, args: list) -> tuple[np.ndarray, np.ndarray]:
    k = instr.attr("k")
    return topk_reference(args[0], k, bool(instr.attr("largest", True)))


def _eval_topk_target(ev: Any, instr: HloInstruction, call: LibraryCall, args: list) -> Any:
    """XLA:CPU's ``TopK`` custom-call: a stable sort of (values, iota) by its comparator."""
    x = args[0]
    comparators = instr.attr("called_computations", ())
    comparators = (comparators,) if isinstance(comparators, str) else tuple(comparators)
    if len(comparators) != 1:
        raise op_error(instr, "TopK needs one comparator in called_computations")
    k = instr.shape.elements[0].dims[-1]
    iota = np.broadcast_to(np.arange(x.shape[-1], dtype=np.int32), x.shape)
    shape = TupleShape((ArrayShape(instr.shape.elements[0].dtype, x.shape),
                        ArrayShape("s32", x.shape)))
    sort = replace(instr, opcode="sort", shape=shape,
                   attributes=(("dimensions", (x.ndim - 1,)), ("is_stable", True),
                               ("to_apply", comparators[0])))
    values, indices = eval_sort(ev, sort, [x, iota])
    return values[..., :k], indices[..., :k]


# ---- linear algebra -------------------------------------------------------------------------

def eval_cholesky(ev: Any, instr: HloInstruction, args: list) -> np.ndarray:
    """XLA's ``cholesky`` op: the factor in the asked triangle, zeros in the other (as XLA's
    expansion leaves it); NaN for a matrix that is not positive definite."""
    call = _call(instr)
    factor, info = lapack.potrf(args[0], call.lower)
    factor = np.tril(factor) if call.lower else np.triu(factor)
    return np.where((info != 0)[..., None, None], np.nan, factor).astype(factor.dtype)


def eval_triangular_solve(ev: Any, instr: HloInstruction, args: list) -> np.ndarray:
    return _solve(_call(instr), args)


def _solve(call: LibraryCall, args: list) -> np.ndarray:
    return lapack.trsm(args[0], args[1], left_side=call.left_side, lower=call.lower,
                       transpose_a=call.transpose_a, unit_diagonal=call.unit_diagonal)


def _target_cholesky(ev, instr, call, args):
    return lapack.potrf(args[0], call.lower)


def _target_eig(ev, instr, call, args):
    return lapack.geev_outputs(args[0], call.left_vectors, call.right_vectors)


def _scipy_lapack(instr: HloInstruction, run: Callable[[], Any]) -> Any:
    try:
        return run()
    except LapackUnavailable as err:
        raise op_error(instr, f"{instr.attr('custom_call_target')}: {err}") from None


def _target_hessenberg(ev, instr, call, args):
    return _scipy_lapack(instr, lambda: scipy_lapack.gehrd(args[0], call.low,
                                                           call.high or args[0].shape[-1]))


def _target_schur(ev, instr, call, args):
    return _scipy_lapack(instr, lambda: scipy_lapack.gees_outputs(args[0], call.compute_v))


def _target_tridiagonal(ev, instr, call, args):
    return _scipy_lapack(instr, lambda: scipy_lapack.sytrd(args[0], call.lower))


def _target_eigh(ev, instr, call, args):
    return lapack.syevd(args[0], call.lower)


def _target_householder_product(ev, instr, call, args):
    return lapack.orgqr(args[0], args[1])


def _target_lu(ev, instr, call, args):
    return lapack.getrf(args[0])


def _target_lu_pivots_to_permutation(ev, instr, call, args):
    return lapack.pivots_to_permutation(args[0], instr.shape.dims[-1])


def _target_qr(ev, instr, call, args):
    return lapack.geqrf(args[0])


def _target_svd(ev, instr, call, args):
    a = args[0]
    shapes = instr.shape.elements
    s, u, vh, info = lapack.gesdd(a, call.full_matrices and not _thin_jacobi(call, shapes, a),
                                  call.compute_uv)
    if u is None:  # not computed: the outputs exist, their values are unspecified (zero)
        u, v = (np.zeros(shapes[k].dims, a.dtype) for k in (2, 3))
        return a, s, u, v, info
    if call.svd_v:
        return a, s, u, np.conj(np.swapaxes(vh, -1, -2)), info
    if call.svd_swapped:
        return a, s, vh, u, info
    return a, s, u, vh, info


def _thin_jacobi(call: LibraryCall, shapes: tuple, a: np.ndarray) -> bool:
    return call.svd_v and jacobi_svd_is_thin(shapes, *a.shape[-2:])


def _target_topk(ev, instr, call, args):
    return _eval_topk_target(ev, instr, call, args)


def _target_triangular_solve(ev, instr, call, args):
    return _solve(call, args)


def _target_tridiagonal_solve(ev, instr, call, args):
    dl, d, du, x, info = gtsv_numpy(*args)
    if call.info:
        return dl, d, du, x, info
    # cuSPARSE reports no zero pivot: a system LAPACK finds singular solves to NaN here.
    return np.where((info != 0)[..., None, None], np.array(np.nan, x.dtype), x)


_ROUTINES: dict[str, Callable[[Any, HloInstruction, LibraryCall, list], Any]] = {
    "cholesky": _target_cholesky,
    "eig": _target_eig,
    "eigh": _target_eigh,
    "hessenberg": _target_hessenberg,
    "householder_product": _target_householder_product,
    "lu": _target_lu,
    "lu_pivots_to_permutation": _target_lu_pivots_to_permutation,
    "qr": _target_qr,
    "schur": _target_schur,
    "svd": _target_svd,
    "topk": _target_topk,
    "triangular_solve": _target_triangular_solve,
    "tridiagonal": _target_tridiagonal,
    "tridiagonal_solve": _target_tridiagonal_solve,
}

#: custom-call target -> its reference rule (alphabetical; every target of ``TARGETS``).
CUSTOM_CALL_RULES = {target: _ROUTINES[routine] for target, routine in TARGETS.items()}


def eval_custom_call(ev: Any, instr: HloInstruction, args: list) -> Any:
    if is_sharding_call(instr):
        return eval_sharding_call(ev, instr, args)
    if is_gemm_call(instr):
        return eval_gemm_call(ev, instr, args)
    if is_cudnn_conv_call(instr):
        return eval_cudnn_conv_call(ev, instr, args)
    if is_cudnn_fmha_call(instr):
        return eval_cudnn_fmha_call(ev, instr, args)
    if is_block_scaled_dot_call(instr):
        return eval_scaled_dot(ev, instr, args)
    target = instr.attr("custom_call_target", "?")
    rule = CUSTOM_CALL_RULES.get(target)
    if rule is None:
        raise op_error(instr, f"custom-call target {target} is not supported")
    call = _call(instr)
    problem = layout_problem(call, instr, ev.operand_shapes(instr))
    if problem is not None:
        raise op_error(instr, problem)
    return rule(ev, instr, call, args)


LIBRARY_RULES: dict[str, Rule] = {
    "cholesky": eval_cholesky,
    "custom-call": eval_custom_call,
    "fft": eval_fft,
    "topk": eval_topk,
    "triangular-solve": eval_triangular_solve,
}

__all__ = ["CUSTOM_CALL_RULES", "LIBRARY_RULES", "eval_cholesky", "eval_custom_call", "eval_fft",
           "eval_topk", "eval_triangular_solve", "fft_reference", "topk_reference"]
