"""Indexing of dot: output dims are batch dims, then lhs free dims, then rhs free dims;
contracting dims become range variables (like a reduce).

>>> from fusion.ir.hlo_module import HloInstruction
>>> from fusion.ir.shape import ArrayShape
>>> from tiling.indexing_analysis.operands import Operand
>>> dot = HloInstruction("dot", "dot", ArrayShape("f32", (3, 5)), ("a", "b"),
...     (("lhs_contracting_dims", (1,)), ("rhs_contracting_dims", (0,))))
>>> ops = (Operand(ArrayShape("f32", (3, 7))), Operand(ArrayShape("f32", (7, 5))))
>>> print(o2i_dot(dot, ops, 0)[1])
(d0, d1)[s0] -> (s0, d1), domain: d0 in [0, 2], d1 in [0, 4], s0 in [0, 6]
"""
from __future__ import annotations

from typing import Sequence

from tiling.maps.affine_expr import AffineExpr, d, s
from tiling.indexing_analysis.operands import Operand, array_dims
from tiling.maps.indexing_map import IndexingMap


def _dims(instr, operands):
    lb = tuple(instr.attr("lhs_batch_dims", ()))
    rb = tuple(instr.attr("rhs_batch_dims", ()))
    lc = tuple(instr.attr("lhs_contracting_dims", ()))
    rc = tuple(instr.attr("rhs_contracting_dims", ()))
    lhs_rank, rhs_rank = len(operands[0].dims), len(operands[1].dims)
    lf = tuple(k for k in range(lhs_rank) if k not in lb and k not in lc)
    rf = tuple(k for k in range(rhs_rank) if k not in rb and k not in rc)
    return (lb, lc, lf), (rb, rc, rf)


def _operand_results(rank, batch, contracting, free, free_offset) -> tuple[AffineExpr, ...]:
    results: list[AffineExpr] = []
    for k in range(rank):
        if k in batch:
            results.append(d(batch.index(k)))
        elif k in contracting:
            results.append(s(contracting.index(k)))
        else:
            results.append(d(free_offset + free.index(k)))
    return tuple(results)


def o2i_dot(instr, operands: Sequence[Operand], output_index: int):
    out = array_dims(instr.shape)
    (lb, lc, lf), (rb, rc, rf) = _dims(instr, operands)
    contracting_sizes = [operands[0].dims[k] for k in lc]
    lhs = _operand_results(len(operands[0].dims), lb, lc, lf, len(lb))
    rhs = _operand_results(len(operands[1].dims), rb, rc, rf, len(lb) + len(lf))
    return (IndexingMap.from_sizes(lhs, out, contracting_sizes),
            IndexingMap.from_sizes(rhs, out, contracting_sizes))


def i2o_dot(instr, operands: Sequence[Operand], operand_index: int):
    if operand_index > 1:  # sparsity metadata operands
        return (IndexingMap.undefined(),)
    lhs_dims, rhs_dims = _dims(instr, operands)
    batch, _, own_free = (lhs_dims, rhs_dims)[operand_index]
    other_free = (rhs_dims, lhs_dims)[operand_index][2]
    other = operands[1 - operand_index].dims
    other_sizes = [other[k] for k in other_free]
    own = tuple(d(k) for k in own_free)
    theirs = tuple(s(j) for j in range(len(other_free)))
    free = own + theirs if operand_index == 0 else theirs + own
    results = tuple(d(k) for k in batch) + free
    return (IndexingMap.from_sizes(results, operands[operand_index].dims, other_sizes),)
