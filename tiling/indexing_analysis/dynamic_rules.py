"""Indexing of dynamic-slice and dynamic-update-slice: offsets are runtime variables.

Each offset is a runtime variable read from its scalar operand (map ``(d..) -> ()``); its
feasible values ``[0, operand_dim - slice_size]`` assume the slice lies in bounds, which
XLA's clamping of the offsets guarantees.

>>> from fusion.text.parser import parse_hlo
>>> from tiling.indexing_analysis.operands import Operand
>>> c = parse_hlo('''HloModule m
... ENTRY e {
...   src = s32[8] parameter(0)
...   of = s32[] parameter(1)
...   ROOT ds = s32[3] dynamic-slice(src, of), dynamic_slice_sizes={3}
... }''').entry
>>> ops = tuple(Operand(c.instruction(n).shape, c.instruction(n)) for n in c.root.operands)
>>> print(o2i_dynamic_slice(c.root, ops, 0)[0])
(d0){rt0} -> (d0 + rt0), domain: d0 in [0, 2], rt0 in [0, 5]
"""
from __future__ import annotations

from typing import Sequence

from tiling.maps.affine_expr import d, s
from tiling.indexing_analysis.operands import (
    Operand,
    array_dims,
    broadcast_scalar_map,
    scalar_map,
    undefined_maps,
)
from tiling.maps.indexing_map import AffineMap, IndexingMap, RTVar
from tiling.maps.interval import Interval


def _offsets_are_scalars(operands: Sequence[Operand], first: int) -> bool:
    return all(len(op.dims) == 0 for op in operands[first:])


def _offset_vars(operands, first: int, sizes, slice_sizes, rank: int) -> tuple[RTVar, ...]:
    empty = AffineMap(rank, 0, ())
    return tuple(
        RTVar(Interval(0, n - k), operands[first + i].instruction, empty)
        for i, (n, k) in enumerate(zip(sizes, slice_sizes))
    )


# --- dynamic-slice --------------------------------------------------------------------------
def o2i_dynamic_slice(instr, operands: Sequence[Operand], output_index: int):
    out = array_dims(instr.shape)
    if not _offsets_are_scalars(operands, 1):  # the old form with one offsets vector
        return undefined_maps(len(operands))
    rank = len(out)
    rt = _offset_vars(operands, 1, operands[0].dims, instr.attr("dynamic_slice_sizes"), rank)
    src = IndexingMap.create(tuple(d(i) + s(i) for i in range(rank)),
                             [(0, n - 1) for n in out], (), rt)
    return (src,) + (scalar_map(out),) * (len(operands) - 1)


def i2o_dynamic_slice(instr, operands: Sequence[Operand], operand_index: int):
    out = array_dims(instr.shape)
    if not _offsets_are_scalars(operands, 1):
        return undefined_maps(1)
    if operand_index > 0:
        return (broadcast_scalar_map(out),)
    dims = operands[0].dims
    rank = len(dims)
    rt = _offset_vars(operands, 1, dims, out, rank)
    results = tuple(d(i) - s(i) for i in range(rank))
    constraints = {r: Interval(0, n - 1) for r, n in zip(results, out)}
    return (IndexingMap.create(results, [(0, n - 1) for n in dims], (), rt, constraints),)


# --- dynamic-update-slice -------------------------------------------------------------------
def o2i_dynamic_update_slice(instr, operands: Sequence[Operand], output_index: int):
    out = array_dims(instr.shape)
    if not _offsets_are_scalars(operands, 2):
        return undefined_maps(len(operands))
    rank = len(out)
    rt = _offset_vars(operands, 2, out, operands[1].dims, rank)
    # As in XLA the update's map is not restricted to the updated window: it is exact for
    # output elements inside it and points outside the update elsewhere.
    update = IndexingMap.create(tuple(d(i) - s(i) for i in range(rank)),
                                [(0, n - 1) for n in out], (), rt)
    return ((IndexingMap.identity(out), update)
            + (scalar_map(out),) * (len(operands) - 2))


def i2o_dynamic_update_slice(instr, operands: Sequence[Operand], operand_index: int):
    out = array_dims(instr.shape)
    if not _offsets_are_scalars(operands, 2):
        return undefined_maps(1)
    if operand_index == 0:
        return (IndexingMap.identity(out),)
    if operand_index >= 2:
        return (broadcast_scalar_map(out),)
    dims = operands[1].dims
    rank = len(dims)
    rt = _offset_vars(operands, 2, out, dims, rank)
    results = tuple(d(i) + s(i) for i in range(rank))
    return (IndexingMap.create(results, [(0, n - 1) for n in dims], (), rt),)
