"""Where an element of a buffer lives: logical indices -> physical offset expression.

One function per layout family, so a layout can be swapped without touching the emitter:
:func:`buffer_addressing` picks it.  Untiled layouts are addressed through ``minor_to_major``
(the default layout is row-major); TILED layouts (``T(...)``) are not handled yet and raise
``UnsupportedOpError`` naming the buffer.

>>> from fusion.shape import ArrayShape
>>> from fusion.layout import Layout
>>> from tiling.affine_expr import d
>>> a = buffer_addressing(ArrayShape("f32", (3, 5), Layout((0, 1))), "p0")
>>> a.strides, str(a.offset((d(0), d(1))))
((1, 3), 'd0 + d1 * 3')
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fusion.errors import UnsupportedOpError
from fusion.shape import ArrayShape
from tiling.affine_expr import AffineExpr, const


def physical_strides(shape: ArrayShape) -> tuple[int, ...]:
    """Element strides of each logical dim under the shape's (untiled) layout.

    >>> from fusion.shape import ArrayShape
    >>> physical_strides(ArrayShape("f32", (2, 3, 4)))
    (12, 4, 1)
    """
    order = minor_to_major(shape)
    strides = [0] * shape.rank
    step = 1
    for dim in order:
        strides[dim] = step
        step *= shape.dims[dim]
    return tuple(strides)


def minor_to_major(shape: ArrayShape) -> tuple[int, ...]:
    """The layout's dim order, minor first; row-major when the shape has no layout."""
    if shape.layout is None or not shape.layout.minor_to_major:
        return tuple(range(shape.rank - 1, -1, -1))
    return tuple(shape.layout.minor_to_major)


@dataclass(frozen=True)
class BufferAddressing:
    """How to address one kernel buffer: offset of logical indices, in elements of its dtype."""

    name: str
    shape: ArrayShape
    strides: tuple[int, ...]

    def offset(self, indices: Sequence[AffineExpr]) -> AffineExpr:
        """The element offset of the element at ``indices`` (affine in the indices)."""
        if not indices:
            return const(0)
        total = const(0)
        for index, stride in zip(indices, self.strides):
            total = total + index * stride
        return total


def buffer_addressing(shape: ArrayShape, name: str) -> BufferAddressing:
    """The addressing of a buffer with this shape (``name`` is for error messages)."""
    if shape.layout is not None and shape.layout.tiles:
        raise UnsupportedOpError(
            f"tiled layout {shape.layout} of {name} is not supported by the Triton backend yet",
            where=name)
    if shape.layout is not None and shape.layout.minor_to_major and \
            sorted(shape.layout.minor_to_major) != list(range(shape.rank)):
        raise UnsupportedOpError(f"layout {shape.layout} of {name} is not a permutation of its dims",
                                 where=name)
    return BufferAddressing(name, shape, physical_strides(shape))


__all__ = ["BufferAddressing", "buffer_addressing", "minor_to_major", "physical_strides"]
