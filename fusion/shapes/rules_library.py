"""Shape rules of the library calls: ``cholesky``, ``fft``, ``topk``, ``triangular-solve``
and the ``custom-call`` targets of :data:`fusion.analysis.library_calls.TARGETS`.

A custom-call to another target keeps the verifier's rule (its declared shape is accepted).
A known target's rule checks its operands and the declared result against the routine's
convention (JAX's FFI calls: batch dims first, the matrix in the last two dims, LAPACK's
``info`` as the last tuple element, one ``s32`` per matrix) and returns the shape it implies.

>>> from fusion.ir.hlo_module import HloInstruction
>>> fft = HloInstruction("f", "fft", ArrayShape("c64", (2, 5)), ("x",),
...                      (("fft_type", "RFFT"), ("fft_length", (8,))))
>>> str(shape_fft(fft, (ArrayShape("f32", (2, 8)),), None))
'c64[2,5]'
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

from fusion.errors import UnsupportedOpError
from fusion.ir.hlo_module import HloInstruction, HloModule
from fusion.analysis.library_calls import LibraryCall, TARGETS, jacobi_svd_is_thin, library_call
from fusion.ir.element_types import COMPLEX_OF_PART_TYPES, COMPLEX_PART_TYPES
from fusion.ir.shape import ArrayShape, Shape, TupleShape
from fusion.shapes.checks import (
    expect_array, expect_kind, expect_operand_count, fail, int_attr, int_list,
)
from fusion.analysis.scaled_dots import is_block_scaled_dot_call
from fusion.analysis.sharding import is_sharding_call
from fusion.shapes.rules_collective import shape_sharding_call
from fusion.shapes.rules_control import shape_custom_call as shape_opaque_custom_call
from fusion.shapes.rules_dot import shape_scaled_dot

_MATRIX_KINDS = "float complex"


def _decoded(instr: HloInstruction) -> LibraryCall:
    try:
        return library_call(instr)
    except UnsupportedOpError as err:
        fail(instr, err.message)


def _matrix(instr: HloInstruction, shape: Shape, what: str, square: bool = False) -> ArrayShape:
    array = expect_array(instr, shape, what)
    if array.rank < 2:
        fail(instr, f"{what} of {instr.opcode} must have rank 2 or more (batch dims, then a "
             f"matrix), got {array}")
    if square and array.dims[-1] != array.dims[-2]:
        fail(instr, f"{what} of {instr.opcode} must hold square matrices, got {array}")
    return array


def _info(batch: tuple[int, ...]) -> ArrayShape:
    return ArrayShape("s32", batch)


def _element_check(instr: HloInstruction, call: LibraryCall, a: ArrayShape) -> None:
    expect_kind(instr, a, _MATRIX_KINDS, "the operand")
    if call.lapack_type is not None and a.dtype != call.lapack_type:
        fail(instr, f"{call.target} factors {call.lapack_type} matrices, got {a}",
             expected=call.lapack_type)


# ---- HLO ops --------------------------------------------------------------------------------

def shape_cholesky(instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None) -> Shape:
    """``cholesky(a), lower=true``: the factor, shaped as ``a`` (square matrices)."""
    expect_operand_count(instr, operands, 1)
    a = _matrix(instr, operands[0], "the operand", square=True)
    expect_kind(instr, a, _MATRIX_KINDS, "the operand")
    return ArrayShape(a.dtype, a.dims)


def shape_fft(instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None) -> Shape:
    """``fft(x), fft_type=FFT|IFFT|RFFT|IRFFT, fft_length={..}`` over the last dims of ``x``."""
    expect_operand_count(instr, operands, 1)
    x = expect_array(instr, operands[0], "the operand")
    kind = instr.attr("fft_type", None)
    if kind not in ("FFT", "IFFT", "RFFT", "IRFFT"):
        fail(instr, f"fft has fft_type {kind!r}", expected="fft_type=FFT|IFFT|RFFT|IRFFT")
    lengths = int_list(instr, "fft_length")
    if not 1 <= len(lengths) <= 3 or len(lengths) > x.rank or any(n < 0 for n in lengths):
        fail(instr, f"fft_length={{{','.join(map(str, lengths))}}} must name 1 to 3 non-negative "
             f"lengths for the last dims of {x}")
    lead, tail = x.dims[:x.rank - len(lengths)], x.dims[x.rank - len(lengths):]
    if kind in ("FFT", "IFFT"):
        expect_kind(instr, x, "complex", "the operand")
        if tail != lengths:
            fail(instr, f"{kind} of {x} with fft_length {list(lengths)}: the last dims must "
                 "equal fft_length")
        return ArrayShape(x.dtype, x.dims)
    if kind == "RFFT":
        if x.dtype not in COMPLEX_OF_PART_TYPES:
            fail(instr, f"RFFT operand has element type {x.dtype}", expected="f32 or f64")
        if tail != lengths:
            fail(instr, f"RFFT of {x} with fft_length {list(lengths)}: the last dims must equal "
                 "fft_length")
        out = lengths[:-1] + (lengths[-1] // 2 + 1 if lengths[-1] else 0,)
        return ArrayShape(COMPLEX_OF_PART_TYPES[x.dtype], lead + out)
    expect_kind(instr, x, "complex", "the operand")
    want = lengths[:-1] + (lengths[-1] // 2 + 1 if lengths[-1] else 0,)
    if tail != want:
        fail(instr, f"IRFFT of {x} with fft_length {list(lengths)}: the last dims must be "
             f"{list(want)}")
    return ArrayShape(COMPLEX_PART_TYPES[x.dtype], lead + lengths)


def shape_topk(instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None) -> Shape:
    """``topk(x), k=K, largest=true``: (values, s32 indices) along the last dim of ``x``."""
    expect_operand_count(instr, operands, 1)
    x = expect_array(instr, operands[0], "the operand")
    k = int_attr(instr, "k")
    if x.rank < 1 or not 0 <= k <= x.dims[-1]:
        fail(instr, f"topk with k={k} of {x}: k must be at most the last dim")
    dims = x.dims[:-1] + (k,)
    return TupleShape((ArrayShape(x.dtype, dims), ArrayShape("s32", dims)))


def shape_triangular_solve(instr: HloInstruction, operands: Sequence[Shape],
                           module: HloModule | None) -> Shape:
    """``triangular-solve(a, b), left_side=.., lower=.., transpose_a=..``: shaped as ``b``."""
    expect_operand_count(instr, operands, 2)
    call = _decoded(instr)
    return _solve_shape(instr, call, operands)


def _solve_shape(instr: HloInstruction, call: LibraryCall, operands: Sequence[Shape]) -> Shape:
    a = _matrix(instr, operands[0], "operand a", square=True)
    b = _matrix(instr, operands[1], "operand b")
    expect_kind(instr, a, _MATRIX_KINDS, "operand a")
    if a.dtype != b.dtype or a.dims[:-2] != b.dims[:-2]:
        fail(instr, f"{instr.opcode} operands {a} and {b} differ in element type or batch dims")
    n = b.dims[-2] if call.left_side else b.dims[-1]
    if a.dims[-1] != n:
        side = "rows" if call.left_side else "columns"
        fail(instr, f"{instr.opcode}: a is {a}, but b has {n} {side}")
    return ArrayShape(b.dtype, b.dims)


# ---- custom-call targets ----------------------------------------------------------------------

TargetRule = Callable[[HloInstruction, LibraryCall, Sequence[Shape]], Shape]


def _one_matrix(instr: HloInstruction, call: LibraryCall, operands: Sequence[Shape],
                square: bool = False) -> ArrayShape:
    expect_operand_count(instr, operands, 1)
    a = _matrix(instr, operands[0], "the operand", square)
    _element_check(instr, call, a)
    return ArrayShape(a.dtype, a.dims)


def _target_cholesky(instr, call, operands):
    a = _one_matrix(instr, call, operands, square=True)
    return TupleShape((a, _info(a.dims[:-2])))


def _eigenvalues(a: ArrayShape) -> tuple[ArrayShape, ...]:
    """The eigenvalue outputs of ``a``'s LAPACK call: a real matrix's real and imaginary
    parts, a complex one's values, in ``a``'s type."""
    values = ArrayShape(a.dtype, a.dims[:-1])
    return (values,) if a.dtype in COMPLEX_PART_TYPES else (values, values)


def _target_eig(instr, call, operands):
    """A general matrix's eigenvalues (:func:`_eigenvalues`), then its left and right
    eigenvectors, complex, and info."""
    a = _one_matrix(instr, call, operands, square=True)
    vectors = ArrayShape(COMPLEX_OF_PART_TYPES.get(a.dtype, a.dtype), a.dims)
    return TupleShape(_eigenvalues(a) + (vectors, vectors, _info(a.dims[:-2])))


def _target_hessenberg(instr, call, operands):
    """The reduced matrix with its reflectors packed below, their ``n - 1`` taus, info."""
    a = _one_matrix(instr, call, operands, square=True)
    n = a.dims[-1]
    high = call.high or n
    if not 1 <= call.low <= max(high, 1) <= max(n, 1):
        fail(instr, f"{call.target}: low={call.low}, high={call.high} are not rows of a "
             f"{n} x {n} matrix (1 <= low <= high <= n)")
    return TupleShape((a, ArrayShape(a.dtype, a.dims[:-2] + (max(n - 1, 0),)),
                       _info(a.dims[:-2])))


def _target_schur(instr, call, operands):
    """The Schur form, the Schur vectors, the eigenvalues (:func:`_eigenvalues`), the count
    of sorted ones and info."""
    a = _one_matrix(instr, call, operands, square=True)
    scalars = _info(a.dims[:-2])
    return TupleShape((a, a) + _eigenvalues(a) + (scalars, scalars))


def _target_tridiagonal(instr, call, operands):
    """The reflectors packed around the tridiagonal, its diagonal and off-diagonal (real),
    the taus and info."""
    a = _one_matrix(instr, call, operands, square=True)
    real = COMPLEX_PART_TYPES.get(a.dtype, a.dtype)
    batch, n = a.dims[:-2], a.dims[-1]
    off = batch + (max(n - 1, 0),)
    return TupleShape((a, ArrayShape(real, batch + (n,)), ArrayShape(real, off),
                       ArrayShape(a.dtype, off), _info(batch)))


def _target_eigh(instr, call, operands):
    a = _one_matrix(instr, call, operands, square=True)
    real = COMPLEX_PART_TYPES.get(a.dtype, a.dtype)
    return TupleShape((a, ArrayShape(real, a.dims[:-1]), _info(a.dims[:-2])))


def _target_householder_product(instr, call, operands):
    expect_operand_count(instr, operands, 2)
    a = _matrix(instr, operands[0], "operand a")
    _element_check(instr, call, a)
    taus = expect_array(instr, operands[1], "operand taus")
    m, n = a.dims[-2:]
    if taus.dtype != a.dtype or taus.dims[:-1] != a.dims[:-2] or not taus.dims[-1] <= n <= m:
        fail(instr, f"{call.target}: taus {taus} do not fit the reflectors {a} (k <= n <= m, "
             "same batch dims and element type)")
    return ArrayShape(a.dtype, a.dims)


def _target_lu(instr, call, operands):
    a = _one_matrix(instr, call, operands)
    batch, k = a.dims[:-2], min(a.dims[-2:])
    return TupleShape((a, ArrayShape("s32", batch + (k,)), _info(batch)))


def _target_lu_pivots_to_permutation(instr, call, operands):
    expect_operand_count(instr, operands, 1)
    pivots = expect_array(instr, operands[0], "the pivots")
    declared = instr.shape
    if pivots.dtype != "s32" or pivots.rank < 1 or not isinstance(declared, ArrayShape) \
            or declared.dims[:-1] != pivots.dims[:-1] or declared.rank != pivots.rank \
            or declared.dims[-1] < pivots.dims[-1]:
        fail(instr, f"{call.target} turns s32 pivots [..., k] into an s32 permutation [..., m] "
             f"with m >= k; got {pivots} -> {declared}")
    return ArrayShape("s32", declared.dims)


def _target_qr(instr, call, operands):
    a = _one_matrix(instr, call, operands)
    return TupleShape((a, ArrayShape(a.dtype, a.dims[:-2] + (min(a.dims[-2:]),))))


def _target_svd(instr, call, operands):
    a = _one_matrix(instr, call, operands)
    batch, (m, n) = a.dims[:-2], a.dims[-2:]
    k = min(m, n)
    declared = instr.shape.elements if isinstance(instr.shape, TupleShape) else ()
    if len(declared) != 5:
        fail(instr, f"{call.target} returns (a, s, u, v, info), declared {instr.shape}")
    if not call.compute_uv:  # U and V^H are not computed: their shapes are the caller's
        u, v = (ArrayShape(s.dtype, s.dims) for s in declared[2:4])
    elif call.svd_v:
        # cuSOLVER's Jacobi SVD: full U and V, or thin ones ("econ") as the caller declared.
        thin = jacobi_svd_is_thin(declared, m, n)
        u = ArrayShape(a.dtype, batch + (m, k if thin else m))
        v = ArrayShape(a.dtype, batch + (n, k if thin else n))
    else:
        u = ArrayShape(a.dtype, batch + (m, m if call.full_matrices else k))
        v = ArrayShape(a.dtype, batch + (n if call.full_matrices else k, n))
        if call.svd_swapped:
            u, v = v, u
    s = ArrayShape(COMPLEX_PART_TYPES.get(a.dtype, a.dtype), batch + (k,))
    return TupleShape((a, s, u, v, _info(batch)))


def _target_topk(instr, call, operands):
    expect_operand_count(instr, operands, 1)
    x = expect_array(instr, operands[0], "the operand")
    declared = instr.shape.elements if isinstance(instr.shape, TupleShape) else ()
    if len(declared) != 2 or x.rank < 1 or not isinstance(declared[0], ArrayShape) \
            or declared[0].dims[:-1] != x.dims[:-1] or declared[0].dims[-1:] > x.dims[-1:]:
        fail(instr, f"TopK returns (values, s32 indices) [..., k] of its operand {x} along the "
             f"last dim, declared {instr.shape}")
    dims = declared[0].dims
    return TupleShape((ArrayShape(x.dtype, dims), ArrayShape("s32", dims)))


def _target_triangular_solve(instr, call, operands):
    expect_operand_count(instr, operands, 2)
    shape = _solve_shape(instr, call, operands)
    _element_check(instr, call, expect_array(instr, operands[0], "operand a"))
    return shape


def _target_tridiagonal_solve(instr, call, operands):
    """``(dl, d, du, b)``: three diagonals ``[..., n]`` and right-hand sides ``[..., n, k]``;
    LAPACK's ``gtsv`` returns ``(dl, d, du, x, info)``, cuSPARSE's ``gtsv2`` ``x`` alone."""
    expect_operand_count(instr, operands, 4)
    dl, d, du = (expect_array(instr, o, f"operand {w}") for o, w in zip(operands, ("dl", "d", "du")))
    b = _matrix(instr, operands[3], "operand b")
    _element_check(instr, call, b)
    if not (dl.dims == d.dims == du.dims == b.dims[:-1]) or \
            not (dl.dtype == d.dtype == du.dtype == b.dtype):
        fail(instr, f"{call.target} takes three diagonals [..., n] and right-hand sides "
             f"[..., n, k] of one element type; got {dl}, {d}, {du}, {b}")
    x = ArrayShape(b.dtype, b.dims)
    if not call.info:
        return x
    return TupleShape(tuple(ArrayShape(a.dtype, a.dims) for a in (dl, d, du)) +
                      (x, _info(b.dims[:-2])))


_ROUTINE_RULES: dict[str, TargetRule] = {
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

#: custom-call target -> its shape rule (alphabetical; every target of ``TARGETS``).
CUSTOM_CALL_SHAPE_RULES: dict[str, TargetRule] = {
    target: _ROUTINE_RULES[routine] for target, routine in TARGETS.items()}


def shape_custom_call(instr: HloInstruction, operands: Sequence[Shape],
                      module: HloModule | None) -> Shape:
    """A library target's shape (:data:`CUSTOM_CALL_SHAPE_RULES`); any other target's
    declared shape, accepted as is."""
    if is_sharding_call(instr):
        return shape_sharding_call(instr, operands, module)
    if is_block_scaled_dot_call(instr):
        return shape_scaled_dot(instr, operands, module)
    rule = CUSTOM_CALL_SHAPE_RULES.get(instr.attr("custom_call_target", None))
    if rule is None:
        return shape_opaque_custom_call(instr, operands, module)
    return rule(instr, _decoded(instr), operands)


__all__ = ["CUSTOM_CALL_SHAPE_RULES", "shape_cholesky", "shape_custom_call", "shape_fft",
           "shape_topk", "shape_triangular_solve"]
