"""Work counts of compiling long elementwise chains (issue 29: a 20,000-op chain in under 30 s
of CPU).  No wall clock is asserted: the counts that made the compile superlinear are.

* The fusion pass judges each producer a bounded number of times (about three per op), so
  the judgements grow linearly with the chain.
* ``compile_hlo`` builds and stores the module plan with the cyclic collector still paused:
  right after the compile, the plan's O(n) allocations set off full collections of the whole
  heap.
"""
from __future__ import annotations

import gc
import importlib.util
from pathlib import Path

from fusion.text.parser import parse_hlo
from tiling.fusion_pass import priority_fusion
from tiling.fusion_pass.decisions import MAX_FUSION_MEMBERS
from triton_backend.driver import module_compiler
from triton_backend.runtime import module_cache

BENCH = Path(__file__).resolve().parents[2] / "bench" / "compile_scaling.py"


def _scaling():
    spec = importlib.util.spec_from_file_location("bench_compile_scaling_work", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _judgements(text: str, monkeypatch) -> int:
    calls = [0]
    original = priority_fusion.evaluate_producer

    def counted(*args, **kwargs):
        calls[0] += 1
        return original(*args, **kwargs)

    with monkeypatch.context() as patch:
        patch.setattr(priority_fusion, "evaluate_producer", counted)
        priority_fusion.fuse_module(parse_hlo(text))
    return calls[0]


def test_the_fusion_pass_judges_a_chain_linearly(monkeypatch):
    scaling = _scaling()
    sizes = (300, 600, 1200)
    counts = [_judgements(scaling.chain_text("elementwise", n), monkeypatch) for n in sizes]
    for n, count in zip(sizes, counts):
        assert n <= count <= 4 * n
    # Doubling the chain at most doubles the judgements (a few more where the member limit
    # cuts a kernel).
    assert counts[1] <= 2 * counts[0] + 10 and counts[2] <= 2 * counts[1] + 10


def test_the_module_plan_is_stored_with_the_collector_paused(monkeypatch):
    seen = []
    original = module_cache.ModuleCache.store

    def store(self, key, plan):
        seen.append(gc.isenabled())
        return original(self, key, plan)

    monkeypatch.setattr(module_cache.ModuleCache, "store", store)
    was_enabled = gc.isenabled()
    gc.enable()
    try:
        compiled = module_compiler.compile_hlo(_scaling().chain_text("elementwise", 450),
                                               cache=True)
        assert gc.isenabled()  # turned back on after the compile
    finally:
        if not was_enabled:
            gc.disable()
    assert seen == [False]
    # The member limit cuts the 450 ops into kernels of at most that many.
    assert len(compiled.fusions) == -(-450 // MAX_FUSION_MEMBERS)
