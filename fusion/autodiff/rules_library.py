"""VJP rules of the library calls (``fusion.analysis.library_calls``): the HLO ops
``cholesky``, ``triangular-solve`` and ``topk``, and the custom calls computing the same
routines (LAPACK's ``potrf``, ``trsm``, ``getrf`` as JAX calls them on the CPU, cuSOLVER's on
a GPU, XLA:CPU's ``TopK``).  One rule per routine, whichever form carries it; formulas are
JAX's (``jax._src.lax.linalg``), transposed, on real matrices (``f32``/``f64``) with any
leading batch dims.

* ``triangular_solve``: ``X = op(A)^-1 B`` (or ``B op(A)^-1``): ``B``'s cotangent is the solve
  with ``op`` transposed, ``Y``; ``A``'s is ``-Y X^T`` (``-X^T Y`` on the right), transposed
  back when ``op`` transposes, in the triangle the solve reads (without the diagonal for a
  unit one).
* ``cholesky``: ``A = L L^T``: ``G = L^-T phi(L^T Lbar) L^-1`` (``phi``: the lower triangle,
  its diagonal halved), JAX's gradient for a symmetric perturbation.  The factorization reads
  one triangle of ``A``: that triangle gets ``G + G^T`` off the diagonal and ``G``'s diagonal
  on it, the other none; through a symmetric input (``jnp.linalg.cholesky`` symmetrizes its
  argument) this is JAX's gradient, and it is the derivative of what is computed.
  LAPACK leaves the other triangle of its output as it found it: that part's cotangent
  passes to ``A``.
* ``lu`` (square): ``P A = L U``: with ``G = tril(L^T C, -1) + triu(C U^T)`` for the packed
  factor's cotangent ``C``, ``A``'s is ``P^T L^-T G U^-T``; ``P`` from the pivots by a
  loop of row swaps (plain HLO, which XLA runs too).
* ``eigh``: ``A = V diag(w) V^T``: ``V (diag(wbar) + F o (V^T Vbar)) V^T`` with ``F[i, j] =
  1 / (w[j] - w[i])`` off the diagonal, read into one triangle as the Cholesky's.
* ``topk``: the values' cotangent added back at the indices (as a sort's).
* ``tridiagonal_solve``: ``B``'s cotangent is the solve with ``T^T``, the diagonals' the
  three diagonals of ``-G X^T`` (JAX's rules).

* ``svd``: JAX's rule on thin factors (the forward's, or a thin ``gesdd`` of the backward's own
  when the forward computed none or full ones and only the singular values are used).

* ``qr``: a thin QR's ``Q`` is written ``A R^-1`` before the reverse pass (``qr_as_solve``),
  so ``geqrf`` gets ``R``'s cotangent alone: ``Q (triu(X) + tril(X^T, -1)) R^-T``,
  ``X = Rbar R^T``, JAX's rule.

Other routines (eig ...) are located ``UnsupportedOpError``s.

>>> sorted(LIBRARY_VJP_RULES)
['cholesky', 'custom-call', 'topk', 'triangular-solve']
"""
from __future__ import annotations

from typing import Sequence

from fusion.analysis.library_calls import LibraryCall, is_library_call, library_call
from fusion.analysis.sharding import is_sharding_call
from fusion.autodiff.cotangents import Cotangent
from fusion.autodiff.graph_builder import GraphBuilder
from fusion.autodiff.loops import counter_loop
from fusion.autodiff.reverse_pass import Rule, VjpContext
from fusion.autodiff.rules_collective import vjp_sharding_call
from fusion.autodiff.rules_indexed import scatter_add_along
from fusion.errors import UnsupportedOpError
from fusion.ir.attributes import RawText
from fusion.ir.hlo_module import HloInstruction
from fusion.ir.layout import Layout
from fusion.ir.shape import ArrayShape, TupleShape

Cts = Sequence[Cotangent]

_TRANSPOSE = {"N": "NO_TRANSPOSE", "T": "TRANSPOSE"}


def _unsupported(instr: HloInstruction, message: str) -> UnsupportedOpError:
    return UnsupportedOpError(f"no VJP rule for op {instr.opcode} (%{instr.name}): {message}",
                              **instr._located())


def _leaf_cts(ctx: VjpContext, instr: HloInstruction, ct: Cotangent) -> list[Cotangent]:
    """The cotangent of each result leaf (``None`` where none flows back)."""
    if isinstance(instr.shape, TupleShape):
        return list(ct) if isinstance(ct, tuple) else [None] * len(instr.shape.elements)
    return [ct]


def _leaf(ctx: VjpContext, instr: HloInstruction, k: int) -> str:
    """The backward name of the forward result's leaf ``k``."""
    value = ctx.out(instr)
    return ctx.b.get_tuple_element(value, k) if isinstance(instr.shape, TupleShape) else value


# --- matrix helpers (the last two dims; the others are batch dims) ----------------------------

def _matmul(b: GraphBuilder, x: str, y: str, tx: bool = False, ty: bool = False) -> str:
    """``op(x) @ op(y)`` per batch element, ``op`` transposing where asked."""
    rank = b.array_shape(x).rank
    batch = tuple(range(rank - 2))
    attributes = [("lhs_contracting_dims", (rank - 2 if tx else rank - 1,)),
                  ("rhs_contracting_dims", (rank - 1 if ty else rank - 2,))]
    if batch:
        attributes = [("lhs_batch_dims", batch), ("rhs_batch_dims", batch)] + attributes
    return b.emit("dot", (x, y), attributes)


def _t(b: GraphBuilder, x: str) -> str:
    rank = b.array_shape(x).rank
    return b.transpose(x, tuple(range(rank - 2)) + (rank - 1, rank - 2))


def _rows_and_columns(b: GraphBuilder, shape: ArrayShape) -> tuple[str, str]:
    """Each element's row and column index, s32 of ``shape``."""
    return tuple(b.emit("iota", (), (("iota_dimension", d),), shape.with_dtype("s32"))
                 for d in (shape.rank - 2, shape.rank - 1))


def _triangle(b: GraphBuilder, x: str, lower: bool, offset: int = 0) -> str:
    """``x`` where ``column - row <= offset`` (lower) or ``>= offset`` (upper), else 0."""
    shape = b.array_shape(x).with_layout(None)
    rows, columns = _rows_and_columns(b, shape)
    difference = b.subtract(columns, rows)
    keep = b.compare(difference, b.full_like(offset, difference), "LE" if lower else "GE")
    return b.select(keep, x, b.zeros(shape))


def _diagonal_only(b: GraphBuilder, x: str) -> str:
    return _triangle(b, _triangle(b, x, True), False)


def _solve(b: GraphBuilder, a: str, rhs: str, *, left_side: bool, lower: bool,
           transpose: str, unit_diagonal: bool = False) -> str:
    return b.emit("triangular-solve", (a, rhs), (
        ("left_side", left_side), ("lower", lower), ("unit_diagonal", unit_diagonal),
        ("transpose_a", _TRANSPOSE[transpose])))


def _real_only(ctx: VjpContext, instr: HloInstruction, call: LibraryCall) -> None:
    dtype = ctx.operand_shape(instr, 0).dtype
    if dtype not in ("f32", "f64"):
        raise _unsupported(instr, f"the VJP of {call.routine} is derived for f32 and f64 "
                           f"matrices, not {dtype}")


# --- routines --------------------------------------------------------------------------------

def _triangular_solve(ctx: VjpContext, instr: HloInstruction, call: LibraryCall,
                      ct: Cotangent) -> Cts:
    b = ctx.b
    a, x = ctx.operand(instr, 0), ctx.out(instr)
    flipped = {"N": "T", "T": "N"}[call.transpose_a]
    y = _solve(b, a, ct, left_side=call.left_side, lower=call.lower, transpose=flipped,
               unit_diagonal=call.unit_diagonal)
    outer = _matmul(b, y, x, ty=True) if call.left_side else _matmul(b, x, y, tx=True)
    if call.transpose_a == "T":
        outer = _t(b, outer)
    grad_a = _triangle(b, b.negate(outer), call.lower,
                       (-1 if call.lower else 1) if call.unit_diagonal else 0)
    return (grad_a, y)


def _cholesky(ctx: VjpContext, instr: HloInstruction, call: LibraryCall,
              ct: Cotangent) -> Cts:
    b = ctx.b
    factor_ct = _leaf_cts(ctx, instr, ct)[0]
    if factor_ct is None:
        return (None,)
    raw = _leaf(ctx, instr, 0)
    factor = _triangle(b, raw, call.lower)
    bar = _triangle(b, factor_ct, call.lower)
    # The upper factor U = L^T: the lower factor's formula on the transposes.
    lower, lower_bar = (factor, bar) if call.lower else (_t(b, factor), _t(b, bar))
    inner = _matmul(b, lower, lower_bar, tx=True)
    phi = b.subtract(_triangle(b, inner, True), b.scale(_diagonal_only(b, inner), 0.5))
    left = _solve(b, lower, phi, left_side=True, lower=True, transpose="T")
    grad = _solve(b, lower, left, left_side=False, lower=True, transpose="N")
    grad_a = _read_triangle(b, grad, call.lower)
    if call.info:  # LAPACK's factor keeps the input's other triangle
        grad_a = b.add(grad_a, _triangle(b, factor_ct, not call.lower,
                                         1 if call.lower else -1))
    return (grad_a,)


def _read_triangle(b: GraphBuilder, grad: str, lower: bool) -> str:
    """JAX's gradient ``grad`` for a symmetric perturbation, as the derivative of a routine
    that reads one triangle: ``grad + grad^T`` there off the diagonal, ``grad``'s diagonal."""
    symmetric = b.add(grad, _t(b, grad))
    return b.subtract(_triangle(b, symmetric, lower), _diagonal_only(b, grad))


def _eigh(ctx: VjpContext, instr: HloInstruction, call: LibraryCall, ct: Cotangent) -> Cts:
    """``A = V diag(w) V^T``: ``A``'s is ``V (diag(wbar) + F o (V^T Vbar)) V^T``, ``F[i, j] =
    1 / (w[j] - w[i])`` off the diagonal, 0 on it (JAX's ``_eigh_jvp_rule``, transposed)."""
    b = ctx.b
    vectors_ct, values_ct = _leaf_cts(ctx, instr, ct)[:2]
    if vectors_ct is not None and not call.compute_v:
        raise _unsupported(instr, f"{call.target} computed no eigenvectors to differentiate")
    vectors, values = _leaf(ctx, instr, 0), _leaf(ctx, instr, 1)
    shape = b.array_shape(vectors).with_layout(None)
    rank = shape.rank
    g = b.zeros(shape)
    if values_ct is not None:
        g = b.multiply(b.broadcast(values_ct, shape.dims, tuple(range(rank - 1))),
                       _identity(b, shape))
    if vectors_ct is not None:
        along_rows = b.broadcast(values, shape.dims, tuple(range(rank - 2)) + (rank - 1,))
        along_columns = b.broadcast(values, shape.dims, tuple(range(rank - 1)))
        eye = _identity(b, shape)
        gaps = b.add(b.subtract(along_rows, along_columns), eye)  # w[j] - w[i], 1 on the diagonal
        f = b.subtract(b.divide(b.full_like(1, gaps), gaps), eye)
        g = b.add(g, b.multiply(f, _matmul(b, vectors, vectors_ct, tx=True)))
    grad = _matmul(b, _matmul(b, vectors, g), vectors, ty=True)
    return (_read_triangle(b, grad, call.lower),)


def _column_major(shape: ArrayShape) -> ArrayShape:
    rank = shape.rank
    return shape.with_layout(Layout((rank - 2, rank - 1) + tuple(range(rank - 3, -1, -1))))


def _forward_is_thin(instr: HloInstruction, call: LibraryCall) -> bool:
    """Whether the forward computed thin (or square) singular vectors."""
    leaves = instr.shape.elements
    u, v = (leaves[3], leaves[2]) if call.svd_swapped else (leaves[2], leaves[3])
    k = min(leaves[0].dims[-2:])
    return call.compute_uv and u.dims[-1] == k and (v.dims[-1] if call.svd_v else v.dims[-2]) == k


def _thin_svd(ctx: VjpContext, instr: HloInstruction, call: LibraryCall) -> tuple[str, str, str]:
    """``(U, s, V)`` of the operand, thin (``U``: ``m x k``, ``V``: ``n x k``): the forward's
    own outputs when it computed them thin, else a LAPACK ``gesdd`` of its own."""
    b = ctx.b
    if _forward_is_thin(instr, call):
        u, v = _leaf(ctx, instr, 2), _leaf(ctx, instr, 3)
        if call.svd_swapped:
            u, v = v, u
        return u, _leaf(ctx, instr, 1), v if call.svd_v else _t(b, v)
    shape = ctx.operand_shape(instr, 0).with_layout(None)
    m, n = shape.dims[-2:]
    k, batch = min(m, n), shape.dims[:-2]
    letter = {"f32": "s", "f64": "d"}[shape.dtype]
    matrix = _column_major(shape)
    thin = TupleShape((matrix, ArrayShape(shape.dtype, batch + (k,)),
                       _column_major(ArrayShape(shape.dtype, batch + (m, k))),
                       _column_major(ArrayShape(shape.dtype, batch + (k, n))),
                       ArrayShape("s32", batch)))
    a = b.emit("copy", (ctx.operand(instr, 0),), shape=matrix)
    svd = b.emit("custom-call", (a,), (
        ("custom_call_target", f"lapack_{letter}gesdd_ffi"),
        ("operand_layout_constraints", RawText("{" + str(matrix) + "}")),
        ("backend_config", RawText("{mode = 83 : ui8}"))), thin)
    parts = [b.get_tuple_element(svd, i) for i in (2, 1, 3)]
    return parts[0], parts[1], _t(b, parts[2])


def _svd(ctx: VjpContext, instr: HloInstruction, call: LibraryCall, ct: Cotangent) -> Cts:
    """JAX's ``_svd_jvp_rule`` (thin factors) transposed: with ``J = F o (U^T Ubar)``, ``K = F o
    (V^T Vbar)``, ``F[i, j] = 1 / (s_j^2 - s_i^2)`` off the diagonal, ``A``'s cotangent is
    ``U (diag(sbar) + (J + J^T) S + S (K + K^T)) V^T``, plus, for a tall or wide matrix,
    ``(I - U U^T) Ubar S^-1 V^T`` and ``U ((I - V V^T) Vbar S^-1)^T``."""
    b = ctx.b
    cts = _leaf_cts(ctx, instr, ct)
    s_ct, u_ct, v_ct = cts[1], cts[2], cts[3]
    if call.svd_swapped:
        u_ct, v_ct = v_ct, u_ct
    shape = ctx.operand_shape(instr, 0).with_layout(None)
    m, n = shape.dims[-2:]
    k = min(m, n)
    if (u_ct is not None or v_ct is not None) and not _forward_is_thin(instr, call):
        raise _unsupported(instr, "the singular vectors of a full (not thin) SVD of a "
                           f"{m}x{n} matrix have no VJP (JAX's neither)")
    u, s, v = _thin_svd(ctx, instr, call)
    square = ArrayShape(shape.dtype, shape.dims[:-2] + (k, k))
    rank = square.rank
    s_columns = b.broadcast(s, square.dims, tuple(range(rank - 2)) + (rank - 1,))  # s_j
    s_rows = b.broadcast(s, square.dims, tuple(range(rank - 1)))  # s_i
    eye = _identity(b, square)
    g = b.zeros(square)
    if s_ct is not None:
        g = b.multiply(b.broadcast(s_ct, square.dims, tuple(range(rank - 1))), eye)
    if u_ct is not None or v_ct is not None:
        gaps = b.add(b.multiply(b.add(s_columns, s_rows), b.subtract(s_columns, s_rows)), eye)
        f = b.subtract(b.divide(b.full_like(1, gaps), gaps), eye)
    extra = None
    if u_ct is not None:
        j = b.multiply(f, _matmul(b, u, u_ct, tx=True))
        g = b.add(g, b.multiply(b.add(j, _t(b, j)), s_columns))
        if m > k:
            scaled = b.divide(u_ct, b.broadcast(s, b.array_shape(u_ct).dims,
                                                 tuple(range(rank - 2)) + (rank - 1,)))
            rest = b.subtract(scaled, _matmul(b, u, _matmul(b, u, scaled, tx=True)))
            extra = _matmul(b, rest, v, ty=True)
    if v_ct is not None:
        v_bar = v_ct if call.svd_v else _t(b, v_ct)
        kk = b.multiply(f, _matmul(b, v, v_bar, tx=True))
        g = b.add(g, b.multiply(s_rows, b.add(kk, _t(b, kk))))
        if n > k:
            scaled = b.divide(v_bar, b.broadcast(s, b.array_shape(v_bar).dims,
                                                 tuple(range(rank - 2)) + (rank - 1,)))
            rest = b.subtract(scaled, _matmul(b, v, _matmul(b, v, scaled, tx=True)))
            term = _matmul(b, u, rest, ty=True)
            extra = term if extra is None else b.add(extra, term)
    grad = _matmul(b, _matmul(b, u, g), v, ty=True)
    return (grad if extra is None else b.add(grad, extra),)


def _qr(ctx: VjpContext, instr: HloInstruction, call: LibraryCall, ct: Cotangent) -> Cts:
    """``geqrf`` whose ``Q`` was written as ``A R^-1`` (``qr_as_solve``): the cotangent of ``R``
    (the packed factor's upper triangle) alone, ``Q (triu(X) + tril(X^T, -1)) R^-T`` with
    ``X = Rbar R^T`` (JAX's ``qr_jvp_rule``, transposed); the reflectors and ``tau`` have no
    gradient of their own."""
    b = ctx.b
    packed_ct, tau_ct = _leaf_cts(ctx, instr, ct)[:2]
    shape = ctx.operand_shape(instr, 0).with_layout(None)
    m, n = shape.dims[-2:]
    if tau_ct is not None or m < n:
        raise _unsupported(instr, "a QR differentiates as its Q and R (jnp.linalg.qr of a "
                           f"matrix with at least as many rows as columns), not {m}x{n} "
                           "reflectors and tau read as they are")
    if packed_ct is None:
        return (None,)
    square = ArrayShape(shape.dtype, shape.dims[:-2] + (n, n))
    corner = [0] * (shape.rank - 2)
    r = _triangle(b, b.slice(_leaf(ctx, instr, 0), corner + [0, 0], square.dims), False)
    r_bar = _triangle(b, b.slice(packed_ct, corner + [0, 0], square.dims), False)
    a = ctx.operand(instr, 0)
    q = _solve(b, r, a, left_side=False, lower=False, transpose="N")
    x = _matmul(b, r_bar, r, ty=True)
    inner = b.add(_triangle(b, x, False), _triangle(b, _t(b, x), True, -1))
    scaled = _solve(b, r, _matmul(b, q, inner), left_side=False, lower=False, transpose="T")
    return (scaled,)


def _lu(ctx: VjpContext, instr: HloInstruction, call: LibraryCall, ct: Cotangent) -> Cts:
    b = ctx.b
    shape = ctx.operand_shape(instr, 0).with_layout(None)
    m, n = shape.dims[-2:]
    if m != n:
        raise _unsupported(instr, f"the VJP of LU is derived for square matrices, not {m}x{n}")
    packed_ct = _leaf_cts(ctx, instr, ct)[0]
    if packed_ct is None:
        return (None,)
    packed, pivots = _leaf(ctx, instr, 0), _leaf(ctx, instr, 1)
    unit = b.add(_triangle(b, packed, True, -1), _identity(b, shape))
    upper = _triangle(b, packed, False)
    g = b.add(_triangle(b, _matmul(b, unit, packed_ct, tx=True), True, -1),
              _triangle(b, _matmul(b, packed_ct, upper, ty=True), False))
    left = _solve(b, packed, g, left_side=True, lower=True, transpose="T", unit_diagonal=True)
    y = _solve(b, packed, left, left_side=False, lower=False, transpose="T")
    # A's cotangent is P^T Y: row i of Y goes to row perm[i].
    permutation = _permutation(b, b.subtract(pivots, b.full_like(1, pivots)), m)
    columns = _rows_and_columns(b, shape)[1]
    chosen = b.compare(b.broadcast(permutation, shape.dims, tuple(range(shape.rank - 1))),
                       columns, "EQ")
    one_hot = b.convert(chosen, shape.dtype)  # P[i, perm[i]] = 1
    return (_matmul(b, one_hot, y, tx=True),)


def _permutation(b: GraphBuilder, pivots: str, m: int) -> str:
    """The row permutation LAPACK's 0-based row swaps ``pivots`` (``[..., k]``) make of ``m``
    rows (``perm[i]``: the original row now at ``i``), as a loop of plain HLO over the swaps
    (a backward XLA runs too, not a GPU call)."""
    pivot_shape = b.array_shape(pivots).with_layout(None)
    batch, k = pivot_shape.dims[:-1], pivot_shape.dims[-1]
    perm = ArrayShape("s32", batch + (m,))
    rank = perm.rank
    state = TupleShape((ArrayShape("s32", ()), pivot_shape, perm))

    def swap(inner: GraphBuilder, param: str, i: str) -> list[str]:
        swaps, current = inner.get_tuple_element(param, 1), inner.get_tuple_element(param, 2)
        zero = inner.scalar(0, "s32")

        def column(value: str, at: str) -> str:  # value[..., at] broadcast along the rows
            picked = inner.emit("dynamic-slice", (value, *[zero] * (rank - 1), at),
                                (("dynamic_slice_sizes", batch + (1,)),))
            return inner.broadcast(inner.reshape(picked, batch), perm.dims, tuple(range(rank - 1)))

        columns = inner.emit("iota", (), (("iota_dimension", rank - 1),), perm)
        j = column(swaps, i)
        at_i = inner.compare(columns, inner.broadcast(i, perm.dims, ()), "EQ")
        at_j = inner.compare(columns, j, "EQ")
        row_j = inner.broadcast(inner.reduce_sum(
            inner.select(at_j, current, inner.zeros(perm)), (rank - 1,)),
            perm.dims, tuple(range(rank - 1)))
        swapped = inner.select(at_i, row_j, inner.select(at_j, column(current, i), current))
        return [swaps, swapped]

    condition, body = counter_loop(b, "pivots_to_permutation", state, 1, k, "LT", swap)
    start = b.tuple([b.scalar(0, "s32"), pivots,
                     b.emit("iota", (), (("iota_dimension", rank - 1),), perm)])
    return b.get_tuple_element(b.emit("while", (start,), (("condition", condition),
                                                          ("body", body)), state), 2)


def _shift(b: GraphBuilder, x: str, by: int, dim: int = -1) -> str:
    """``x`` moved ``by`` places along ``dim`` (+1: toward the end), zeros shifted in."""
    shape = b.array_shape(x).with_layout(None)
    dim %= shape.rank
    starts, limits = [0] * shape.rank, list(shape.dims)
    starts[dim], limits[dim] = max(-by, 0), shape.dims[dim] - max(by, 0)
    config = [(0, 0, 0)] * shape.rank
    config[dim] = (max(by, 0), max(-by, 0), 0)
    return b.pad(b.slice(x, starts, limits), b.scalar(0, shape.dtype), config)


def _tridiagonal_solve(ctx: VjpContext, instr: HloInstruction, call: LibraryCall,
                       ct: Cotangent) -> Cts:
    """``X = T^-1 B`` for the tridiagonal ``T`` of ``(dl, d, du)``: ``B``'s cotangent is the
    solve with ``T^T`` (``G``, JAX's transpose rule), the diagonals' ``-G X^T`` on the three
    diagonals (``-sum G[i] X[i-1]``, ``-sum G[i] X[i]``, ``-sum G[i] X[i+1]``, JAX's JVP)."""
    b = ctx.b
    x_ct = _leaf_cts(ctx, instr, ct)[3] if call.info else ct
    if x_ct is None:
        return (None,) * 4
    dl, d, du = (ctx.operand(instr, k) for k in range(3))
    # T^T's sub-diagonal is T's super-diagonal moved down one row, and the reverse.
    operands = (_shift(b, du, 1), d, _shift(b, dl, -1), x_ct)
    solved = b.emit(instr.opcode, operands, instr.attributes, instr.shape)
    g = b.get_tuple_element(solved, 3) if call.info else solved
    x = _leaf(ctx, instr, 3) if call.info else ctx.out(instr)
    rank = b.array_shape(x).rank

    def diagonal(shift: int) -> str:  # -sum over the columns of G[i] * X[i + shift]
        rows = x if shift == 0 else _shift(b, x, -shift, rank - 2)
        return b.negate(b.reduce_sum(b.multiply(g, rows), (rank - 1,)))

    return (diagonal(-1), diagonal(0), diagonal(1), g)


def _identity(b: GraphBuilder, shape: ArrayShape) -> str:
    rows, columns = _rows_and_columns(b, shape)
    return b.convert(b.compare(rows, columns, "EQ"), shape.dtype)


def _topk(ctx: VjpContext, instr: HloInstruction, call: LibraryCall, ct: Cotangent) -> Cts:
    values_ct = _leaf_cts(ctx, instr, ct)[0]
    if values_ct is None:
        return (None,)
    shape = ctx.operand_shape(instr, 0).with_layout(None)
    indices = _leaf(ctx, instr, 1)
    return (scatter_add_along(ctx.b, values_ct, indices, shape.rank - 1, shape),)


#: routine -> its VJP rule (``rule(ctx, instr, call, ct)``).
_ROUTINES = {
    "cholesky": _cholesky,
    "eigh": _eigh,
    "lu": _lu,
    "qr": _qr,
    "svd": _svd,
    "topk": _topk,
    "triangular_solve": _triangular_solve,
    "tridiagonal_solve": _tridiagonal_solve,
}


def vjp_library_call(ctx: VjpContext, instr: HloInstruction, ct: Cotangent) -> Cts:
    """The VJP of a library call, by the routine it computes."""
    call = library_call(instr)
    rule = _ROUTINES.get(call.routine)
    if rule is None:
        raise _unsupported(instr, f"{call.routine} ({call.target}) has no VJP rule here")
    if call.routine != "topk":
        _real_only(ctx, instr, call)
    grads = rule(ctx, instr, call, ct)
    return tuple(grads) + (None,) * (len(instr.operands) - len(grads))


def vjp_custom_call(ctx: VjpContext, instr: HloInstruction, ct: Cotangent) -> Cts:
    """A library call's rule, or a sharding call's transpose; other targets have none."""
    if is_library_call(instr):
        return vjp_library_call(ctx, instr, ct)
    if is_sharding_call(instr):
        return vjp_sharding_call(ctx, instr, ct)
    raise _unsupported(instr, f"custom-call target {instr.attr('custom_call_target')} is "
                       "opaque (only the sharding and library calls have a VJP)")


LIBRARY_VJP_RULES: dict[str, Rule] = {
    "cholesky": vjp_library_call,
    "custom-call": vjp_custom_call,
    "topk": vjp_library_call,
    "triangular-solve": vjp_library_call,
}

__all__ = ["LIBRARY_VJP_RULES"]
