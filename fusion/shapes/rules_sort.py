"""Shape rule of sort (``evaluator/sort_ops.py``): operands of equal dims, a comparator.

>>> from fusion.ir.hlo_module import HloInstruction
>>> i = HloInstruction("s", "sort", ArrayShape("f32", (3,)), ("x",), (("dimensions", (0,)),))
>>> from fusion.errors import HloVerifyError
>>> try:
...     shape_sort(i, (ArrayShape("f32", (3,)),), None)
... except HloVerifyError as e:
...     print(e.message)
sort is missing attribute 'to_apply'
"""
from __future__ import annotations

from typing import Sequence

from fusion.ir.hlo_module import HloInstruction, HloModule
from fusion.ir.shape import ArrayShape, Shape, TupleShape
from fusion.shapes.checks import (
    expect_array,
    expect_dims_in_range,
    expect_operand_count,
    expect_same_dims,
    one_dim,
)
from fusion.shapes.rules_reduce import expect_reducer


def shape_sort(instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None) -> Shape:
    """Sorts operands of equal dims along ``dimensions``; the comparator sees pairs of each."""
    expect_operand_count(instr, operands, 1, -1)
    xs = [expect_array(instr, s, f"operand {k}") for k, s in enumerate(operands)]
    expect_same_dims(instr, xs, "the operands")
    dim = one_dim(instr, "dimensions")
    expect_dims_in_range(instr, (dim,), xs[0].rank, "dimensions")
    pairs = [d for x in xs for d in (x.dtype, x.dtype)]
    expect_reducer(instr, module, "to_apply", pairs, [], result="pred")
    return xs[0] if len(xs) == 1 else TupleShape(tuple(xs))
