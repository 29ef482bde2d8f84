"""Indexing of elementwise ops (``add``, ``select``, ``clamp``, ``compare``, ``convert``, ...):
the identity, or ``(d..) -> ()`` for a scalar operand (``clamp``'s bounds may be scalars).

>>> from fusion.ir.hlo_module import HloInstruction
>>> from fusion.ir.shape import ArrayShape
>>> from tiling.indexing_analysis.operands import Operand
>>> t = ArrayShape("f32", (10, 20))
>>> add = HloInstruction("a", "add", t, ("p0", "p1"))
>>> print(o2i_elementwise(add, (Operand(t), Operand(t)), 0)[1])
(d0, d1) -> (d0, d1), domain: d0 in [0, 9], d1 in [0, 19]
"""
from __future__ import annotations

from typing import Sequence

from tiling.indexing_analysis.operands import (
    Operand,
    array_dims,
    broadcast_scalar_map,
    scalar_map,
)
from tiling.maps.indexing_map import IndexingMap

# The ops these rules serve: ``fusion.opcodes.ELEMENTWISE_OPCODES`` (XLA's IsOpElementwise,
# ``map`` included: its computation is applied element by element).


def _same_rank_or_scalar(instr, operand: Operand):
    out = array_dims(instr.shape)
    dims = operand.dims
    if len(dims) == len(out):
        return out, "identity"
    if not dims:
        return out, "scalar"
    return out, "other"


def o2i_elementwise(instr, operands: Sequence[Operand], output_index: int):
    maps = []
    for operand in operands:
        out, kind = _same_rank_or_scalar(instr, operand)
        if kind == "identity":
            maps.append(IndexingMap.identity(out))
        elif kind == "scalar":
            maps.append(scalar_map(out))
        else:  # bitcast-convert between widths changes the rank: no affine map per element
            maps.append(IndexingMap.undefined())
    return tuple(maps)


def i2o_elementwise(instr, operands: Sequence[Operand], operand_index: int):
    out, kind = _same_rank_or_scalar(instr, operands[operand_index])
    if kind == "identity":
        return (IndexingMap.identity(out),)
    if kind == "scalar":
        return (broadcast_scalar_map(out),)
    return (IndexingMap.undefined(),)
