"""Indexing parity with XLA's analysis (issue 15), each map checked by brute force against the
reference evaluator: every output element is the operand element the map points at.

* zero-size shapes give ``KNOWN EMPTY`` maps;
* an op without an indexing rule (``triangular-solve``) gives undefined maps, not an error;
* runtime variables read from a constant or an iota are replaced by their values;
* a ``bitcast`` whose layouts make it a transpose gets the transpose's map.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from fusion.evaluator import evaluate
from fusion.evaluator.npz_io import output_arrays
from fusion.text.parser import parse_hlo
from tiling.indexing_analysis import input_to_output_indexing, output_to_input_indexing


def _module(body: str):
    return parse_hlo("HloModule m\nENTRY e {\n" + body + "\n}")


def _the_map(module, operand: int = 0):
    (m,) = output_to_input_indexing(module.entry.root, module)[operand]
    return m


def _check_by_brute_force(module, m, *arrays):
    """Every output element equals operand 0 at the map's (single) point."""
    (out,) = output_arrays(evaluate(module, *arrays))
    assert not m.rt_vars and m.num_range_vars == 0
    for idx in itertools.product(*(range(n) for n in out.shape)):
        assert out[idx] == arrays[0][m.evaluate(idx)], (idx, str(m))


@pytest.mark.parametrize("body", [
    "  p = f32[0,4] parameter(0)\n  ROOT n = f32[0,4] negate(p)",
    "  p = f32[3,0] parameter(0)\n  ROOT t = f32[0,3] transpose(p), dimensions={1,0}",
    "  p = f32[4] parameter(0)\n  ROOT s = f32[0] slice(p), slice={[2:2]}",
])
def test_zero_size_shapes_give_known_empty_maps(body):
    module = _module(body)
    (maps,) = output_to_input_indexing(module.entry.root, module)
    assert [str(m) for m in maps] == ["KNOWN EMPTY"]
    assert [str(m) for m in input_to_output_indexing(module.entry.root, 0, module)] == ["KNOWN EMPTY"]


def test_an_op_without_a_rule_has_undefined_maps():
    module = _module("  a = f32[4,4] parameter(0)\n  b = f32[4,3] parameter(1)\n"
                     "  ROOT t = f32[4,3] triangular-solve(a, b), left_side=true, lower=true, "
                     "transpose_a=NO_TRANSPOSE, unit_diagonal=false")
    maps = output_to_input_indexing(module.entry.root, module)
    assert [[str(m) for m in s] for s in maps] == [["UNDEFINED"], ["UNDEFINED"]]
    assert [str(m) for m in input_to_output_indexing(module.entry.root, 1, module)] == ["UNDEFINED"]


@pytest.mark.parametrize("start,expected", [(2, "d0 + 2"), (9, "d0 + 6"), (-3, "d0")])
def test_a_constant_dynamic_slice_offset_is_replaced_by_its_clamped_value(start, expected):
    module = _module("  p = f32[8,4] parameter(0)\n"
                     f"  c = s32[] constant({start})\n  z = s32[] constant(0)\n"
                     "  ROOT d = f32[2,4] dynamic-slice(p, c, z), dynamic_slice_sizes={2,4}")
    m = _the_map(module)
    assert str(m) == f"(d0, d1) -> ({expected}, d1), domain: d0 in [0, 1], d1 in [0, 3]"
    _check_by_brute_force(module, m, np.arange(32, dtype=np.float32).reshape(8, 4))


def test_an_iota_gather_index_is_replaced_by_the_read_position():
    module = _module("  p = f32[8,4] parameter(0)\n  i = s32[3] iota(), iota_dimension=0\n"
                     "  ROOT g = f32[3,4] gather(p, i), offset_dims={1}, collapsed_slice_dims={0},"
                     " start_index_map={0}, index_vector_dim=1, slice_sizes={1,4}")
    m = _the_map(module)
    assert str(m) == "(d0, d1) -> (d0, d1), domain: d0 in [0, 2], d1 in [0, 3]"
    _check_by_brute_force(module, m, np.arange(32, dtype=np.float32).reshape(8, 4))


def test_an_iota_beyond_the_feasible_starts_stays_a_runtime_variable():
    # Starts 0..8 for 8 rows: XLA clamps the last one, so the read row is not the iota value.
    module = _module("  p = f32[8,4] parameter(0)\n  i = s32[9] iota(), iota_dimension=0\n"
                     "  ROOT g = f32[9,4] gather(p, i), offset_dims={1}, collapsed_slice_dims={0},"
                     " start_index_map={0}, index_vector_dim=1, slice_sizes={1,4}")
    assert len(_the_map(module).rt_vars) == 1


@pytest.mark.parametrize("source,target,expected", [
    ("f32[3,4]{1,0}", "f32[4,3]{0,1}", "(d1, d0)"),
    ("f32[2,3,4]{2,1,0}", "f32[4,2,3]{0,2,1}", "(d1, d2, d0)"),
    ("f32[2,3,4]{2,1,0}", "f32[3,4,2]{1,0,2}", "(d2, d0, d1)"),
])
def test_a_bitcast_that_is_a_transpose_gets_the_transpose_map(source, target, expected):
    module = _module(f"  p = {source} parameter(0)\n  ROOT b = {target} bitcast(p)")
    m = _the_map(module)
    assert str(m).split(" -> ")[1].startswith(expected)
    dims = tuple(int(n) for n in source.split("[")[1].split("]")[0].split(","))
    _check_by_brute_force(module, m, np.arange(np.prod(dims), dtype=np.float32).reshape(dims))
