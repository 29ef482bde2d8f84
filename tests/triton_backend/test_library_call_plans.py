"""A fusion run as a library call (a sort longer than one tile, a plain dot) in the
compiled-module cache: its plan records the call (``module_plan.LibraryPlan``), a warm compile
makes it again without analysing the comparator, tiling or generating code, and the results
are the cold compile's, bit for bit, and the evaluator's.  conftest gives each test an empty
cache.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from fusion.evaluator import evaluate
from fusion.evaluator.npz_io import random_inputs
from fusion.text.parser import parse_hlo
from tests.triton_backend.test_module_cache import _count_compiles, _forbid_compiling
from triton_backend.driver.module_compiler import compile_hlo
from triton_backend.host.input_validation import tensor_from_numpy, tensor_to_numpy
from triton_backend.reports.launch_stubs import stub_launches
from triton_backend.runtime import module_cache, module_plan
from triton_backend.runtime.cache_files import render_entry
from triton_backend.templates.sort import driver as sort_driver
from triton_backend.templates.sort.library_call import LibrarySort

#: A descending argsort of rows longer than one tile (XLA's TOTALORDER), beside a kernel.
LONG_SORT = """HloModule m
gt {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  ROOT r = pred[] compare(a, b), direction=GT, type=TOTALORDER
}
ENTRY e {
  x = f32[2,5000] parameter(0)
  e = f32[2,5000] negate(x)
  i = s32[2,5000] iota(), iota_dimension=1
  ROOT s = (f32[2,5000], s32[2,5000]) sort(e, i), dimensions={1}, to_apply=gt
}"""


def _inputs(text: str):
    module = parse_hlo(text)
    arrays = random_inputs(module, seed=7)
    arrays[0][0, :5] = np.nan  # NaNs sort first in a descending total order
    return arrays, [tensor_from_numpy(a, p.shape.dtype)
                    for a, p in zip(arrays, module.entry.parameters)]


def _run(compiled, text: str) -> list[np.ndarray]:
    return [tensor_to_numpy(t) for t in compiled(*_inputs(text)[1])]


def _library_sorts(compiled) -> list[LibrarySort]:
    return [f for f in compiled.fusions.values() if isinstance(f, LibrarySort)]


def _no_comparator_analysis(monkeypatch) -> None:
    def forbidden(*args, **kwargs):
        raise AssertionError("a warm compile analysed the comparator again")

    monkeypatch.setattr(sort_driver, "comparator_order", forbidden)


def test_a_long_sort_comes_back_from_its_plan_without_analysis_or_codegen(monkeypatch):
    cold = compile_hlo(LONG_SORT)
    [call] = _library_sorts(cold)
    assert call.order.descending and call.order.float_order == "total"
    expected = _run(cold, LONG_SORT)
    for got, want in zip(expected, evaluate(parse_hlo(LONG_SORT), *_inputs(LONG_SORT)[0])):
        np.testing.assert_array_equal(got, want)
    _forbid_compiling(monkeypatch)
    _no_comparator_analysis(monkeypatch)
    module_cache.forget_remembered()
    warm = compile_hlo(LONG_SORT)
    assert warm is not cold and list(warm.fusions) == list(cold.fusions)
    assert _library_sorts(warm) == [call]
    for got, want in zip(_run(warm, LONG_SORT), expected):
        np.testing.assert_array_equal(got, want)


def _rewrite_library_entry(change) -> None:
    """Apply ``change`` to the plan's library-call entry, the plan's header made to match
    (what a damaged or foreign writer could leave)."""
    [path] = sorted(module_cache.default_cache_dir().glob("*/*.json"))
    data = json.loads(path.read_text().partition("\n")[2])
    [entry] = [f for f in data["plan"]["fusions"] if "library_reason" in f]
    change(entry)
    path.write_text(render_entry(json.dumps(data)))


@pytest.mark.parametrize("change", [
    lambda e: e["decisions"].update(float_order="lexical"),
    lambda e: e["decisions"].update(colour="red"),
    lambda e: e["decisions"].update(descending=[True]),
    lambda e: e.update(decisions="descending"),
    lambda e: e.update(library_reason="rows of 3 elements"),
    lambda e: e.update(kind="dot"),
], ids=["unknown-order", "unknown-decision", "not-a-scalar", "not-an-object", "other-reason",
        "other-kind"])
def test_a_library_entry_that_does_not_fit_its_fusion_compiles_again(change, monkeypatch):
    cold = compile_hlo(LONG_SORT)
    expected = _run(cold, LONG_SORT)
    _rewrite_library_entry(change)
    module_cache.forget_remembered()
    calls = _count_compiles(monkeypatch)
    again = compile_hlo(LONG_SORT)
    assert calls, "an unusable plan must compile again"
    assert _library_sorts(again) == _library_sorts(cold)
    for got, want in zip(_run(again, LONG_SORT), expected):
        np.testing.assert_array_equal(got, want)


def test_library_plan_data_round_trips_and_refuses_non_scalars():
    plan = module_plan.LibraryPlan("s", "sort", "why", (("descending", False),
                                                         ("key_rounding", None)))
    assert module_plan.LibraryPlan.from_data(plan.to_data()) == plan
    with pytest.raises(module_plan.PlanError, match="JSON scalars"):
        module_plan.LibraryPlan.from_data({**plan.to_data(), "decisions": {"a": {"b": 1}}})


def test_a_stubbed_library_sort_only_allocates_its_results(monkeypatch):
    compiled = compile_hlo(LONG_SORT)
    x = _inputs(LONG_SORT)[1]
    real = compiled(*x)
    stub_launches(compiled)
    compiled(*x)  # its shapes found once, on the meta device
    sorts = []
    monkeypatch.setattr(torch, "sort", lambda *a, **k: sorts.append(a))
    stubbed = compiled(*x)
    assert sorts == []
    assert [(t.shape, t.dtype) for t in stubbed] == [(t.shape, t.dtype) for t in real]
