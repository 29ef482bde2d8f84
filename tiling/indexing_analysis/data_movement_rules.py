"""Indexing of ops that only move data: broadcast, concatenate, get-tuple-element, pad,
reverse, slice, transpose, tuple.

The seed's slice, output -> input and input -> output:

>>> from fusion.ir.hlo_module import HloInstruction
>>> from fusion.ir.shape import ArrayShape
>>> from fusion.ir.attributes import SliceDim
>>> from tiling.indexing_analysis.operands import Operand
>>> p0 = Operand(ArrayShape("f32", (10, 20, 50)))
>>> sl = HloInstruction("s", "slice", ArrayShape("f32", (5, 3, 25)), ("p0",),
...     (("slice", (SliceDim(5, 10, 1), SliceDim(3, 20, 7), SliceDim(0, 50, 2))),))
>>> print(o2i_slice(sl, (p0,), 0)[0])
(d0, d1, d2) -> (d0 + 5, d1 * 7 + 3, d2 * 2), domain: d0 in [0, 4], d1 in [0, 2], d2 in [0, 24]
>>> print(i2o_slice(sl, (p0,), 0)[0].to_string(multiline=True))
(d0, d1, d2) -> (d0 - 5, (d1 - 3) floordiv 7, d2 floordiv 2)
domain:
d0 in [5, 9]
d1 in [3, 17]
d2 in [0, 48]
(d1 - 3) mod 7 in [0, 0]
d2 mod 2 in [0, 0]
"""
from __future__ import annotations

from typing import Sequence

from tiling.maps.affine_expr import d, s
from tiling.indexing_analysis.operands import (
    Operand,
    array_dims,
    broadcast_scalar_map,
    not_read,
    num_outputs,
    scalar_map,
)
from tiling.maps.indexing_map import IndexingMap
from tiling.maps.interval import Interval


# --- broadcast ------------------------------------------------------------------------------
def o2i_broadcast(instr, operands: Sequence[Operand], output_index: int):
    out = array_dims(instr.shape)
    return (IndexingMap.from_sizes(tuple(d(k) for k in instr.attr("dimensions")), out),)


def i2o_broadcast(instr, operands: Sequence[Operand], operand_index: int):
    out = array_dims(instr.shape)
    dims = tuple(instr.attr("dimensions"))
    results, range_sizes = [], []
    for j, size in enumerate(out):
        if j in dims:
            results.append(d(dims.index(j)))
        else:
            results.append(s(len(range_sizes)))
            range_sizes.append(size)
    return (IndexingMap.from_sizes(tuple(results), operands[0].dims, range_sizes),)


# --- concatenate ----------------------------------------------------------------------------
def _concat_offsets(operands: Sequence[Operand], axis: int) -> list[int]:
    offsets, total = [], 0
    for operand in operands:
        offsets.append(total)
        total += operand.dims[axis]
    return offsets


def o2i_concatenate(instr, operands: Sequence[Operand], output_index: int):
    out = array_dims(instr.shape)
    axis = instr.attr("dimensions")[0]
    maps = []
    for operand, offset in zip(operands, _concat_offsets(operands, axis)):
        bounds = [Interval(0, n - 1) for n in out]
        bounds[axis] = Interval(offset, offset + operand.dims[axis] - 1)
        results = tuple(d(i) - offset if i == axis else d(i) for i in range(len(out)))
        maps.append(IndexingMap.create(results, bounds))
    return tuple(maps)


def i2o_concatenate(instr, operands: Sequence[Operand], operand_index: int):
    axis = instr.attr("dimensions")[0]
    offset = _concat_offsets(operands, axis)[operand_index]
    dims = operands[operand_index].dims
    results = tuple(d(i) + offset if i == axis else d(i) for i in range(len(dims)))
    return (IndexingMap.from_sizes(results, dims),)


# --- get-tuple-element and tuple ------------------------------------------------------------
def o2i_get_tuple_element(instr, operands: Sequence[Operand], output_index: int):
    # The map reaches leaf `index` of the tuple operand; fusion composition tracks which leaf.
    return (IndexingMap.identity(array_dims(instr.shape)),)


def i2o_get_tuple_element(instr, operands: Sequence[Operand], operand_index: int):
    return (IndexingMap.identity(array_dims(instr.shape)),)


def o2i_tuple(instr, operands: Sequence[Operand], output_index: int):
    out = array_dims(instr.shape, output_index)
    return tuple(
        IndexingMap.identity(out) if k == output_index else not_read(out, len(op.dims))
        for k, op in enumerate(operands)
    )


def i2o_tuple(instr, operands: Sequence[Operand], operand_index: int):
    dims = operands[operand_index].dims
    return tuple(
        IndexingMap.identity(dims) if j == operand_index
        else not_read(dims, len(array_dims(instr.shape, j)))
        for j in range(num_outputs(instr.shape))
    )


# --- pad ------------------------------------------------------------------------------------
def o2i_pad(instr, operands: Sequence[Operand], output_index: int):
    """XLA's ComputeOutputToInputPadOpIndexingImpl: output dims are restricted to the span of
    the (interior-padded) input; interior padding adds a divisibility constraint."""
    out = array_dims(instr.shape)
    results, bounds, constraints = [], [], {}
    for i, (n, p) in enumerate(zip(out, instr.attr("padding").dims)):
        bounds.append(Interval(max(0, p.low), min(n - 1, n - 1 - p.high)))
        if p.interior == 0:
            results.append(d(i) - p.low)
        else:
            results.append((d(i) - p.low) // (p.interior + 1))
            constraints[(d(i) - p.low) % (p.interior + 1)] = Interval(0, 0)
    operand_map = IndexingMap.create(tuple(results), bounds, constraints=constraints)
    return operand_map.simplify(), scalar_map(out)


def i2o_pad(instr, operands: Sequence[Operand], operand_index: int):
    out = array_dims(instr.shape)
    if operand_index == 1:
        return (broadcast_scalar_map(out),)
    dims = operands[0].dims
    results, constraints = [], {}
    for i, (n, p) in enumerate(zip(out, instr.attr("padding").dims)):
        e = d(i) * (p.interior + 1) + p.low
        results.append(e)
        if p.low < 0 or p.high < 0:  # negative padding cuts input elements off
            constraints[e] = Interval(0, n - 1)
    return (IndexingMap.from_sizes(tuple(results), dims).replace(constraints=constraints)
            .simplify(),)


# --- reverse --------------------------------------------------------------------------------
def _reverse_map(instr, dims: Sequence[int]) -> IndexingMap:
    rev = set(instr.attr("dimensions"))
    results = tuple(-d(i) + (n - 1) if i in rev else d(i) for i, n in enumerate(dims))
    return IndexingMap.from_sizes(results, dims)


def o2i_reverse(instr, operands: Sequence[Operand], output_index: int):
    return (_reverse_map(instr, array_dims(instr.shape)),)


def i2o_reverse(instr, operands: Sequence[Operand], operand_index: int):
    return (_reverse_map(instr, operands[0].dims),)


# --- slice ----------------------------------------------------------------------------------
def o2i_slice(instr, operands: Sequence[Operand], output_index: int):
    out = array_dims(instr.shape)
    results = tuple(d(i) * sd.stride + sd.start for i, sd in enumerate(instr.attr("slice")))
    return (IndexingMap.from_sizes(results, out),)


def i2o_slice(instr, operands: Sequence[Operand], operand_index: int):
    out = array_dims(instr.shape)
    results, bounds, constraints = [], [], {}
    for i, (n, sd) in enumerate(zip(out, instr.attr("slice"))):
        bounds.append(Interval(sd.start, sd.start + (n - 1) * sd.stride))
        if sd.stride == 1:
            results.append(d(i) - sd.start)
        else:
            results.append((d(i) - sd.start) // sd.stride)
            constraints[(d(i) - sd.start) % sd.stride] = Interval(0, 0)
    return (IndexingMap.create(tuple(results), bounds, constraints=constraints).simplify(),)


# --- transpose ------------------------------------------------------------------------------
def o2i_transpose(instr, operands: Sequence[Operand], output_index: int):
    perm = tuple(instr.attr("dimensions"))
    inverse = [0] * len(perm)
    for i, p in enumerate(perm):
        inverse[p] = i
    return (IndexingMap.from_sizes(tuple(d(i) for i in inverse), array_dims(instr.shape)),)


def i2o_transpose(instr, operands: Sequence[Operand], operand_index: int):
    perm = tuple(instr.attr("dimensions"))
    return (IndexingMap.from_sizes(tuple(d(p) for p in perm), operands[0].dims),)
