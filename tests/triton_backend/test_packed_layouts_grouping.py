"""``packed_access.word_grouping`` (which elements share a 32-bit word, proved on the layout's
indexing map) against brute force over every element's offset, and the tile alignment it
implies; plus the physical addressing of ``addressing.buffer_addressing``."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion.ir.layout import Layout, Tile
from fusion.ir.shape import ArrayShape
from tiling.maps.affine_expr import d
from tiling.layouts.tiled_layout import TiledLayout, elements_per_word, parse_tiles
from tiling.layouts.tpu_formats import tpu_layout
from triton_backend.lowering.emitter.addressing import buffer_addressing
from triton_backend.lowering.emitter.packed_access import (
    minimum_tile_sizes,
    word_aligned_tile_sizes,
    word_grouping,
)

DTYPE_OF_WORD = {2: "bf16", 4: "s8", 32: "pred"}
FIRST_TILES = [(8, 128), (2, 4), (4, 8), (3, 4), (32, 128), (4, 4), (6, 2), (1, 128), (16,), (8,)]


def brute_force_holds(dims, layout, dtype, grouping) -> bool:
    """Every element's word and slot as ``grouping`` says, from the enumerated offsets."""
    offsets = TiledLayout.of(dims, layout).offsets_array()
    per = elements_per_word(dtype, layout)
    if grouping.dim is None:
        return bool((offsets % per == grouping.slot).all())
    idx = np.indices(dims)
    if not (offsets % per == idx[grouping.dim] % per).all():
        return False
    base = list(idx)
    base[grouping.dim] = (idx[grouping.dim] // per) * per
    # The group's first index may be past the end (dims[D] not a multiple of per): use the
    # real elements only, each compared with the first element of its own group.
    first = TiledLayout.of(dims, layout).linear_index(tuple(base))
    return bool((offsets // per == first // per).all())


def shares_words_along_one_dim(dims, layout, dtype) -> bool:
    """Brute force: is there a dim D such that each word's elements differ only in
    ``index_D`` and lie in one aligned run of ``per``?"""
    offsets = TiledLayout.of(dims, layout).offsets_array().reshape(-1)
    per = elements_per_word(dtype, layout)
    idx = np.indices(dims).reshape(len(dims), -1)
    words = offsets // per
    order = np.argsort(words, kind="stable")
    w, ix = words[order], idx[:, order]
    same = w[1:] == w[:-1]
    if not same.any():
        return True
    for dim in range(len(dims)):
        others = [k for k in range(len(dims)) if k != dim]
        ok = all((ix[k][1:][same] == ix[k][:-1][same]).all() for k in others)
        if ok and (ix[dim][1:][same] // per == ix[dim][:-1][same] // per).all() and \
                (offsets % per == idx[dim] % per).all():
            return True
    return False


@st.composite
def packed_layouts(draw):
    rank = draw(st.integers(1, 3))
    dims = tuple(draw(st.lists(st.integers(1, 40), min_size=rank, max_size=rank)))
    order = tuple(draw(st.permutations(range(rank))))
    per = draw(st.sampled_from([2, 4, 32]))
    first = draw(st.sampled_from(FIRST_TILES))
    return dims, Layout(order, (Tile(first), Tile((per, 1)))), DTYPE_OF_WORD[per]


@settings(max_examples=60, deadline=None)
@given(packed_layouts())
def test_word_grouping_is_sound_and_complete_against_brute_force(case):
    dims, layout, dtype = case
    grouping = word_grouping(dims, layout, dtype)
    if grouping is not None:
        assert brute_force_holds(dims, layout, dtype, grouping)
    else:
        assert not shares_words_along_one_dim(dims, layout, dtype)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 70), min_size=2, max_size=3), st.sampled_from(["bf16", "s8", "pred"]))
def test_every_tpu_format_of_rank_two_or_more_is_storable(dims, dtype):
    shape = ArrayShape(dtype, tuple(dims))
    layout = tpu_layout(shape)
    grouping = word_grouping(shape.dims, layout, dtype)
    assert grouping is not None
    per = elements_per_word(dtype, layout)
    need = minimum_tile_sizes((shape.with_layout(layout),))
    assert need == tuple(per if k == grouping.dim else 1 for k in range(len(dims)))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from([1, 2, 3, 4, 8, 16, 32, 64, 128, 256, 300]), min_size=2, max_size=2))
def test_aligned_tiles_hold_whole_words_and_keep_a_budget(tiles):
    out = ArrayShape("pred", (40, 130), parse_tiles("1,0", "(32,128)(32,1)"))
    aligned = word_aligned_tile_sizes(tuple(tiles), (out,))
    assert aligned[0] % 32 == 0 and aligned[1] >= 1
    if tiles[0] % 32 == 0:
        assert aligned == tuple(tiles)
    else:
        padded = 1
        for t in tiles:
            padded *= 1 << max(0, (t - 1).bit_length())
        assert (1 << (aligned[0] - 1).bit_length()) * (1 << (aligned[1] - 1).bit_length()) <= max(padded, 32)


def test_physical_offsets_match_the_layout_elementwise():
    shape = ArrayShape("s8", (13, 260), parse_tiles("0,1", "(8,128)(4,1)"))
    a = buffer_addressing(shape, "p0")
    expr = a.element_offset((d(0), d(1)))
    offsets = TiledLayout.of(shape.dims, shape.layout).offsets_array()
    got = np.array([[expr.evaluate((i, j)) for j in range(260)] for i in range(13)])
    np.testing.assert_array_equal(got, offsets)
    assert a.is_packed and a.buffer_entries == TiledLayout.of(shape.dims, shape.layout).padded_elements // 4
