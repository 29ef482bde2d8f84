"""Indexing of reshape and bitcast.

A reshape is split into "minimal" reshapes between sub-shapes with equal element counts
(XLA's ComputeReshapeIndexingMap); each is unchanged, an expansion (linearize), a collapse
(delinearize) or both.  A bitcast is a transpose-reshape-transpose through the physical
(major-to-minor) orders of both layouts.

>>> print(reshape_exprs_map((4, 8), (2, 4, 4)))
(d0, d1, d2) -> (d0 * 2 + d1 floordiv 2, d2 + (d1 mod 2) * 4), domain: d0 in [0, 1], d1 in [0, 3], d2 in [0, 3]
"""
from __future__ import annotations

import math
from typing import Sequence

from fusion.ir.shape import ArrayShape
from tiling.maps.affine_expr import AffineExpr, Constant, d
from tiling.maps.expr_variables import substitute
from tiling.indexing_analysis.operands import Operand
from tiling.maps.indexing_map import IndexingMap


def _strides(dims: Sequence[int]) -> list[int]:
    strides, acc = [], 1
    for n in reversed(dims):
        strides.append(acc)
        acc *= n
    return strides[::-1]


def _linearize(dims: Sequence[int], exprs: Sequence[AffineExpr]) -> AffineExpr:
    total: AffineExpr = Constant(0)
    for stride, e in zip(_strides(dims), exprs):
        total = total + e * stride
    return total


def _delinearize(dims: Sequence[int], linear: AffineExpr) -> list[AffineExpr]:
    out, rest = [], linear
    for stride in _strides(dims):
        out.append(rest // stride)
        rest = rest % stride
    return out


def _minimal(in_dims, out_dims, out_exprs) -> list[AffineExpr]:
    if len(in_dims) == 1 and len(out_dims) == 1:
        return list(out_exprs)
    if len(in_dims) == 1:
        return [_linearize(out_dims, out_exprs)]
    if len(out_dims) == 1:
        return _delinearize(in_dims, out_exprs[0])
    return _delinearize(in_dims, _linearize(out_dims, out_exprs))


def reshape_exprs(in_dims: Sequence[int], out_dims: Sequence[int]) -> tuple[AffineExpr, ...]:
    """The input index of a reshape ``in_dims -> out_dims`` in terms of the output dims."""
    if math.prod(out_dims) == 0:
        return tuple(Constant(0) for _ in in_dims)
    exprs: list[AffineExpr] = []
    in_sub: list[int] = []
    out_sub: list[int] = []
    out_sub_exprs: list[AffineExpr] = []
    n_in = n_out = 1
    i = o = 0
    while i < len(in_dims) or o < len(out_dims) or in_sub:
        if i < len(in_dims) and (not in_sub or n_in < n_out or in_dims[i] == 1):
            n_in *= in_dims[i]
            in_sub.append(in_dims[i])
            i += 1
            continue
        if o < len(out_dims) and (not out_sub or n_out < n_in or out_dims[o] == 1):
            n_out *= out_dims[o]
            out_sub.append(out_dims[o])
            out_sub_exprs.append(d(o))
            o += 1
            continue
        exprs += _minimal(in_sub, out_sub, out_sub_exprs)
        n_in = n_out = 1
        in_sub, out_sub, out_sub_exprs = [], [], []
    return tuple(exprs)


def reshape_exprs_map(in_dims: Sequence[int], out_dims: Sequence[int]) -> IndexingMap:
    """Output -> input map of a reshape ``in_dims -> out_dims``, simplified."""
    return IndexingMap.from_sizes(reshape_exprs(in_dims, out_dims), out_dims).simplify()


def o2i_reshape(instr, operands: Sequence[Operand], output_index: int):
    return (reshape_exprs_map(operands[0].dims, instr.shape.dims),)


def i2o_reshape(instr, operands: Sequence[Operand], operand_index: int):
    return (reshape_exprs_map(instr.shape.dims, operands[0].dims),)


def _major_to_minor(shape: ArrayShape) -> tuple[int, ...]:
    return tuple(reversed(shape.effective_layout.minor_to_major))


def bitcast_map(src: ArrayShape, dst: ArrayShape) -> IndexingMap:
    """Map from ``dst``'s logical index to ``src``'s logical index for a bitcast ``src ->
    dst``: both see the same physical (major-to-minor) buffer.  Tiled layouts are not
    interpreted: undefined.

    >>> from fusion.ir.layout import Layout
    >>> print(bitcast_map(ArrayShape("f32", (3, 4), Layout((0, 1))), ArrayShape("f32", (4, 3))))
    (d0, d1) -> (d1, d0), domain: d0 in [0, 3], d1 in [0, 2]
    """
    if src.effective_layout.tiles or dst.effective_layout.tiles:
        return IndexingMap.undefined()
    if src.num_elements != dst.num_elements:
        return IndexingMap.undefined()
    src_order, dst_order = _major_to_minor(src), _major_to_minor(dst)
    src_phys = [src.dims[k] for k in src_order]
    dst_phys = [dst.dims[k] for k in dst_order]
    # Physical dst index j is logical dst dim dst_order[j].
    phys_exprs = reshape_exprs(src_phys, dst_phys)
    dst_logical = [d(k) for k in dst_order]
    memo: dict = {}
    src_phys_exprs = [substitute(e, dst_logical, None, memo) for e in phys_exprs]
    results = [Constant(0)] * src.rank
    for j, k in enumerate(src_order):
        results[k] = src_phys_exprs[j]
    return IndexingMap.from_sizes(tuple(results), dst.dims).simplify()


def o2i_bitcast(instr, operands: Sequence[Operand], output_index: int):
    return (bitcast_map(operands[0].shape, instr.shape),)


def i2o_bitcast(instr, operands: Sequence[Operand], operand_index: int):
    return (bitcast_map(instr.shape, operands[0].shape),)
