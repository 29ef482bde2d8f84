"""Where an element of a buffer lives: logical indices -> physical offset expression.

One function per layout family, so a layout can be swapped without touching the emitter:
:func:`buffer_addressing` picks it.  Untiled layouts are addressed through ``minor_to_major``
(the default layout is row-major) with one stride per dim.  *Physical* layouts -- tiled ones
(``T(...)``) and word-packed ones (``E(n)`` narrower than a byte) -- are addressed through the
layout's indexing map (``tiling.layouts.tiled_layout.layout_indexing_map``): the kernel buffer is then the
flat physical buffer, padding included, of elements or, when several elements share a 32-bit
word (``elements_per_word > 1``), of ``uint32`` words (see ``packed_access``).

>>> from fusion.ir.shape import ArrayShape
>>> from fusion.ir.layout import Layout
>>> from tiling.maps.affine_expr import d
>>> a = buffer_addressing(ArrayShape("f32", (3, 5), Layout((0, 1))), "p0")
>>> a.strides, str(a.offset((d(0), d(1))))
((1, 3), 'd0 + d1 * 3')
>>> from tiling.layouts.tiled_layout import parse_tiles
>>> t = buffer_addressing(ArrayShape("f32", (3, 5), parse_tiles("1,0", "(2,2)")), "p1")
>>> str(t.offset((d(0), d(1)))), t.buffer_entries, t.is_packed
('(d0 floordiv 2) * 12 + (d1 floordiv 2) * 4 + (d0 mod 2) * 2 + d1 mod 2', 24, False)
"""
from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from fusion.ir.element_types import element_type
from fusion.errors import UnsupportedOpError
from fusion.ir.layout import Layout
from fusion.ir.shape import ArrayShape
from tiling.maps.affine_expr import AffineExpr, const
from tiling.maps.expr_variables import substitute
from tiling.layouts.tiled_layout import (
    LayoutError,
    TiledLayout,
    elements_per_word,
    layout_indexing_map,
    storage_bits,
)


def physical_strides(shape: ArrayShape, where: str | None = None) -> tuple[int, ...]:
    """Element strides of each logical dim under the shape's (untiled) layout.

    A physical (tiled or word-packed) layout has no strides: ``UnsupportedOpError``.

    >>> from fusion.ir.shape import ArrayShape
    >>> physical_strides(ArrayShape("f32", (2, 3, 4)))
    (12, 4, 1)
    """
    if is_physical_layout(shape):
        raise UnsupportedOpError(
            f"{shape} has a tiled or packed layout, which has no per-dim strides "
            "(only loads, stores and elementwise ops read it)", where=where or str(shape))
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


def is_physical_layout(shape: ArrayShape) -> bool:
    """True when the shape's buffer is its layout's physical form: tiles, or packed words.

    >>> from tiling.layouts.tiled_layout import parse_tiles
    >>> is_physical_layout(ArrayShape("bf16", (4, 4), parse_tiles("1,0", "(8,128)(2,1)")))
    True
    >>> is_physical_layout(ArrayShape("bf16", (4, 4), parse_tiles("0,1")))
    False
    """
    layout = shape.layout
    if layout is None:
        return False
    return bool(layout.tiles) or bool(layout.element_size_in_bits)


@dataclass(frozen=True)
class BufferAddressing:
    """How to address one kernel buffer: offset of logical indices, in elements of its dtype.

    ``tiled`` is None for a strided layout; otherwise the buffer is the flat physical buffer
    (``buffer_entries`` entries: elements, or ``uint32`` words when ``per_word > 1``).
    """

    name: str
    shape: ArrayShape
    stride_tuple: tuple[int, ...] | None
    tiled: TiledLayout | None = None
    per_word: int = 1
    bits: int = 0

    @property
    def strides(self) -> tuple[int, ...]:
        if self.stride_tuple is None:
            raise UnsupportedOpError(f"{self.name} has the tiled layout {self.shape.layout}, "
                                     "which has no per-dim strides", where=self.name)
        return self.stride_tuple

    @property
    def is_packed(self) -> bool:
        """Several elements share each 32-bit word (read and written through ``packed_access``)."""
        return self.per_word > 1

    @property
    def buffer_entries(self) -> int:
        """Entries of the kernel buffer: elements, or 32-bit words when packed."""
        if self.tiled is None:
            return _product(self.shape.dims)
        return -(-self.tiled.padded_elements // self.per_word)

    def element_offset(self, indices: Sequence[AffineExpr]) -> AffineExpr:
        """The physical element offset (padding counted) of the element at ``indices``."""
        if not indices:
            return const(0)
        if self.tiled is not None:
            return substitute(_layout_offset(self.shape.dims, self.shape.layout), list(indices), None)
        total = const(0)
        for index, stride in zip(indices, self.strides):
            total = total + index * stride
        return total

    def offset(self, indices: Sequence[AffineExpr]) -> AffineExpr:
        """The offset of the element at ``indices`` in buffer entries (affine in the indices).

        Packed buffers have no per-element entry: ``UnsupportedOpError``.
        """
        if self.is_packed:
            raise UnsupportedOpError(
                f"{self.name} is word-packed ({self.shape.layout}); this kernel template "
                "cannot read or write it element by element", where=self.name)
        return self.element_offset(indices)


@functools.lru_cache(maxsize=256)
def _layout_offset(dims: tuple[int, ...], layout: Layout) -> AffineExpr:
    # Pure memoization: the simplified map of one (dims, layout) is needed at every access.
    return layout_indexing_map(dims, layout).results[0]


def _product(dims) -> int:
    total = 1
    for size in dims:
        total *= size
    return total


def buffer_addressing(shape: ArrayShape, name: str) -> BufferAddressing:
    """The addressing of a buffer with this shape (``name`` is for error messages)."""
    if shape.layout is not None and shape.layout.minor_to_major and \
            sorted(shape.layout.minor_to_major) != list(range(shape.rank)):
        raise UnsupportedOpError(f"layout {shape.layout} of {name} is not a permutation of its dims",
                                 where=name)
    if not is_physical_layout(shape):
        return BufferAddressing(name, shape, physical_strides(shape))
    layout = shape.layout
    assert layout is not None
    try:
        tiled = TiledLayout.of(shape.dims, layout, where=name)
        bits = storage_bits(shape.dtype, layout)
        per = elements_per_word(shape.dtype, layout)
    except LayoutError as err:
        raise UnsupportedOpError(f"layout {layout} of {name}: {err}", where=name) from None
    natural = max(element_type(shape.dtype).bits, 8)
    if per == 1 and bits != natural:
        raise UnsupportedOpError(
            f"layout {layout} of {name} stores {shape.dtype} in {bits} bits without packing "
            "whole 32-bit words, which the Triton backend does not address", where=name)
    return BufferAddressing(name, shape, None, tiled, per, bits)


__all__ = ["BufferAddressing", "buffer_addressing", "is_physical_layout", "minor_to_major",
           "physical_strides"]
