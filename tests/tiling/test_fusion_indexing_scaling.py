"""The generated chains of bench/indexing_scaling.py: a diamond chain of 400 ops (2**200
paths from the root to the parameter) finishes and yields the one map, so shared producers
are analysed once; no timing is asserted."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "indexing_scaling", Path(__file__).parents[2] / "bench" / "indexing_scaling.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


@pytest.mark.parametrize("kind", sorted(bench.GENERATORS))
def test_chains_give_one_map(kind):
    _, count = bench.time_analysis(kind, 400 if kind == "diamond" else 50)
    assert count == 1


def test_reshape_chain_cancels_to_identity():
    from tiling.indexing_analysis.fusion_indexing import output_to_input_indexing_of_computation

    module = bench.build("reshape", 20)
    (m,) = output_to_input_indexing_of_computation(module.computation("f"), module)["v0"]
    assert str(m) == "(d0, d1) -> (d0, d1), domain: d0 in [0, 63], d1 in [0, 31]"
