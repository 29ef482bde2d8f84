"""Shape rules of the ops with a reducer: reduce, reduce-window, select-and-scatter (sort's
comparator is checked by ``shape_rules_sort`` with :func:`expect_reducer`; dot is in
``shape_rules_dot``, as in the evaluator and the indexing analysis).

>>> from fusion.ir.attributes import WindowDim
>>> from fusion.ir.hlo_module import HloInstruction
>>> w = Window((WindowDim(size=2, stride=2),))
>>> rw = HloInstruction("w", "reduce-window", ArrayShape("f32", (4,)), ("x", "z"), (("window", w),))
>>> windowed_dims(rw, ArrayShape("f32", (8,)))
(4,)
"""
from __future__ import annotations

from typing import Sequence

from fusion.ir.attributes import Window
from fusion.ir.element_types import element_type
from fusion.ir.hlo_module import HloInstruction, HloModule
from fusion.ir.shape import ArrayShape, Shape, TupleShape
from fusion.shapes.checks import (
    callee,
    expect_array,
    expect_dims_in_range,
    expect_operand_count,
    expect_same_dims,
    expect_same_type,
    expect_scalar,
    fail,
    int_list,
    signature,
)


def _compatible(have: str, want: str) -> bool:
    # XLA lets a reducer's input parameters differ from the input in float precision only.
    return have == want or (element_type(have).is_float and element_type(want).is_float)


def expect_reducer(
    instr: HloInstruction, module: HloModule | None, key: str,
    acc_dtypes: Sequence[str], input_dtypes: Sequence[str], result: str | None = None,
) -> None:
    """``key`` names a computation ``(acc..., input...) -> acc`` over scalars.

    ``result`` overrides the root type (``pred`` for comparators and select functions).
    """
    comp = callee(instr, module, key)
    params, root = signature(comp)
    wanted = list(acc_dtypes) + list(input_dtypes)
    if len(params) != len(wanted):
        fail(instr, f"{key} computation '{comp.name}' takes {len(params)} parameters, "
             f"expected {len(wanted)}")
    for n, (p, want) in enumerate(zip(params, wanted)):
        if not isinstance(p, ArrayShape) or p.rank != 0 or not _compatible(p.dtype, want):
            fail(instr, f"parameter {n} of {key} computation '{comp.name}' is {p}",
                 expected=f"{want}[]")
    leaves = [root] if result is not None or len(acc_dtypes) == 1 else (
        list(root.elements) if isinstance(root, TupleShape) else [])
    wanted_out = [result] if result is not None else list(acc_dtypes)
    if len(leaves) != len(wanted_out) or not all(
        isinstance(r, ArrayShape) and r.rank == 0 and r.dtype == w
        for r, w in zip(leaves, wanted_out)
    ):
        expected = wanted_out[0] + "[]" if len(wanted_out) == 1 else (
            "(" + ", ".join(w + "[]" for w in wanted_out) + ")")
        fail(instr, f"{key} computation '{comp.name}' returns {root}", expected=expected)


def _inputs_and_inits(
    instr: HloInstruction, operands: Sequence[Shape]
) -> tuple[list[ArrayShape], list[ArrayShape]]:
    expect_operand_count(instr, operands, 2, -1)
    if len(operands) % 2:
        fail(instr, f"{instr.opcode} needs as many init values as inputs, got {len(operands)} operands")
    n = len(operands) // 2
    xs = [expect_array(instr, s, f"input {k}") for k, s in enumerate(operands[:n])]
    inits = [expect_scalar(instr, s, f"init value {k}") for k, s in enumerate(operands[n:])]
    expect_same_dims(instr, xs, "the inputs")
    return xs, inits


def _results(dims: tuple[int, ...], inits: Sequence[ArrayShape]) -> Shape:
    shapes = tuple(ArrayShape(i.dtype, dims) for i in inits)
    return shapes[0] if len(shapes) == 1 else TupleShape(shapes)


def shape_reduce(instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None) -> Shape:
    """Variadic reduce: the reduced ``dimensions`` disappear; one result per init value."""
    xs, inits = _inputs_and_inits(instr, operands)
    dims = int_list(instr, "dimensions")
    expect_dims_in_range(instr, dims, xs[0].rank, "dimensions")
    expect_reducer(instr, module, "to_apply", [i.dtype for i in inits], [x.dtype for x in xs])
    kept = tuple(s for d, s in enumerate(xs[0].dims) if d not in dims)
    return _results(kept, inits)


def windowed_dims(instr: HloInstruction, x: ArrayShape) -> tuple[int, ...]:
    """The dims of a ``window`` slid over ``x`` (reduce-window, select-and-scatter)."""
    window = instr.attr("window", None)
    if not isinstance(window, Window) or len(window.dims) != x.rank:
        fail(instr, f"{instr.opcode} over rank-{x.rank} {x} needs a window with {x.rank} dims")
    out = []
    for d, (size, w) in enumerate(zip(x.dims, window.dims)):
        if w.size < 1 or w.stride < 1 or w.base_dilation < 1 or w.window_dilation < 1:
            fail(instr, f"window dim {d} has a non-positive size, stride or dilation")
        padded = max(size - 1, 0) * w.base_dilation + (1 if size else 0)
        padded += w.padding_low + w.padding_high
        extent = (w.size - 1) * w.window_dilation + 1
        out.append(0 if padded < extent else (padded - extent) // w.stride + 1)
    return tuple(out)


def shape_reduce_window(
    instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None
) -> Shape:
    xs, inits = _inputs_and_inits(instr, operands)
    expect_reducer(instr, module, "to_apply", [i.dtype for i in inits], [x.dtype for x in xs])
    return _results(windowed_dims(instr, xs[0]), inits)


def shape_select_and_scatter(
    instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None
) -> Shape:
    """``select-and-scatter(operand, source, init)``: source has the windowed operand's dims."""
    expect_operand_count(instr, operands, 3)
    x = expect_array(instr, operands[0], "the operand")
    source = expect_array(instr, operands[1], "the source")
    init = expect_scalar(instr, operands[2], "the init value")
    expect_same_type(instr, (source, init), "the source and init value")
    windowed = windowed_dims(instr, x)
    if source.dims != windowed:
        fail(instr, f"source {source} must have the windowed operand's dims {list(windowed)}")
    expect_reducer(instr, module, "select", [x.dtype], [x.dtype], result="pred")
    expect_reducer(instr, module, "scatter", [init.dtype], [source.dtype])
    return ArrayShape(x.dtype, x.dims)

