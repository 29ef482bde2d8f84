"""IREE nested layouts: the seed's examples and brute-force coverage of the distribution."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion.errors import FusionCompilerError
from tiling.layouts.nested_layout import NestedLayout, NestedLayoutError

SEED_64X64 = NestedLayout(
    subgroup_tile=(2, 1), batch_tile=(2, 4), outer_tile=(1, 1), thread_tile=(16, 4),
    element_tile=(1, 4), subgroup_strides=(1, 0), thread_strides=(1, 16),
)


def subgroups_only(tile, strides):
    ones = (1,) * len(tile)
    return NestedLayout(tile, ones, ones, ones, ones, strides, (0,) * len(tile))


def test_seed_subgroup_order_and_wrap():
    v = subgroups_only((4, 2), (1, 4))
    assert v.subgroup_order() == (0, 4, 1, 5, 2, 6, 3, 7)
    assert v.subgroup_order(hardware_subgroups=4) == (0, 0, 1, 1, 2, 2, 3, 3)
    # The virtual ids, in the seed's order [0][0], [0][1], [1][0], ...
    assert [v.virtual_subgroup_ids(i) for i in (0, 4, 1, 5)] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    with pytest.raises(NestedLayoutError, match="not a multiple"):
        v.subgroup_order(hardware_subgroups=3)


def test_seed_outer_tile_duplicates_the_thread_layout():
    # outer_tile=[2,1], thread_tile=[2,5]: the 2x5 thread layout twice gives a 4x5 layout.
    v = NestedLayout((1, 1), (1, 1), (2, 1), (2, 5), (1, 1), (0, 0), (5, 1))
    assert v.vector_shape == (4, 5)
    owner = np.full((4, 5), -1)
    for t in range(10):
        for outer in range(2):
            (r, c) = v.vector_index(0, t, (0, 0), (outer, 0), (0, 0))
            owner[r, c] = t
    expected_tile = np.arange(10).reshape(2, 5)  # [0 1 2 3 4] / [5 6 7 8 9]
    np.testing.assert_array_equal(owner, np.concatenate([expected_tile, expected_tile]))


def test_seed_vector_64x64_leaves_each_thread_a_2x16_vector():
    v = SEED_64X64
    assert v.vector_shape == (64, 64)
    assert v.distributed_shape == (2, 16)
    v.check_vector_shape((64, 64))
    # Subgroups 0 and 2 get slice [0], 1 and 3 get slice [1] (stride 1 on a tile of 2).
    assert [v.virtual_subgroup_ids(i) for i in range(4)] == [(0, 0), (1, 0), (0, 0), (1, 0)]
    # thread0 takes [.., 0, 0, ..], thread1 [.., 1, 0, ..], thread16 [.., 0, 1, ..].
    assert v.virtual_thread_ids(0) == (0, 0)
    assert v.virtual_thread_ids(1) == (1, 0)
    assert v.virtual_thread_ids(16) == (0, 1)
    held = v.distributed_values(1, 16)
    assert held.shape == (2, 16, 2)
    # Independent: slice the conceptual vector<[2x1]x[2x4]x[1x1]x[16x4]x[1x4]> directly.
    conceptual = np.indices((64, 64)).transpose(1, 2, 0).reshape(2, 2, 1, 16, 1, 1, 4, 1, 4, 4, 2)
    # dims per original dim: (sg, batch, outer, thread, element) for rows, then columns.
    rows = conceptual  # axes: r_sg, r_b, r_o, r_t, r_e, c_sg, c_b, c_o, c_t, c_e, xy
    rows = rows.transpose(0, 5, 1, 6, 2, 7, 3, 8, 4, 9, 10)  # sg, b, o, t, e by (row, col)
    mine = rows[1, 0, :, :, :, :, 0, 1, :, :]  # subgroup [1][0], thread [0][1]
    expected = mine.transpose(0, 2, 4, 1, 3, 5, 6).reshape(2, 16, 2)
    np.testing.assert_array_equal(held, expected)


def test_inverse_ids():
    v = SEED_64X64
    for t in range(64):
        assert v.thread_id(v.virtual_thread_ids(t)) == t
    for sg in range(2):
        assert v.subgroup_id(v.virtual_subgroup_ids(sg)) == sg


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(subgroup_tile=(1, 1, 1)), "different ranks"),
        (dict(batch_tile=(0, 4)), "batch_tile\\[0\\] is 0"),
        (dict(thread_strides=(-1, 16)), "strides must be >= 0"),
        (dict(subgroup_strides=(0, 0)), "subgroup_strides\\[0\\] is 0"),
    ],
)
def test_validation_errors(kwargs, message):
    fields = dict(SEED_64X64.__dict__)
    fields.update(kwargs)
    with pytest.raises(NestedLayoutError, match=message) as info:
        NestedLayout(**fields)
    assert isinstance(info.value, FusionCompilerError)


def test_vector_shape_mismatch():
    with pytest.raises(NestedLayoutError, match="vector<64x64> but the vector is vector<64x32>"):
        SEED_64X64.check_vector_shape((64, 32))


def test_indexing_map_form_matches_vector_index():
    v = NestedLayout((2, 2), (2, 1), (1, 2), (2, 2), (1, 2), (2, 1), (1, 2))
    r = v.rank
    local_sizes = v.batch_tile + v.outer_tile + v.element_tile
    for m in (v.indexing_map(), v.indexing_map(simplify=False)):
        assert m.num_dims == 2 and m.num_symbols == 3 * r
        assert [b.upper + 1 for b in m.dim_bounds] == [4, 4]
        for sg, t in itertools.product(range(v.num_subgroups), range(v.num_threads)):
            for local in itertools.product(*(range(n) for n in local_sizes)):
                got = m.evaluate((sg, t), local)
                assert got == v.vector_index(sg, t, local[:r], local[r:2 * r], local[2 * r:])


def test_indexing_map_of_seed_example_is_a_bijection_onto_the_vector():
    v = NestedLayout((2, 1), (2, 2), (1, 1), (4, 2), (1, 2), (1, 0), (1, 4))
    m = v.indexing_map()
    seen = set()
    for sg, t in itertools.product(range(2), range(8)):
        for local in itertools.product(*(range(n) for n in (2, 2, 1, 1, 1, 2))):
            seen.add(m.evaluate((sg, t), local))
    assert seen == set(itertools.product(range(16), range(8)))


@st.composite
def bijective_layouts(draw):
    """Layouts whose strides make (subgroup, thread) -> virtual ids one to one: the strides
    are a mixed radix over the distributed dims in a random order (stride 0 for tile 1)."""
    rank = draw(st.integers(1, 3))
    tile = lambda: tuple(draw(st.lists(st.integers(1, 3), min_size=rank, max_size=rank)))  # noqa: E731
    sg, batch, outer, thread, element = tile(), tile(), tile(), tile(), tile()

    def strides(tiles):
        order = draw(st.permutations(range(rank)))
        out, radix = [0] * rank, 1
        for i in order:
            if tiles[i] > 1:
                out[i], radix = radix, radix * tiles[i]
        return tuple(out)

    return NestedLayout(sg, batch, outer, thread, element, strides(sg), strides(thread))


@settings(max_examples=60, deadline=None)
@given(bijective_layouts(), st.integers(1, 3))
def test_distribution_covers_every_element_once_per_owner(v, replicas):
    count = np.zeros(v.vector_shape, dtype=np.int64)
    hardware = v.num_subgroups * replicas  # extra subgroups wrap onto the same slices
    for sg in range(hardware):
        for t in range(v.num_threads):
            held = v.thread_values(sg, t).reshape(-1, v.rank)
            assert held.shape[0] == math.prod(v.distributed_shape)
            np.add.at(count, tuple(held.T), 1)
    assert (count == replicas).all()
