"""The layout as an IndexingMap (composed pad/reshape/transpose) and its inverse, checked
against the brute-force pad-reshape-transpose model of test_layout."""
from __future__ import annotations

import itertools
import math

import numpy as np
from hypothesis import assume, given, settings

from tiling.maps.affine_expr import Constant, const, d
from tiling.maps.expr_variables import substitute
from tiling.maps.indexing_map import IndexingMap
from tiling.layouts.tiled_layout import (
    TiledLayout,
    inverse_layout_indexing_map,
    layout_indexing_map,
    parse_tiles,
)

from .test_layout import brute_force_offsets, shapes_and_layouts


def _at_point(m, index):
    """The results of ``m`` at ``index``, each shared subexpression computed once.

    The unsimplified map of a layout with several tile levels repeats its subexpressions (a
    DAG of a few thousand nodes that prints as millions of characters); ``evaluate`` walks
    it as a tree, seconds per point for the deepest layouts drawn here.  Substituting the
    point's coordinates (``substitute`` shares the work across the DAG) folds every result
    to a constant: the same values, in milliseconds.
    """
    memo: dict = {}
    values = [substitute(e, [const(i) for i in index], [], memo) for e in m.results]
    assert all(isinstance(v, Constant) for v in values), values
    return tuple(v.value for v in values)


def check_maps(dims, layout):
    expected, size = brute_force_offsets(dims, layout)
    forward = layout_indexing_map(dims, layout)
    raw = layout_indexing_map(dims, layout, simplify=False)
    assert forward.num_dims == len(dims) and forward.num_results == 1
    for index in itertools.product(*(range(n) for n in dims)):
        assert forward.evaluate(index) == (expected[index],)
        assert _at_point(raw, index) == (expected[index],)
    inverse = inverse_layout_indexing_map(dims, layout)
    owner = {int(expected[i]): i for i in itertools.product(*(range(n) for n in dims))}
    for offset in range(size):
        assert inverse.contains((offset,)) == (offset in owner), offset
        if offset in owner:
            assert inverse.evaluate((offset,)) == owner[offset]
    assert not inverse.contains((size,))


def test_seed_figure1_map():
    m = layout_indexing_map((3, 5), parse_tiles("1,0", "(2,2)"))
    assert m.evaluate((2, 3)) == (17,)
    assert m == IndexingMap.from_sizes(
        ((d(0) // 2) * 12 + (d(1) // 2) * 4 + (d(0) % 2) * 2 + d(1) % 2,), (3, 5)
    )
    check_maps((3, 5), parse_tiles("1,0", "(2,2)"))


def test_seed_figure2_and_combined_and_tpu_maps():
    check_maps((4, 8), parse_tiles("1,0", "(2,4)(2,1)"))
    check_maps((2, 3, 4, 5), parse_tiles("3,2,1,0", "(*,2,*,3)"))
    check_maps((3,), parse_tiles("0", "(8,128)"))
    check_maps((), parse_tiles("", "(128)"))
    check_maps((9, 130), parse_tiles("1,0", "(8,128)(2,1)"))


def test_combined_map_equals_flat_map_on_every_element():
    combined = layout_indexing_map((2, 7, 8, 11, 10), parse_tiles("4,3,2,1,0", "(*,*,2,*,3)"))
    flat = TiledLayout.of((112, 110), parse_tiles("1,0", "(2,3)")).offsets_array()
    grid = np.indices((2, 7, 8, 11, 10)).reshape(5, -1).T[::97]  # a spread-out sample
    for idx in grid:
        i, j = (idx[0] * 7 + idx[1]) * 8 + idx[2], idx[3] * 10 + idx[4]
        assert combined.evaluate(tuple(int(x) for x in idx)) == (flat[i, j],)


@settings(max_examples=40, deadline=None)
@given(shapes_and_layouts())
def test_maps_match_brute_force(case):
    dims, layout = case
    assume(TiledLayout.of(dims, layout).padded_elements <= 2000 and math.prod(dims) <= 300)
    check_maps(dims, layout)
