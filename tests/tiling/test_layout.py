"""Tiled layout math against the seed's worked examples and a brute-force NumPy model."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion.errors import FusionCompilerError
from fusion.ir.layout import COMBINED, Layout, Tile
from tiling.layouts.tiled_layout import (
    LayoutError,
    TiledLayout,
    byte_size,
    elements_per_word,
    parse_tiles,
    storage_bits,
    validate_layout,
    word_and_bit,
)


def brute_force_offsets(dims, layout):
    """Offsets by literally padding, reshaping and transposing an array of element numbers.

    Written from the seed's pad-reshape-transpose description, independently of
    ``tiling.layouts.tiled_layout``: each element holds its row-major logical number, padding holds -1, and
    the memory order of the final array tells where each element went.
    """
    n = math.prod(dims)
    a = np.arange(n, dtype=np.int64).reshape(dims)
    a = a.transpose(tuple(reversed(layout.minor_to_major)))
    for tile in layout.tiles:
        t = list(tile.dims)
        shape = list(a.shape)
        if len(t) > len(shape):
            shape = [1] * (len(t) - len(shape)) + shape
        major, minor = shape[: len(shape) - len(t)], shape[len(shape) - len(t) :]
        # '*': fold into the next minor dim, repeated for each star.
        while COMBINED in t:
            i = t.index(COMBINED)
            minor[i + 1] *= minor[i]
            del minor[i], t[i]
        a = a.reshape(major + minor)
        padded = [-(-d // s) * s for d, s in zip(minor, t)]
        out = np.full(major + padded, -1, dtype=np.int64)
        out[tuple(slice(0, d) for d in a.shape)] = a
        split = major + [x for d, s in zip(padded, t) for x in (d // s, s)]
        a = out.reshape(split)
        m = len(major)
        k = len(t)
        perm = list(range(m)) + [m + 2 * i for i in range(k)] + [m + 2 * i + 1 for i in range(k)]
        a = a.transpose(perm)
    memory = a.reshape(-1)
    offsets = np.empty(n, dtype=np.int64)
    real = memory >= 0
    offsets[memory[real]] = np.nonzero(real)[0]
    return offsets.reshape(dims), memory.size


# --- seed examples -------------------------------------------------------------------------


def test_seed_figure1_element_2_3_has_linear_index_17():
    f = TiledLayout.of((3, 5), parse_tiles("1,0", "(2,2)"))
    assert f.linear_index((2, 3)) == 17
    assert f.physical_index((2, 3)) == (1, 1, 0, 1)
    assert f.physical_shape == (2, 3, 2, 2)
    assert f.padded_elements == 24


def test_seed_figure2_4x8_under_2x4_then_2x1_matches_brute_force_every_element():
    layout = parse_tiles("1,0", "(2,4)(2,1)")
    f = TiledLayout.of((4, 8), layout)
    expected, size = brute_force_offsets((4, 8), layout)
    got = np.array([[f.linear_index((i, j)) for j in range(8)] for i in range(4)])
    np.testing.assert_array_equal(got, expected)
    assert size == f.padded_elements == 32
    # The bf16 packing property: a 2x1 tile pairs an even row with the odd row below it.
    assert got[0, 0] == 0 and got[1, 0] == 1 and got[0, 1] == 2
    np.testing.assert_array_equal(f.offsets_array(), expected)


def test_seed_combined_dims_equal_the_2d_tiling():
    combined = TiledLayout.of((2, 7, 8, 11, 10), parse_tiles("4,3,2,1,0", "(*,*,2,*,3)"))
    flat = TiledLayout.of((112, 110), parse_tiles("1,0", "(2,3)"))
    offsets = combined.offsets_array().reshape(112, 110)
    np.testing.assert_array_equal(offsets, flat.offsets_array())
    assert combined.physical_shape == flat.physical_shape == (56, 37, 2, 3)


def test_tile_with_more_dims_than_shape_pads_leading_ones():
    f = TiledLayout.of((3,), parse_tiles("0", "(8,128)"))
    assert f.physical_shape == (1, 1, 8, 128)
    assert [f.linear_index((i,)) for i in range(3)] == [0, 1, 2]
    scalar = TiledLayout.of((), parse_tiles("", "(128)"))
    assert scalar.physical_shape == (1, 128) and scalar.linear_index(()) == 0
    assert scalar.padded_elements == 128


def test_tile_with_fewer_dims_applies_to_minor_dims():
    f = TiledLayout.of((3, 4, 5), parse_tiles("2,1,0", "(2,2)"))
    assert f.physical_shape == (3, 2, 3, 2, 2)
    expected, _ = brute_force_offsets((3, 4, 5), parse_tiles("2,1,0", "(2,2)"))
    np.testing.assert_array_equal(f.offsets_array(), expected)


def test_minor_to_major_reorders_before_tiling():
    # {0,1}: dim 0 is minor, so the physical shape is (5, 3) before the (2,2) tiles.
    f = TiledLayout.of((3, 5), parse_tiles("0,1", "(2,2)"))
    assert f.physical_shape == (3, 2, 2, 2)
    assert f.linear_index((2, 3)) == f.linear_index((0, 0)) + (1 * 2 + 1) * 4 + 1 * 2 + 0


def test_second_tile_reaching_into_tile_count_dims():
    layout = parse_tiles("1,0", "(2,2)(3,1,1)")
    expected, size = brute_force_offsets((5, 6), layout)
    f = TiledLayout.of((5, 6), layout)
    np.testing.assert_array_equal(f.offsets_array(), expected)
    assert f.padded_elements == size


# --- inverse --------------------------------------------------------------------------------


def test_inverse_marks_padding_and_inverts_real_elements():
    f = TiledLayout.of((3, 5), parse_tiles("1,0", "(2,2)"))
    offsets = np.arange(f.padded_elements)
    index, valid = f.logical_index(offsets)
    assert int(valid.sum()) == 15
    real = f.offsets_array()
    for i in range(3):
        for j in range(5):
            assert f.logical_index(int(real[i, j])) == ((i, j), True)
    assert f.logical_index(2) == ((1, 0), True)
    # Column 5 of tile column 2 and row 3 of tile row 1 are padding (Figure 1).
    padding = [k for k in range(24) if f.logical_index(k)[1] is False]
    assert padding == [9, 11, 14, 15, 18, 19, 21, 22, 23]
    np.testing.assert_array_equal(np.nonzero(~valid)[0], padding)


# --- sizes ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dtype, dims, tiles, elements, nbytes, per",
    [
        ("f32", (3, 5), "(2,2)", 24, 96, 1),
        ("bf16", (37, 300), "(8,128)(2,1)", 40 * 384, 40 * 384 * 2, 2),
        ("s8", (37, 300), "(8,128)(4,1)", 40 * 384, 40 * 384, 4),
        ("pred", (37, 300), "(32,128)(32,1)", 64 * 384, 64 * 384 // 8, 32),
        ("pred", (3, 5), "", 15, 15, 1),
        ("f64", (3, 5), "(2,2)", 24, 192, 1),
    ],
)
def test_sizes(dtype, dims, tiles, elements, nbytes, per):
    layout = parse_tiles("1,0", tiles)
    assert TiledLayout.of(dims, layout).padded_elements == elements
    assert byte_size(dtype, dims, layout) == nbytes
    assert elements_per_word(dtype, layout) == per


def test_element_size_in_bits_packs_sub_byte_values():
    layout = Layout((0,), (), element_size_in_bits=4)
    assert storage_bits("s4", layout) == 4
    assert elements_per_word("s4", layout) == 8
    assert byte_size("s4", (9,), layout) == 8  # two 32-bit words
    assert byte_size("s4", (9,), Layout((0,))) == 9  # unpacked: a byte each


def test_word_and_bit():
    bf16 = parse_tiles("1,0", "(8,128)(2,1)")
    assert word_and_bit(0, "bf16", bf16) == (0, 0)
    assert word_and_bit(1, "bf16", bf16) == (0, 16)
    pred = parse_tiles("1,0", "(32,128)(32,1)")
    assert word_and_bit(37, "pred", pred) == (1, 5)
    assert word_and_bit(3, "f64", Layout((0,))) == (6, 0)


# --- validation -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dims, layout, message",
    [
        ((3, 5), Layout((1,)), "has 1 entries but the shape has rank 2"),
        ((3, 5), Layout((0, 0)), "not a permutation"),
        ((3, 5), Layout((2, 0)), "not a permutation"),
        ((3, 5), Layout((1, 0), (Tile((0, 2)),)), "tile dims must be positive"),
        ((3, 5), Layout((1, 0), (Tile((2, -3)),)), "tile dims must be positive"),
        ((3, 5), Layout((1, 0), (Tile((2, COMBINED)),)), "ends in '*'"),
        ((3, 5), Layout((1, 0), (Tile(()),)), "empty"),
    ],
)
def test_invalid_layouts_raise_layout_error(dims, layout, message):
    with pytest.raises(LayoutError, match=message) as info:
        validate_layout(dims, layout, where="p0")
    assert isinstance(info.value, FusionCompilerError)
    assert "p0" in str(info.value)
    with pytest.raises(LayoutError):
        TiledLayout.of(dims, layout)


# --- property: the formula agrees with brute force ------------------------------------------


@st.composite
def shapes_and_layouts(draw):
    rank = draw(st.integers(0, 4))
    dims = tuple(draw(st.lists(st.integers(1, 6), min_size=rank, max_size=rank)))
    m2m = tuple(draw(st.permutations(range(rank))))
    tiles = []
    for _ in range(draw(st.integers(0, 3))):
        k = draw(st.integers(1, rank + 2))
        t = draw(st.lists(st.integers(1, 4), min_size=k, max_size=k))
        for i in range(k - 1):
            if draw(st.booleans()) and draw(st.booleans()):
                t[i] = COMBINED
        tiles.append(Tile(tuple(t)))
    return dims, Layout(m2m, tuple(tiles))


@settings(max_examples=150, deadline=None)
@given(shapes_and_layouts())
def test_formula_matches_brute_force(case):
    dims, layout = case
    f = TiledLayout.of(dims, layout)
    expected, size = brute_force_offsets(dims, layout)
    assert f.padded_elements == size
    np.testing.assert_array_equal(f.offsets_array(), expected)
    # The inverse gives back every element and marks exactly the rest as padding.
    index, valid = f.logical_index(np.arange(size))
    valid = np.broadcast_to(valid, (size,))
    assert int(valid.sum()) == math.prod(dims)
    if dims:
        flat = np.ravel_multi_index(
            tuple(np.broadcast_to(i, (size,))[valid] for i in index), dims
        )
        np.testing.assert_array_equal(expected.reshape(-1)[flat], np.nonzero(valid)[0])
