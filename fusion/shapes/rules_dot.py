"""Shape rule of dot, the contraction (``evaluator/dot_ops.py``, ``indexing_analysis/dot_rules.py``).

>>> from fusion.ir.hlo_module import HloInstruction
>>> i = HloInstruction("d", "dot", ArrayShape("f32", (4, 2, 5)), ("a", "b"), (
...     ("lhs_batch_dims", (0,)), ("rhs_batch_dims", (0,)),
...     ("lhs_contracting_dims", (2,)), ("rhs_contracting_dims", (1,))))
>>> str(shape_dot(i, (ArrayShape("f32", (4, 2, 3)), ArrayShape("f32", (4, 3, 5))), None))
'f32[4,2,5]'
"""
from __future__ import annotations

from typing import Sequence

from fusion.analysis.ragged_dot import ragged_dot
from fusion.analysis.scaled_dots import scaled_dot
from fusion.ir.hlo_module import HloInstruction, HloModule
from fusion.ir.shape import ArrayShape, Shape
from fusion.shapes.checks import expect_array, expect_dims_in_range, expect_operand_count, fail, int_list


def shape_dot(instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None) -> Shape:
    """Result dims: batch dims, then lhs free dims, then rhs free dims; the type is declared."""
    expect_operand_count(instr, operands, 2)
    lhs = expect_array(instr, operands[0], "the lhs")
    rhs = expect_array(instr, operands[1], "the rhs")
    out = expect_array(instr, instr.shape, "the result")
    lb, rb = int_list(instr, "lhs_batch_dims", ()), int_list(instr, "rhs_batch_dims", ())
    lc = int_list(instr, "lhs_contracting_dims", ())
    rc = int_list(instr, "rhs_contracting_dims", ())
    return ArrayShape(out.dtype, _dot_dims(instr, lhs, rhs, lc, rc, lb, rb))


def shape_ragged_dot(instr: HloInstruction, operands: Sequence[Shape],
                     module: HloModule | None) -> Shape:
    """A ragged dot's result (``fusion.analysis.ragged_dot``): the dense dot's over its
    operands expanded along a leading group dim; the type is declared."""
    expect_operand_count(instr, operands, 3)
    lhs = expect_array(instr, operands[0], "the lhs")
    rhs = expect_array(instr, operands[1], "the rhs")
    sizes = expect_array(instr, operands[2], "the group sizes")
    out = expect_array(instr, instr.shape, "the result")
    expect_dims_in_range(instr, int_list(instr, "lhs_contracting_dims", ()) +
                         int_list(instr, "lhs_batch_dims", ()), lhs.rank,
                         "lhs_batch_dims and lhs_contracting_dims")
    r = ragged_dot(instr, lhs, rhs, sizes)
    lc, rc, lb, rb = r.dense_dot()
    if r.mode != "batch":
        lhs = ArrayShape(lhs.dtype, (r.groups,) + lhs.dims)
    if r.expands_rhs:
        rhs = ArrayShape(rhs.dtype, (r.groups,) + rhs.dims)
    return ArrayShape(out.dtype, _dot_dims(instr, lhs, rhs, lc, rc, lb, rb))


def shape_scaled_dot(instr: HloInstruction, operands: Sequence[Shape],
                     module: HloModule | None) -> Shape:
    """A scaled dot's result (``fusion.analysis.scaled_dots``: the ``scaled-dot`` op or the
    ``__op$block_scaled_dot`` custom-call): the dot's of its lhs and rhs; the type is
    declared."""
    sd = scaled_dot(instr, tuple(operands))
    lhs = expect_array(instr, operands[0], "the lhs")
    rhs = expect_array(instr, operands[1], "the rhs")
    return ArrayShape(sd.result.dtype, _dot_dims(instr, lhs, rhs, sd.lhs_contracting,
                                                 sd.rhs_contracting, sd.lhs_batch,
                                                 sd.rhs_batch))


def _dot_dims(instr: HloInstruction, lhs: ArrayShape, rhs: ArrayShape, lc, rc, lb, rb
              ) -> tuple[int, ...]:
    expect_dims_in_range(instr, lb + lc, lhs.rank, "lhs_batch_dims and lhs_contracting_dims")
    expect_dims_in_range(instr, rb + rc, rhs.rank, "rhs_batch_dims and rhs_contracting_dims")
    if len(lb) != len(rb) or len(lc) != len(rc):
        fail(instr, "dot needs as many lhs as rhs batch dims, and as many contracting dims")
    for kind, ls, rs in (("batch", lb, rb), ("contracting", lc, rc)):
        for a, b in zip(ls, rs):
            if lhs.dims[a] != rhs.dims[b]:
                fail(instr, f"dot {kind} dims differ: lhs dim {a} is {lhs.dims[a]}, "
                     f"rhs dim {b} is {rhs.dims[b]}")
    if (lhs.dtype == "pred") != (rhs.dtype == "pred"):
        fail(instr, f"dot operands have incompatible types {lhs.dtype} and {rhs.dtype}")
    dims = [lhs.dims[d] for d in lb]
    dims += [s for d, s in enumerate(lhs.dims) if d not in lb and d not in lc]
    dims += [s for d, s in enumerate(rhs.dims) if d not in rb and d not in rc]
    return tuple(dims)
