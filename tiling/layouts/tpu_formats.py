"""The tiled formats XLA/TPU picks (seed ``tiled_layout_tpu_formats.bn.txt``).

* 32-bit types: ``(8,128)``, matching the TPU's 8x128 32-bit vector registers; when the
  second-minor physical dim is 1 or 2, the compact ``(2,128)``, and when it is 3 or 4, ``(4,128)``;
* 16-bit types: ``(8,128)(2,1)``: two values from adjacent rows share a 32-bit word;
* 8-bit types: ``(8,128)(4,1)``: four values from four adjacent rows share a word;
* PRED: ``(32,128)(32,1)``, one bit per element.

Other widths (64-bit, complex, sub-byte) have no TPU tiled format in the seed: ``LayoutError``.

>>> str(tpu_layout(ArrayShape("bf16", (37, 300))))
'{1,0:T(8,128)(2,1)}'
>>> str(tpu_layout(ArrayShape("f32", (3, 300))))
'{1,0:T(4,128)}'
"""
from __future__ import annotations

from typing import Sequence

from fusion.ir.element_types import element_type
from fusion.ir.layout import Layout, Tile
from fusion.ir.shape import ArrayShape
from tiling.layouts.tiled_layout import LayoutError, validate_layout


def tpu_tiles(dtype: str, physical_dims: Sequence[int]) -> tuple[Tile, ...]:
    """The TPU tiles for an element type and the physical dims (major to minor).

    A rank-0 or rank-1 shape has an implicit second-minor dim of 1.

    >>> [str(t) for t in tpu_tiles("f32", (5, 2, 1000))]
    ['(2,128)']
    >>> [str(t) for t in tpu_tiles("pred", (64, 64))]
    ['(32,128)', '(32,1)']
    """
    et = element_type(dtype)
    second_minor = physical_dims[-2] if len(physical_dims) >= 2 else 1
    if et.is_pred:
        return (Tile((32, 128)), Tile((32, 1)))
    if et.is_complex or not et.has_values:
        raise LayoutError(f"no TPU tiled format for element type {dtype}")
    if et.bits == 32:
        if second_minor <= 2:
            return (Tile((2, 128)),)
        if second_minor <= 4:
            return (Tile((4, 128)),)
        return (Tile((8, 128)),)
    if et.bits == 16:
        return (Tile((8, 128)), Tile((2, 1)))
    if et.bits == 8:
        return (Tile((8, 128)), Tile((4, 1)))
    raise LayoutError(f"no TPU tiled format for {et.bits}-bit element type {dtype}")


def tpu_layout(shape: ArrayShape) -> Layout:
    """``shape``'s layout (default row-major when it has none) with XLA/TPU's tiles.

    >>> str(tpu_layout(ArrayShape("s8", (4, 9, 256), Layout((1, 2, 0)))))
    '{1,2,0:T(8,128)(4,1)}'
    """
    base = shape.effective_layout
    validate_layout(shape.dims, base, where=str(shape))
    physical = tuple(shape.dims[d] for d in reversed(base.minor_to_major))
    return Layout(
        base.minor_to_major,
        tpu_tiles(shape.dtype, physical),
        base.element_size_in_bits,
        base.memory_space,
        base.extras,
    )
