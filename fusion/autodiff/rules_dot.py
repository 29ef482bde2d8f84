"""The VJP of ``dot`` with any dimension numbers (batch, contracting and free dims on both
sides): JAX's ``_dot_general_transpose_lhs``/``_rhs``.  Each gradient is a dot of the
cotangent with the other operand, transposed back into the operand's dim order.

>>> list(_ranges_like((5, 6), (7,), (8, 9)))
[(0, 1), (2,), (3, 4)]
"""
from __future__ import annotations

from typing import Iterator, Sequence

from fusion.autodiff.cotangents import Cotangent
from fusion.autodiff.graph_builder import GraphBuilder
from fusion.autodiff.reverse_pass import Rule, VjpContext
from fusion.ir.hlo_module import HloInstruction
from fusion.ir.shape import ArrayShape

Cts = Sequence[Cotangent]


def _ranges_like(*groups: Sequence[int]) -> Iterator[tuple[int, ...]]:
    start = 0
    for group in groups:
        yield tuple(range(start, start + len(group)))
        start += len(group)


def _remaining(rank: int, *taken: Sequence[int]) -> list[int]:
    return [d for d in range(rank) if not any(d in t for t in taken)]


def _argsort(values: Sequence[int]) -> list[int]:
    return sorted(range(len(values)), key=lambda i: values[i])


def dot_transpose_lhs(b: GraphBuilder, ct: str, x_shape: ArrayShape, y: str,
                      x_contract: Sequence[int], y_contract: Sequence[int],
                      x_batch: Sequence[int], y_batch: Sequence[int], swap_ans: bool) -> str:
    """The gradient of the dot's ``x`` operand (``swap_ans``: ``x`` was the dot's rhs)."""
    y_shape = b.array_shape(y)
    x_kept = _remaining(x_shape.rank, x_contract, x_batch)
    y_kept = _remaining(y_shape.rank, y_contract, y_batch)
    if swap_ans:
        ans_batch, ans_y, _ = _ranges_like(x_batch, y_kept, x_kept)
    else:
        ans_batch, _, ans_y = _ranges_like(x_batch, x_kept, y_kept)
    attributes = []
    for key, value in (("lhs_batch_dims", ans_batch), ("lhs_contracting_dims", ans_y),
                       ("rhs_batch_dims", tuple(y_batch)), ("rhs_contracting_dims", tuple(y_kept))):
        if value:
            attributes.append((key, tuple(value)))
    product = b.emit("dot", (b.convert(ct, y_shape.dtype), y), attributes)
    x_contract_by_y = [x_contract[i] for i in _argsort(y_contract)]
    out_axes = _argsort(list(x_batch) + x_kept + x_contract_by_y)
    return b.convert(b.transpose(product, out_axes), x_shape.dtype)


def vjp_dot(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    b = ctx.b
    x, y = ctx.operand(instr, 0), ctx.operand(instr, 1)
    x_contract = tuple(instr.attr("lhs_contracting_dims", ()))
    y_contract = tuple(instr.attr("rhs_contracting_dims", ()))
    x_batch = tuple(instr.attr("lhs_batch_dims", ()))
    y_batch = tuple(instr.attr("rhs_batch_dims", ()))
    grad_x = grad_y = None
    if ctx.is_active(instr.operands[0]):
        grad_x = dot_transpose_lhs(b, ct, ctx.operand_shape(instr, 0), y, x_contract,
                                   y_contract, x_batch, y_batch, swap_ans=False)
    if ctx.is_active(instr.operands[1]):
        grad_y = dot_transpose_lhs(b, ct, ctx.operand_shape(instr, 1), x, y_contract,
                                   x_contract, y_batch, x_batch, swap_ans=True)
    return (grad_x, grad_y)


def _ragged(b: GraphBuilder, lhs: str, rhs: str, sizes: str, contracting: tuple[int, int],
            by_rows: bool, dtype: str, dims: tuple[int, ...]) -> str:
    """A ragged dot of the two forms the grouped GEMM kernel runs, converted to ``dtype``."""
    attributes = [("lhs_contracting_dims", (contracting[0],)),
                  ("rhs_contracting_dims", (contracting[1],)), ("lhs_ragged_dims", (0,))]
    if by_rows:
        attributes.append(("rhs_group_dims", (0,)))
    shape = ArrayShape(b.array_shape(rhs).dtype, dims)
    return b.convert(b.emit("ragged-dot", (lhs, rhs, sizes), attributes, shape=shape), dtype)


def vjp_ragged_dot(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    """JAX's transposes of a ragged dot in its two matmul forms (others are differentiated as
    the dense dot they are: ``vjp_module`` expands them), each gradient a ragged dot of those
    forms again (``fusion.analysis.ragged_dot.canonical_form``):

    * by rows, ``x [m,k] . w [g,k,n] -> [m,n]`` (or ``w [g,n,k]``): ``dx = ct . w`` by rows
      over ``n``; ``dw[j] = x[group j]^T . ct[group j]``, by contracting dim;
    * by contracting dim, ``x [r,m] . y [r,n] -> [g,m,n]``: ``dx = y . ct`` and ``dy = x . ct``,
      by rows, each row of ``x``/``y`` with its group's ``ct[j]``.
    """
    b = ctx.b
    x, w, sizes = (ctx.operand(instr, k) for k in range(3))
    xs, ws = ctx.operand_shape(instr, 0), ctx.operand_shape(instr, 1)
    grads: list = [None, None, None]
    if instr.attr("rhs_group_dims", ()):
        (wc,) = instr.attr("rhs_contracting_dims")
        w_n = 3 - wc  # w's free (n) dim: 2 when w is [g, k, n], 1 when [g, n, k]
        if ctx.is_active(instr.operands[0]):
            grads[0] = _ragged(b, b.convert(ct, ws.dtype), w, sizes, (1, w_n), True, xs.dtype,
                               xs.dims)
        if ctx.is_active(instr.operands[1]):
            cw = b.convert(ct, xs.dtype)
            pair = (x, cw) if wc == 1 else (cw, x)
            grads[1] = _ragged(b, *pair, sizes, (0, 0), False, ws.dtype, ws.dims)
    else:
        cts = b.convert(ct, ws.dtype)
        if ctx.is_active(instr.operands[0]):
            grads[0] = _ragged(b, w, cts, sizes, (1, 2), True, xs.dtype, xs.dims)
        if ctx.is_active(instr.operands[1]):
            grads[1] = _ragged(b, x, b.convert(ct, xs.dtype), sizes, (1, 1), True, ws.dtype,
                               ws.dims)
    return tuple(grads)


DOT_VJP_RULES: dict[str, Rule] = {
    "dot": vjp_dot,
    "ragged-dot": vjp_ragged_dot,
}
