"""Output -> operand maps of gathers with batching dims against the evaluator (see
indexing_oracle.py): every output element is the operand element its map points at, the
operand batching dim read at the output batch dim of its partner indices dim."""
from __future__ import annotations

import numpy as np
import pytest

from fusion.text.parser import parse_hlo
from tests.tiling.indexing_oracle import check_copy, iota_input
from tiling import output_to_input_indexing
from tiling.maps.affine_expr import d


def _module(operand, indices, root):
    return parse_hlo("HloModule m\nENTRY e {\n"
                     f"  x0 = s32[{','.join(map(str, operand))}] parameter(0)\n"
                     f"  x1 = s32[{','.join(map(str, indices))}] parameter(1)\n"
                     f"  ROOT r = {root}\n}}\n")


CASES = {
    # jnp.take_along_axis(x, idx, axis=1) with x [2,5], idx [2,3]
    "take_along_axis": ((2, 5), np.array([[[4], [0], [2]], [[1], [1], [3]]], np.int32),
                        "s32[2,3] gather(x0, x1), offset_dims={}, collapsed_slice_dims={1}, "
                        "start_index_map={1}, operand_batching_dims={0}, "
                        "start_indices_batching_dims={0}, index_vector_dim=2, slice_sizes={1,1}"),
    # operand batching dim in the middle, window dims around it, clamped starts
    "middle_batch": ((4, 3, 6), np.array([[[0], [5]], [[3], [-2]], [[4], [1]]], np.int32),
                     "s32[3,2,4,2] gather(x0, x1), offset_dims={2,3}, collapsed_slice_dims={}, "
                     "start_index_map={2}, operand_batching_dims={1}, "
                     "start_indices_batching_dims={0}, index_vector_dim=2, slice_sizes={4,1,2}"),
    # two batching dims, paired crosswise, index vector dim first
    "two_batch_dims": ((3, 2, 5), np.array([[[1, 4, 0], [2, 3, 9]]], np.int32),
                       "s32[2,3] gather(x0, x1), offset_dims={}, collapsed_slice_dims={2}, "
                       "start_index_map={2}, operand_batching_dims={0,1}, "
                       "start_indices_batching_dims={2,1}, index_vector_dim=0, "
                       "slice_sizes={1,1,1}"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_batched_gather_map_points_at_the_gathered_element(name):
    operand, indices, root = CASES[name]
    m = _module(operand, indices.shape, root)
    operand_maps, _ = output_to_input_indexing(m.entry.root, m)
    check_copy(m, [list(operand_maps), []], [iota_input(operand), indices], (0,))


def test_the_batching_dim_is_the_partner_output_dim():
    operand, indices, root = CASES["middle_batch"]
    m = _module(operand, indices.shape, root)
    (operand_map,), _ = output_to_input_indexing(m.entry.root, m)
    # operand dim 1 (batching) is read at output dim 0, the batch dim of indices dim 0
    assert operand_map.affine_map.results[1] == d(0)
    assert operand_map.num_rt_vars == 1
