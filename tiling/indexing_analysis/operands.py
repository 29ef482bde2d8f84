"""What an indexing rule knows about an instruction's operands, and map-building helpers.

A rule sees the instruction and, per operand, an ``Operand``: its shape and (when known) the
producing ``HloInstruction`` -- runtime variables name it as the instruction to read.

>>> from fusion.ir.shape import ArrayShape
>>> print(scalar_map((2, 3)))
(d0, d1) -> (), domain: d0 in [0, 1], d1 in [0, 2]
>>> print(broadcast_scalar_map((4,)))
()[s0] -> (s0), domain: s0 in [0, 3]
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from fusion.ir.shape import ArrayShape, Shape, TupleShape, flatten_shape
from tiling.maps.affine_expr import s
from tiling.maps.indexing_map import IndexingMap


@dataclass(frozen=True)
class Operand:
    """One operand of the instruction being analysed."""

    shape: Shape
    instruction: Any = None  # the producing HloInstruction, if known

    @property
    def dims(self) -> tuple[int, ...]:
        return array_dims(self.shape)


def array_dims(shape: Shape, index: int = 0) -> tuple[int, ...]:
    """Dims of an array shape, or of the ``index``-th leaf of a tuple shape.

    >>> array_dims(ArrayShape("f32", (2, 3)))
    (2, 3)
    """
    if isinstance(shape, ArrayShape):
        return shape.dims
    leaves = flatten_shape(shape)
    return leaves[index].dims


def num_outputs(shape: Shape) -> int:
    """1 for an array, the number of leaves for a tuple (a variadic reduce's outputs)."""
    return len(flatten_shape(shape)) if isinstance(shape, TupleShape) else 1


def scalar_map(dims: Sequence[int]) -> IndexingMap:
    """``(d0, ..) -> ()``: every element of a tensor reads the one element of a scalar."""
    return IndexingMap.from_sizes((), dims)


def broadcast_scalar_map(dims: Sequence[int]) -> IndexingMap:
    """``()[s0, ..] -> (s0, ..)``: a scalar reaches every element of a tensor of ``dims``."""
    return IndexingMap.from_sizes(tuple(s(i) for i in range(len(dims))), (), dims)


def not_read(from_dims: Sequence[int], to_rank: int) -> IndexingMap:
    """A known-empty map: the operand is not read for this output (e.g. another tuple leaf)."""
    return IndexingMap.from_sizes((0,) * to_rank, from_dims).as_known_empty()


def undefined_maps(count: int) -> tuple[IndexingMap, ...]:
    return tuple(IndexingMap.undefined() for _ in range(count))
