"""The seed's TPU format rules, and their sizes for non-multiple shapes."""
from __future__ import annotations

import pytest

from fusion.ir.layout import Layout
from fusion.ir.shape import ArrayShape
from tiling.layouts.tiled_layout import LayoutError, TiledLayout, byte_size
from tiling.layouts.tpu_formats import tpu_layout, tpu_tiles


@pytest.mark.parametrize(
    "dtype, dims, tiles",
    [
        ("f32", (37, 300), "(8,128)"),
        ("s32", (5, 8, 128), "(8,128)"),
        ("u32", (1, 300), "(2,128)"),
        ("f32", (2, 300), "(2,128)"),
        ("f32", (3, 300), "(4,128)"),
        ("f32", (7, 4, 300), "(4,128)"),
        ("f32", (5, 300), "(8,128)"),
        ("f32", (300,), "(2,128)"),  # rank 1: the second-minor dim is an implicit 1
        ("bf16", (37, 300), "(8,128)(2,1)"),
        ("f16", (1, 3), "(8,128)(2,1)"),
        ("s16", (9, 9), "(8,128)(2,1)"),
        ("s8", (37, 300), "(8,128)(4,1)"),
        ("f8e4m3fn", (2, 2), "(8,128)(4,1)"),
        ("pred", (37, 300), "(32,128)(32,1)"),
    ],
)
def test_tpu_tiles(dtype, dims, tiles):
    assert "".join(str(t) for t in tpu_tiles(dtype, dims)) == tiles


def test_second_minor_is_the_physical_one():
    # {0,1}: dim 0 is minor, so the second-minor physical dim is dim 1 (size 2).
    layout = tpu_layout(ArrayShape("f32", (300, 2), Layout((0, 1))))
    assert str(layout) == "{0,1:T(2,128)}"


@pytest.mark.parametrize(
    "dtype, dims, elements, nbytes",
    [
        ("bf16", (37, 300), 40 * 384, 40 * 384 * 2),
        ("s8", (37, 300), 40 * 384, 40 * 384),
        ("pred", (37, 300), 64 * 384, 64 * 384 // 8),
        ("f32", (3, 129), 4 * 256, 4 * 256 * 4),
        ("f32", (), 2 * 128, 2 * 128 * 4),
    ],
)
def test_padded_sizes(dtype, dims, elements, nbytes):
    layout = tpu_layout(ArrayShape(dtype, dims))
    assert TiledLayout.of(dims, layout).padded_elements == elements
    assert byte_size(dtype, dims, layout) == nbytes


@pytest.mark.parametrize("dtype", ["f64", "c64", "s4", "token"])
def test_types_without_a_tpu_format(dtype):
    with pytest.raises(LayoutError, match="no TPU tiled format"):
        tpu_tiles(dtype, (8, 128))
