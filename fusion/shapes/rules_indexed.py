"""Shape rules of gather and scatter, whose dims come from index arrays and dimension numbers.

>>> from fusion.ir.hlo_module import HloInstruction
>>> i = HloInstruction("g", "gather", ArrayShape("f32", (3, 3)), ("x", "i"), (
...     ("offset_dims", (1,)), ("collapsed_slice_dims", (0,)), ("start_index_map", (0,)),
...     ("index_vector_dim", 1), ("slice_sizes", (1, 3))))
>>> str(shape_gather(i, (ArrayShape("f32", (5, 3)), ArrayShape("s32", (3, 1))), None))
'f32[3,3]'
"""
from __future__ import annotations

from typing import Sequence

from fusion.ir.hlo_module import HloInstruction, HloModule
from fusion.ir.shape import ArrayShape, Shape, TupleShape
from fusion.shapes.checks import (
    expect_array,
    expect_dims_in_range,
    expect_kind,
    expect_operand_count,
    expect_same_dims,
    expect_same_type,
    fail,
    int_attr,
    int_list,
)
from fusion.shapes.rules_reduce import expect_reducer


def _expanded_indices(instr: HloInstruction, indices: ArrayShape) -> tuple[tuple[int, ...], int]:
    """The indices' dims with the implicit trailing 1 when ``index_vector_dim == rank``."""
    expect_kind(instr, indices, "signed unsigned", "the indices")
    ivd = int_attr(instr, "index_vector_dim")
    if not 0 <= ivd <= indices.rank:
        fail(instr, f"index_vector_dim={ivd} out of range for indices {indices}")
    dims = indices.dims + (1,) if ivd == indices.rank else indices.dims
    return dims, ivd


def _sorted_dims(instr: HloInstruction, key: str, rank: int) -> tuple[int, ...]:
    dims = int_list(instr, key, ())
    expect_dims_in_range(instr, dims, rank, key)
    if list(dims) != sorted(dims):
        fail(instr, f"{key}={{{','.join(map(str, dims))}}} must be sorted")
    return dims


def _index_map(instr: HloInstruction, key: str, vector_size: int, operand_rank: int) -> None:
    dims = int_list(instr, key, ())
    if len(dims) != vector_size:
        fail(instr, f"{key} has {len(dims)} entries but the index vector has {vector_size}")
    expect_dims_in_range(instr, dims, operand_rank, key)


def _batching(instr: HloInstruction, operand_key: str, indices_key: str, operand_rank: int,
              index_dims: tuple[int, ...], ivd: int) -> tuple[int, ...]:
    operand_batching = _sorted_dims(instr, operand_key, operand_rank)
    indices_batching = int_list(instr, indices_key, ())
    if len(indices_batching) != len(operand_batching):
        fail(instr, f"{operand_key} and {indices_key} differ in length")
    expect_dims_in_range(instr, indices_batching, len(index_dims), indices_key)
    if ivd in indices_batching:
        fail(instr, f"{indices_key} must not contain index_vector_dim {ivd}")
    return operand_batching


def shape_gather(instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None) -> Shape:
    """Output dims: ``offset_dims`` positions take the kept slice sizes, the others the batch."""
    expect_operand_count(instr, operands, 2)
    x = expect_array(instr, operands[0], "the operand")
    indices = expect_array(instr, operands[1], "the start indices")
    index_dims, ivd = _expanded_indices(instr, indices)
    sizes = int_list(instr, "slice_sizes")
    if len(sizes) != x.rank:
        fail(instr, f"slice_sizes has {len(sizes)} entries for rank-{x.rank} operand {x}")
    for d, (s, bound) in enumerate(zip(sizes, x.dims)):
        if not 0 <= s <= bound:
            fail(instr, f"slice size {s} of dim {d} out of range for operand {x}")
    collapsed = _sorted_dims(instr, "collapsed_slice_dims", x.rank)
    batching = _batching(instr, "operand_batching_dims", "start_indices_batching_dims",
                         x.rank, index_dims, ivd)
    for d in collapsed + batching:
        if sizes[d] > 1:
            fail(instr, f"collapsed or batching dim {d} must have slice size <= 1, got {sizes[d]}")
    _index_map(instr, "start_index_map", index_dims[ivd], x.rank)
    offset_sizes = [s for d, s in enumerate(sizes) if d not in collapsed and d not in batching]
    batch_sizes = [s for d, s in enumerate(index_dims) if d != ivd]
    out_rank = len(offset_sizes) + len(batch_sizes)
    offset_dims = _sorted_dims(instr, "offset_dims", out_rank)
    if len(offset_dims) != len(offset_sizes):
        fail(instr, f"offset_dims has {len(offset_dims)} entries but {len(offset_sizes)} slice "
             "dims are neither collapsed nor batching")
    offset_iter, batch_iter = iter(offset_sizes), iter(batch_sizes)
    dims = tuple(next(offset_iter) if d in offset_dims else next(batch_iter)
                 for d in range(out_rank))
    return ArrayShape(x.dtype, dims)


def shape_scatter(instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None) -> Shape:
    """``scatter(operands..., indices, updates...)``: the result has the operands' shapes."""
    expect_operand_count(instr, operands, 3, -1)
    if len(operands) % 2 != 1:
        fail(instr, f"scatter needs N operands, the indices and N updates; got {len(operands)}")
    n = len(operands) // 2
    xs = [expect_array(instr, s, f"operand {k}") for k, s in enumerate(operands[:n])]
    indices = expect_array(instr, operands[n], "the scatter indices")
    updates = [expect_array(instr, s, f"update {k}") for k, s in enumerate(operands[n + 1:])]
    expect_same_dims(instr, xs, "the scattered operands")
    expect_same_dims(instr, updates, "the updates")
    for x, u in zip(xs, updates):
        expect_same_type(instr, (x, u), "an operand and its update")
    x, u = xs[0], updates[0]
    index_dims, ivd = _expanded_indices(instr, indices)
    window_dims = _sorted_dims(instr, "update_window_dims", u.rank)
    inserted = _sorted_dims(instr, "inserted_window_dims", x.rank)
    batching = _batching(instr, "input_batching_dims", "scatter_indices_batching_dims",
                         x.rank, index_dims, ivd)
    if len(window_dims) + len(inserted) + len(batching) != x.rank:
        fail(instr, f"update_window_dims, inserted_window_dims and input_batching_dims must "
             f"together cover the {x.rank} operand dims")
    _index_map(instr, "scatter_dims_to_operand_dims", index_dims[ivd], x.rank)
    scatter_sizes = [s for d, s in enumerate(u.dims) if d not in window_dims]
    batch_sizes = [s for d, s in enumerate(index_dims) if d != ivd]
    if scatter_sizes != batch_sizes:
        fail(instr, f"update scatter dims {scatter_sizes} do not match the indices' batch dims "
             f"{batch_sizes}")
    window_bounds = [s for d, s in enumerate(x.dims) if d not in inserted and d not in batching]
    for d, bound in zip(window_dims, window_bounds):
        if u.dims[d] > bound:
            fail(instr, f"update window dim {d} (size {u.dims[d]}) exceeds the operand's {bound}")
    expect_reducer(instr, module, "to_apply", [a.dtype for a in xs], [a.dtype for a in xs])
    return xs[0] if n == 1 else TupleShape(tuple(xs))
