"""Autotuning on CPU: candidates compiled through an executor and ranked by the cost model."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from fusion.text.parser import parse_hlo
from tests.triton_backend.fusion_check import BROADCAST_ADD
from tiling.policy.candidates import tiling_candidates
from triton_backend.tuning.autotune import autotune, plan_sweep, workload_for
from triton_backend.tuning.cost_model import estimate
from triton_backend.runtime.device_specs import device_spec
from triton_backend.runtime.tuning_db import TuningDb


@pytest.fixture
def module():
    return parse_hlo(BROADCAST_ADD)


def test_sweep_is_ranked_by_the_cost_model(module):
    spec = device_spec("a100-80gb")
    trials = plan_sweep(module, module.entry.root, spec, num_warps=(2, 8), num_stages=(1, 2))
    report = tiling_candidates(module, module.entry.root)
    # No reduction loop: one stage count per (tiling, warps).
    assert len(trials) == len(report.legal) * 2
    assert {t.config.num_stages for t in trials} == {1}
    # Independent recomputation of every prediction, then the order.
    times = [estimate(workload_for(module, module.entry.root,
                                   next(c for c in report.legal if c.tile_sizes == t.config.tile_sizes)),
                      spec, num_warps=t.config.num_warps,
                      num_stages=t.config.num_stages).predicted_time_s for t in trials]
    assert times == sorted(times)
    assert [t.estimate.predicted_time_s for t in trials] == times
    assert len(plan_sweep(module, module.entry.root, spec, budget=5)) == 5


def test_cpu_autotune_with_a_thread_pool_says_it_used_the_cost_model(module, tmp_path):
    with ThreadPoolExecutor(2) as pool:
        result = autotune(module, "r", device="a100-80gb", budget=6, executor=pool,
                          db=TuningDb(tmp_path / "db.sqlite"))
    assert not result.measured
    assert "cost model" in result.method and "no GPU" in result.method
    assert len(result.trials) == 6 and all(t.error is None for t in result.trials)
    assert all(t.median_s is None for t in result.trials)
    predicted = [t.estimate.predicted_time_s for t in result.trials]
    assert predicted == sorted(predicted)
    assert result.best.time_s == min(predicted)
    best = result.best
    assert best.gb_per_s == pytest.approx((66560 + 65536) / best.time_s / 1e9)


def test_default_process_pool(module, tmp_path):
    result = autotune(module, "r", device="h100", budget=2, jobs=2, num_warps=(4,),
                      num_stages=(1,), db=TuningDb(tmp_path / "db.sqlite"))
    assert [t.error for t in result.trials] == [None, None]
    assert not result.measured and result.best is not None


def test_one_job_without_a_gpu_runs_in_this_process(module, tmp_path):
    from concurrent.futures import ProcessPoolExecutor

    from triton_backend.tuning.autotune import InlineExecutor, default_executor

    assert isinstance(default_executor(1, on_gpu=False), InlineExecutor)
    pool = default_executor(1, on_gpu=True)  # a launch that faults must not take the tuner
    assert isinstance(pool, ProcessPoolExecutor)
    pool.shutdown()
    result = autotune(module, "r", device="h100", budget=2, jobs=1, num_warps=(4,),
                      num_stages=(1,), db=TuningDb(tmp_path / "db.sqlite"))
    assert [t.error for t in result.trials] == [None, None] and result.best is not None


def test_a_candidate_that_fails_to_compile_is_reported_not_fatal(module, tmp_path, monkeypatch):
    import triton_backend.tuning.autotune as autotune_module

    real = autotune_module.compile_candidate

    def flaky(hlo_text, fusion_name, tile_sizes, *rest):
        if tuple(tile_sizes) == (64, 256):
            return "UnsupportedOpError: injected"
        return real(hlo_text, fusion_name, tile_sizes, *rest)

    monkeypatch.setattr(autotune_module, "compile_candidate", flaky)
    with ThreadPoolExecutor(2) as pool:
        result = autotune(module, "r", device="h100", executor=pool, num_warps=(4,),
                          num_stages=(1,), db=TuningDb(tmp_path / "db.sqlite"))
    failed = [t for t in result.trials if t.error]
    assert [t.config.tile_sizes for t in failed] == [(64, 256)]
    assert result.trials[-1].error and result.best.error is None


def test_launch_runs_the_file_with_explicit_options(module):
    import torch

    from triton_backend.tuning.autotune import launch
    from triton_backend.driver.compiled_fusion import compile_fusion

    compiled = compile_fusion(module, "r")
    assert "NUM_WARPS = " in compiled.source and "NUM_STAGES = " in compiled.source
    x, y = torch.randn(256), torch.randn(64, 256)
    (out,) = launch(compiled.module, [x, y], num_warps=2, num_stages=1)  # interpreted (conftest)
    assert torch.equal(out, x[None, :] + y)
    with pytest.raises(TypeError, match="unknown launch options"):
        compiled.module.run(x, y, num_ctas=2)


def test_the_untuned_default_of_a_dot_fusion_is_its_gpu_tiling():
    """``default_config`` compiles for the bare ``"cuda"`` target, which the dot template used
    to refuse ("cannot read a compute capability"): it is the sm_90 default."""
    from tests.triton_backend.test_interpreter_time import DOT
    from triton_backend.driver.compiled_fusion import compile_fusion
    from triton_backend.tuning.autotune import default_config

    module = parse_hlo(DOT)
    config = default_config(module, module.entry.instruction("fusion"))
    assert config.tile_sizes == tuple(compile_fusion(module, "fusion", target="sm_90").tile_sizes)
