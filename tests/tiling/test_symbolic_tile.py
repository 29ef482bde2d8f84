"""Symbolic tiles of single indexing maps, checked by brute-force enumeration.

For every block of a tiling whose constraints hold, the set of operand elements the block's
output elements read (enumerated through the map) must equal the tile's strided box
``{offset + k * stride}`` cut to the operand's bounds; blocks at the ragged edge of the output
may read a superset (masked).
"""
from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings, strategies as st

from tiling.maps.affine_expr import d, s
from tiling.maps.indexing_map import IndexingMap, enumerate_points
from tiling.symbolic.symbolic_tile import NotTileable, SymbolicTile, symbolic_tile


def needed_elements(m: IndexingMap, origin, sizes, out_dims):
    """Operand elements read by the output block at ``origin`` (brute force)."""
    box = [(o, min(o + t, n) - 1) for o, t, n in zip(origin, sizes, out_dims)]
    bounds = [b.intersect(type(b)(lo, hi)) for b, (lo, hi) in zip(m.dim_bounds, box)]
    if any(b.is_empty for b in bounds):
        return set()
    sub = m.replace(dim_bounds=tuple(bounds))
    return {m.evaluate(p, q) for p, q in enumerate_points(sub)}


def tile_elements(tile, origin_block, tile_sizes, operand_dims, out_dims):
    concrete = tile.instantiate(tile_sizes, out_dims)
    offsets = concrete.offsets_map.evaluate(origin_block, (0,) * concrete.offsets_map.num_symbols)
    axes = []
    for off, size, stride, n in zip(offsets, concrete.sizes, concrete.strides, operand_dims):
        axes.append([off + k * stride for k in range(size) if 0 <= off + k * stride < n])
    return set(itertools.product(*axes))


def check_exact(m, operand_dims, tile_sizes):
    out_dims = tuple(b.upper + 1 for b in m.dim_bounds)
    tile = symbolic_tile(m, operand_dims)
    assert isinstance(tile, SymbolicTile), tile
    if not tile.is_satisfied(tile_sizes):
        return False
    grid = [range(-(-n // t)) for n, t in zip(out_dims, tile_sizes)]
    for block in itertools.product(*grid):
        origin = [b * t for b, t in zip(block, tile_sizes)]
        need = needed_elements(m, origin, tile_sizes, out_dims)
        have = tile_elements(tile, block, tile_sizes, operand_dims, out_dims)
        ragged = any(o + t > n for o, t, n in zip(origin, tile_sizes, out_dims))
        if ragged:
            assert need <= have, (block, need - have)
        else:
            assert need == have, (block, sorted(need ^ have)[:5])
        # The element map lists the same elements.
    return True


MAPS = {
    # name: (map, operand dims)
    "identity": (IndexingMap.identity((6, 8)), (6, 8)),
    "transpose": (IndexingMap.from_sizes((d(1), d(0)), (8, 6)), (6, 8)),
    "reverse": (IndexingMap.from_sizes((d(0), 7 - d(1)), (6, 8)), (6, 8)),
    "slice": (IndexingMap.from_sizes((d(0) * 2 + 1, d(1) + 3), (3, 5)), (8, 9)),
    "broadcast": (IndexingMap.from_sizes((d(1),), (6, 8)), (8,)),
    "collapse": (IndexingMap.from_sizes((d(0) // 8, d(0) % 8), (32,)), (4, 8)),
    "collapse3": (IndexingMap.from_sizes((d(0) // 12, (d(0) // 4) % 3, d(0) % 4), (24,)),
                  (2, 3, 4)),
    "expand": (IndexingMap.from_sizes((d(0) * 8 + d(1),), (4, 8)), (32,)),
    "expand3": (IndexingMap.from_sizes((d(0) * 12 + d(1) * 4 + d(2),), (2, 3, 4)), (24,)),
    "reshape_4x6_to_6x4": (
        IndexingMap.from_sizes(((d(0) * 4 + d(1)) // 6, (d(0) * 4 + d(1)) % 6), (6, 4)), (4, 6)),
    "reduce": (IndexingMap.from_sizes((d(0), s(0)), (6,), (8,)), (6, 8)),
    "pad": (IndexingMap.create((d(0) - 2,), [(2, 7)]), (6,)),
    "concat_operand1": (IndexingMap.create((d(0) - 4, d(1)), [(4, 9), (0, 3)]), (6, 4)),
    # Point-range variables, as the simplifier leaves them (a reshape adding unit dims).
    "reshape_add_unit": (IndexingMap.create((d(0) + d(1),), [(0, 3), (0, 0)]), (4,)),
    "reshape_add_middle_unit": (
        IndexingMap.create((d(0) * 8 + d(1) * 8 + d(2),), [(0, 1), (0, 0), (0, 7)]), (16,)),
    "reshape_remove_unit": (IndexingMap.create((d(0), d(0) * 0), [(0, 3)]), (4, 1)),
    "reduce_unit_range": (IndexingMap.create((d(0) + s(0),), [(0, 3)], [(0, 0)]), (4,)),
    "reduce_point_range_offset": (
        IndexingMap.create((d(0), s(0) + s(1)), [(0, 3)], [(2, 2), (0, 5)]), (4, 8)),
    "pad_to_one_element": (IndexingMap.create((d(0) - 2,), [(2, 2)]), (1,)),
}
OUT_DIMS = {"pad": (10,), "concat_operand1": (10, 4), "pad_to_one_element": (5,)}


def _sizes(n):
    return sorted({1, 2, 3, 4, 8, 16, n} | {k for k in range(1, n + 1) if n % k == 0})


@pytest.mark.parametrize("name", sorted(MAPS))
def test_every_tiling_is_exact_when_constraints_hold(name):
    m, operand_dims = MAPS[name]
    out_dims = OUT_DIMS.get(name, tuple(b.upper + 1 for b in m.dim_bounds))
    full = IndexingMap(m.affine_map, m.dim_bounds, m.range_bounds, m.rt_vars, m.constraints)
    tile = symbolic_tile(full, operand_dims, out_dims)
    assert isinstance(tile, SymbolicTile), tile
    accepted = 0
    for sizes in itertools.product(*[_sizes(n) for n in out_dims]):
        if not tile.is_satisfied(sizes):
            continue
        accepted += 1
        grid = [range(-(-n // t)) for n, t in zip(out_dims, sizes)]
        for block in itertools.product(*grid):
            origin = [b * t for b, t in zip(block, sizes)]
            need = needed_elements(m, origin, sizes, out_dims)
            have = tile_elements(tile, block, sizes, operand_dims, out_dims)
            ragged = any(o + t > n for o, t, n in zip(origin, sizes, out_dims))
            if ragged:
                assert need <= have, (sizes, block)
            else:
                assert need == have, (sizes, block, sorted(need ^ have)[:4])
    assert accepted > 0


def test_reshape_constraint_is_xla_divide_or_multiple():
    tile = symbolic_tile(MAPS["collapse"][0])
    assert str(tile.constraints) == "8 mod ts0 == 0 || ts0 mod 8 == 0"
    assert [tile.is_satisfied((t,)) for t in (1, 4, 8, 16, 32, 12, 6)] == [
        True, True, True, True, True, False, False]


def test_expand_needs_minor_dims_whole_or_major_dims_unit():
    tile = symbolic_tile(MAPS["expand"][0])
    assert tile.is_satisfied((1, 4)) and tile.is_satisfied((2, 8)) and tile.is_satisfied((4, 8))
    assert not tile.is_satisfied((2, 4))
    c = tile.instantiate((2, 8))
    assert c.sizes == (16,) and c.strides == (1,)
    assert str(c.offsets_map) == "(d0, d1) -> (d0 * 16 + d1 * 8), domain: d0 in [0, 1], d1 in [0, 0]"


def test_reverse_has_negative_stride():
    c = symbolic_tile(MAPS["reverse"][0]).instantiate((1, 4))
    assert c.strides == (1, -1) and c.sizes == (1, 4)
    assert str(c.offsets_map) == (
        "(d0, d1) -> (d0, d1 * -4 + 7), domain: d0 in [0, 5], d1 in [0, 1]")


def test_reduce_range_variable_whole_or_chunked():
    tile = symbolic_tile(MAPS["reduce"][0])
    whole = tile.instantiate((2,))
    assert whole.sizes == (2, 8)
    chunked = tile.instantiate((2,), range_chunks=(4,))
    assert chunked.sizes == (2, 4)
    assert str(chunked.offsets_map) == (
        "(d0)[s0] -> (d0 * 2, s0 * 4), domain: d0 in [0, 2], s0 in [0, 1]")


def test_runtime_offsets_stay_runtime_variables():
    from tiling.maps.indexing_map import RTVar
    from tiling.maps.interval import Interval
    m = IndexingMap.create((d(0) + s(0), d(1)), [(0, 3), (0, 7)], [],
                           [RTVar(Interval(0, 6), "offset0")])
    c = symbolic_tile(m).instantiate((2, 8))
    assert c.sizes == (2, 8)
    assert str(c.offsets_map).startswith("(d0, d1){rt0} -> (d0 * 2 + rt0, d1 * 8)")


@pytest.mark.parametrize("m, fragment", [
    (IndexingMap.from_sizes((d(0), d(0)), (4,)), "depend on the same dims"),
    (IndexingMap.from_sizes((d(0) * 2 + d(1),), (4, 3)), "do not nest"),
    (IndexingMap.from_sizes((d(0) - d(1) + 3,), (4, 4)), "both signs"),
    (IndexingMap.create((d(0) // 2,), [(0, 9)], constraints={d(0) % 2: (0, 0)}),
     "not a hyper-rectangle"),
    (IndexingMap.undefined(), "undefined"),
])
def test_not_tileable_with_reason(m, fragment):
    result = symbolic_tile(m)
    assert isinstance(result, NotTileable)
    assert fragment in result.reason


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.integers(1, 4), st.integers(1, 4), st.data())
def test_random_reshape_chain_tiles_exactly(a, b, c, data):
    """Collapse [a,b,c] (output [a*b*c]) and general reshapes to [a*b, c]; any tile sizes."""
    n = a * b * c
    collapse = IndexingMap.from_sizes((d(0) // (b * c), (d(0) // c) % b, d(0) % c), (n,))
    general = IndexingMap.from_sizes(
        ((d(0) * c + d(1)) // (b * c), ((d(0) * c + d(1)) // c) % b, d(1)), (a * b, c))
    for m, dims in ((collapse, (n,)), (general, (a * b, c))):
        sizes = tuple(data.draw(st.integers(1, k)) for k in dims)
        tile = symbolic_tile(m)
        if isinstance(tile, NotTileable):
            continue
        check_exact(m, (a, b, c), sizes)


def test_point_range_dim_is_replaced_by_its_value():
    # reshape f32[4] -> f32[4,1]: d1 only takes 0, so the block reads ts0 elements at o0
    # (the strides of d0 and d1 need not nest).
    tile = symbolic_tile(IndexingMap.create((d(0) + d(1),), [(0, 3), (0, 0)]), (4,))
    assert isinstance(tile, SymbolicTile), tile
    assert str(tile).splitlines()[:3] == ["offsets: (o0)", "sizes: (ts0)", "strides: (1)"]
    assert tile.constraints.is_always_true
    assert check_exact(tile.source, (4,), (2, 1))


def test_point_dim_narrowing_a_longer_output_dim_stays_a_mask():
    # d1 in [0, 0] of an output dim of 3 selects one column: not the same as d1 -> 0.
    m = IndexingMap.create((d(0) + d(1),), [(0, 3), (0, 0)])
    assert isinstance(symbolic_tile(m, (4,), (4, 3)), NotTileable)
