"""Library calls on the host: ``torch.fft``, ``torch.linalg`` and ``torch.sort`` on the module's
device tensors, between the generated kernels (as XLA calls cuFFT, cuSOLVER and LAPACK).

One rule per opcode in :data:`LIBRARY_HOST_RULES` (``cholesky``, ``custom-call``, ``fft``,
``topk``, ``triangular-solve``), and one torch routine per custom-call target in
:data:`CUSTOM_CALL_HOST_RULES` (alphabetical, every target of ``fusion.analysis.library_calls.TARGETS``).
Values are logical, row-major and contiguous tensors, as ``host_ops`` holds them (the coverage
check refuses tiled layouts here), so an operand's ``{0,1}`` layout, which only tells LAPACK
how the buffer is laid out, changes nothing.  Results follow LAPACK's conventions exactly as the
reference does (``fusion.evaluator.linalg_reference``): the untouched triangle of ``potrf``,
1-based pivots, ``geqrf``'s packed reflectors, one ``int32`` ``info`` per matrix.

>>> import torch
>>> from fusion.ir.shape import ArrayShape
>>> x = HloInstruction("x", "parameter", ArrayShape("f32", (4,)), (), (("parameter_number", 0),))
>>> f = HloInstruction("f", "fft", ArrayShape("c64", (3,)), ("x",), (("fft_type", "RFFT"), ("fft_length", (4,))))
>>> run = host_fft(HloComputation("c", (x, f), "f"), f, torch.device("cpu"))
>>> run([torch.tensor([1.0, 0.0, 0.0, 0.0])], None).tolist()
[(1+0j), (1+0j), (1+0j)]
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Union

import numpy as np
import torch

from fusion.errors import FusionCompilerError, UnsupportedOpError
from fusion.analysis.sharding import is_sharding_call
from fusion.ir.hlo_module import HloComputation, HloInstruction
from fusion.analysis.library_calls import (
    LibraryCall, TARGETS, jacobi_svd_is_thin, layout_problem, library_call,
)
from fusion.ir.shape import ArrayShape, TupleShape
from fusion.evaluator.library_ops import CUSTOM_CALL_RULES
from fusion.evaluator.tridiagonal_reference import gtsv
from triton_backend.host.collectives import host_sharding_call

Value = Union[torch.Tensor, tuple]
Executor = Callable[[Sequence[Value], Any], Value]
Rule = Callable[[HloComputation, HloInstruction, torch.device], Executor]
TargetRule = Callable[[HloInstruction, LibraryCall, Sequence[torch.Tensor]], Value]


def _decoded(instr: HloInstruction) -> LibraryCall:
    try:
        return library_call(instr)
    except FusionCompilerError:
        raise
    except (KeyError, TypeError, ValueError) as err:  # a malformed attribute: say where
        loc = instr.location
        raise UnsupportedOpError(f"{instr.opcode} %{instr.name}: {err}",
                                 line=loc.line if loc else None,
                                 column=loc.column if loc else None, where=instr.name) from None


def _contiguous(value: Value) -> Value:
    if isinstance(value, tuple):
        return tuple(_contiguous(v) for v in value)
    return value.contiguous()


# ---- FFT ------------------------------------------------------------------------------------

def torch_fft(x: torch.Tensor, fft_type: str, lengths: tuple[int, ...],
              out_shape: ArrayShape) -> torch.Tensor:
    """XLA's ``fft`` with ``torch.fft`` over the last ``len(lengths)`` dims."""
    dims = tuple(range(x.dim() - len(lengths), x.dim()))
    if 0 in lengths or x.numel() == 0:
        dtype = {"c64": torch.complex64, "c128": torch.complex128, "f32": torch.float32,
                 "f64": torch.float64}[out_shape.dtype]
        return torch.zeros(out_shape.dims, dtype=dtype, device=x.device)
    if fft_type == "FFT":
        return torch.fft.fftn(x, dim=dims)
    if fft_type == "IFFT":
        return torch.fft.ifftn(x, dim=dims)
    if fft_type == "RFFT":
        return torch.fft.rfftn(x, s=lengths, dim=dims)
    return torch.fft.irfftn(x, s=lengths, dim=dims)


def host_fft(comp: HloComputation, instr: HloInstruction, device: torch.device) -> Executor:
    call = _decoded(instr)
    shape = instr.shape

    def run(operands: Sequence[Value], ctx: Any) -> Value:
        return torch_fft(operands[0], call.fft_type, call.fft_length, shape).contiguous()

    return run


# ---- top-k ----------------------------------------------------------------------------------

_SIGNED_OF = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32,
              torch.float64: torch.int64}


def total_order_key(x: torch.Tensor) -> torch.Tensor:
    """Integers ordered as XLA's total order of ``x`` (floats: -NaN < -inf < -0 < +0 < inf <
    NaN), in a dtype ``torch.sort`` handles on every device."""
    if x.dtype in _SIGNED_OF:
        bits = x.contiguous().view(_SIGNED_OF[x.dtype])
        magnitude = torch.iinfo(bits.dtype).max
        return torch.where(bits < 0, bits ^ magnitude, bits)
    if x.dtype == torch.bool:
        return x.to(torch.uint8)
    if x.dtype == torch.uint64:  # flip the top bit: unsigned order as signed int64 order
        return x.view(torch.int64) ^ torch.iinfo(torch.int64).min
    if x.dtype in (torch.uint16, torch.uint32):
        return x.to(torch.int64)
    return x


def torch_topk(x: torch.Tensor, k: int, largest: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` largest (smallest) along the last dim, XLA's total order, ties by index."""
    _, order = torch.sort(total_order_key(x), dim=-1, descending=largest, stable=True)
    order = order[..., :k].contiguous()
    return torch.gather(x, -1, order).contiguous(), order.to(torch.int32)


def host_topk(comp: HloComputation, instr: HloInstruction, device: torch.device) -> Executor:
    call, k = _decoded(instr), instr.attr("k")

    def run(operands: Sequence[Value], ctx: Any) -> Value:
        return torch_topk(operands[0], k, call.largest)

    return run


# ---- linear algebra -------------------------------------------------------------------------

def _hermitian(a: torch.Tensor, lower: bool) -> torch.Tensor:
    """The Hermitian matrices whose ``lower`` (upper) triangle is that of ``a``."""
    tri = torch.tril(a) if lower else torch.triu(a)
    strict = torch.tril(a, -1) if lower else torch.triu(a, 1)
    out = tri + strict.mH
    if a.is_complex():
        out.diagonal(dim1=-2, dim2=-1).imag.zero_()
    return out


def _finite_matrices(a: torch.Tensor) -> torch.Tensor:
    """Per matrix: all its entries finite (LAPACK fails on the others)."""
    parts = torch.view_as_real(a) if a.is_complex() else a
    return torch.isfinite(parts).reshape(*a.shape[:-2], -1).all(-1)


def _potrf(a: torch.Tensor, lower: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(factor in the ``lower`` triangle, the other triangle of ``a``; info)."""
    finite = _finite_matrices(a)
    h = _hermitian(torch.where(finite[..., None, None], a, torch.zeros_like(a)), lower)
    factor, info = torch.linalg.cholesky_ex(h, upper=not lower)
    info = torch.where(finite, info, torch.ones_like(info))  # NaN: the first minor fails
    other = torch.triu(a, 1) if lower else torch.tril(a, -1)
    factor = (torch.tril(factor) if lower else torch.triu(factor)) + other
    return torch.where((info == 0)[..., None, None], factor, a), info.to(torch.int32)


def host_cholesky(comp: HloComputation, instr: HloInstruction, device: torch.device) -> Executor:
    """XLA's ``cholesky`` op: the factor, zeros in the other triangle, NaN if not definite."""
    call = _decoded(instr)

    def run(operands: Sequence[Value], ctx: Any) -> Value:
        factor, info = _potrf(operands[0], call.lower)
        factor = torch.tril(factor) if call.lower else torch.triu(factor)
        nan = torch.full_like(factor, float("nan"))
        return torch.where((info == 0)[..., None, None], factor, nan).contiguous()

    return run


def _solve(call: LibraryCall, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    op, upper = a, not call.lower
    if call.transpose_a != "N":
        op, upper = (a.mH if call.transpose_a == "C" else a.mT), call.lower
    return torch.linalg.solve_triangular(op, b, upper=upper, left=call.left_side,
                                         unitriangular=call.unit_diagonal).contiguous()


def host_triangular_solve(comp: HloComputation, instr: HloInstruction,
                          device: torch.device) -> Executor:
    call = _decoded(instr)

    def run(operands: Sequence[Value], ctx: Any) -> Value:
        return _solve(call, operands[0], operands[1])

    return run


def _target_cholesky(instr, call, operands):
    return _potrf(operands[0], call.lower)


def _reference_on_the_host(instr, call, operands):
    """No torch routine gives left eigenvectors, XLA's phases, a Schur form or a Hessenberg
    or tridiagonal reduction: the evaluator's own LAPACK rule (SciPy's LAPACK, as XLA:CPU
    calls it) on the host's copy of the matrix, its outputs back on the operand's device
    (XLA:GPU's eig is a host LAPACK or MAGMA call too)."""
    a = operands[0]
    rule = CUSTOM_CALL_RULES[instr.attr("custom_call_target")]
    outputs = rule(None, instr, call, [a.detach().cpu().numpy()])
    return tuple(torch.from_numpy(np.ascontiguousarray(x)).to(a.device) for x in outputs)


def _target_eigh(instr, call, operands):
    a = operands[0]
    finite = _finite_matrices(a)
    safe = torch.where(finite[..., None, None], a, torch.zeros_like(a))
    values, vectors = torch.linalg.eigh(_hermitian(safe, call.lower),
                                        UPLO="L" if call.lower else "U")
    bad = ~finite
    vectors = torch.where(bad[..., None, None], torch.full_like(vectors, float("nan")), vectors)
    values = torch.where(bad[..., None], torch.full_like(values, float("nan")), values)
    return vectors, values, bad.to(torch.int32)


def _target_householder_product(instr, call, operands):
    return torch.linalg.householder_product(operands[0], operands[1])


def _target_lu(instr, call, operands):
    lu, pivots, info = torch.linalg.lu_factor_ex(operands[0])
    return lu, pivots.to(torch.int32), info.to(torch.int32)


def _target_lu_pivots_to_permutation(instr, call, operands):
    pivots = operands[0].to(torch.int64)
    size = instr.shape.dims[-1]
    perm = torch.arange(size, device=pivots.device).expand(*pivots.shape[:-1], size).clone()
    for i in range(pivots.shape[-1]):  # 0-based swaps; one out of range is skipped
        j = pivots[..., i:i + 1]
        keep = (j >= 0) & (j < size)
        j = torch.where(keep, j, torch.full_like(j, i))
        at_i, at_j = perm[..., i:i + 1].clone(), perm.gather(-1, j)
        perm[..., i:i + 1] = at_j
        perm.scatter_(-1, j, at_i)
    return perm.to(torch.int32)


def _target_qr(instr, call, operands):
    return torch.geqrf(operands[0])


def _target_svd(instr, call, operands):
    a = operands[0]
    shapes = instr.shape.elements
    finite = _finite_matrices(a)
    safe = torch.where(finite[..., None, None], a, torch.zeros_like(a))
    m, n = a.shape[-2:]
    thin = call.svd_v and jacobi_svd_is_thin(shapes, m, n)
    full = call.full_matrices and not thin
    if not call.compute_uv:
        s = torch.linalg.svdvals(safe)
        u, v = (torch.zeros(shapes[k].dims, dtype=a.dtype, device=a.device) for k in (2, 3))
    else:
        u, s, v = torch.linalg.svd(safe, full_matrices=full)
        if call.svd_v:
            v = v.mH
        elif call.svd_swapped:
            u, v = v, u
    bad = ~finite
    nan = lambda t, extra: torch.where(bad.reshape(bad.shape + (1,) * extra),  # noqa: E731
                                       torch.full_like(t, float("nan")), t)
    if call.compute_uv:
        u, v = nan(u, 2), nan(v, 2)
    return a, nan(s, 1), u, v, bad.to(torch.int32)


def _target_topk(instr, call, operands):
    return torch_topk(operands[0], instr.shape.elements[0].dims[-1], largest=True)


def _target_triangular_solve(instr, call, operands):
    return _solve(call, operands[0], operands[1])


def _target_tridiagonal_solve(instr, call, operands):
    dl, d, du, b = (t.clone() for t in operands)
    info = torch.zeros(d.shape[:-1], dtype=torch.int32, device=d.device)
    dl, d, du, x, info = gtsv(dl, d, du, b, info, torch.where, d.is_complex())
    if call.info:
        return dl, d, du, x, info
    return torch.where((info != 0)[..., None, None], torch.full_like(x, float("nan")), x)


_ROUTINES: dict[str, TargetRule] = {
    "cholesky": _target_cholesky,
    "eig": _reference_on_the_host,
    "eigh": _target_eigh,
    "hessenberg": _reference_on_the_host,
    "householder_product": _target_householder_product,
    "lu": _target_lu,
    "lu_pivots_to_permutation": _target_lu_pivots_to_permutation,
    "qr": _target_qr,
    "schur": _reference_on_the_host,
    "svd": _target_svd,
    "topk": _target_topk,
    "triangular_solve": _target_triangular_solve,
    "tridiagonal": _reference_on_the_host,
    "tridiagonal_solve": _target_tridiagonal_solve,
}

#: custom-call target -> its torch routine (alphabetical; every target of ``TARGETS``).
CUSTOM_CALL_HOST_RULES: dict[str, TargetRule] = {
    target: _ROUTINES[routine] for target, routine in TARGETS.items()}


def host_custom_call(comp: HloComputation, instr: HloInstruction,
                     device: torch.device) -> Executor | None:
    """A library target's torch routine, a sharding call's copy; ``None`` (no host rule) for
    any other target."""
    if is_sharding_call(instr):
        return host_sharding_call(comp, instr, device)
    rule = CUSTOM_CALL_HOST_RULES.get(instr.attr("custom_call_target", None))
    if rule is None:
        return None
    call = _decoded(instr)
    problem = layout_problem(call, instr, tuple(comp.instruction(o).shape for o in instr.operands))
    if problem is not None:
        loc = instr.location
        raise UnsupportedOpError(problem, line=loc.line if loc else None,
                                 column=loc.column if loc else None, where=instr.name)
    is_tuple = isinstance(instr.shape, TupleShape)

    def run(operands: Sequence[Value], ctx: Any) -> Value:
        result = _contiguous(rule(instr, call, operands))
        return tuple(result) if is_tuple else result

    return run


#: routine -> the torch call that runs it (reports name it).
TORCH_ROUTINES: dict[str, str] = {
    "cholesky": "torch.linalg.cholesky_ex",
    "eig": "LAPACK's geev on the host (SciPy's, as XLA:CPU calls it; NumPy's without SciPy)",
    "eigh": "torch.linalg.eigh",
    "fft": "torch.fft",
    "hessenberg": "LAPACK's gehrd on the host (SciPy's, as XLA:CPU calls it)",
    "householder_product": "torch.linalg.householder_product",
    "lu": "torch.linalg.lu_factor_ex",
    "lu_pivots_to_permutation": "row swaps (torch.gather/scatter)",
    "qr": "torch.geqrf",
    "schur": "LAPACK's gees on the host (SciPy's, as XLA:CPU calls it)",
    "svd": "torch.linalg.svd",
    "topk": "torch.sort (stable, XLA's total order)",
    "triangular_solve": "torch.linalg.solve_triangular",
    "tridiagonal": "LAPACK's sytrd/hetrd on the host (SciPy's, as XLA:CPU calls it)",
    "tridiagonal_solve": "LAPACK's gtsv elimination in torch ops, one step per row",
}

LIBRARY_HOST_RULES: dict[str, Callable[..., Executor | None]] = {
    "cholesky": host_cholesky,
    "custom-call": host_custom_call,
    "fft": host_fft,
    "topk": host_topk,
    "triangular-solve": host_triangular_solve,
}

__all__ = ["CUSTOM_CALL_HOST_RULES", "LIBRARY_HOST_RULES", "TORCH_ROUTINES", "host_cholesky", "host_custom_call",
           "host_fft", "host_topk", "host_triangular_solve", "torch_fft", "torch_topk",
           "total_order_key"]
