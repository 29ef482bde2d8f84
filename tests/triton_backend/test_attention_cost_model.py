"""The attention kernels' workload (tuning/attention_workload): their tensor-core FLOPs per
visited block, never under the compute roofline, and against 36 forward configurations timed
on an H200 (tests/data/h200_attention_tiles.csv, bench/tile_sweep.py); the compile report's
prediction of an attention kernel is no longer its bytes alone."""
from __future__ import annotations

import csv
import math
import statistics
from pathlib import Path

import pytest

from fusion.text.parser import parse_hlo
from triton_backend.driver.compiled_fusion import compile_fusion
from triton_backend.driver.module_compiler import compile_hlo
from triton_backend.reports.compile_report import _fusion_json, build_report
from triton_backend.runtime.device_specs import device_spec
from triton_backend.runtime.kernel_loading import TemplateKind
from triton_backend.tuning.attention_workload import TENSOR_CORE_EFFICIENCY, attention_workload
from triton_backend.tuning.cost_model import estimate
from tests.triton_backend.measured_tiles import pick_regrets

ROOT = Path(__file__).resolve().parents[2]


def _program(name: str):
    return compile_hlo(parse_hlo((ROOT / "bench" / "programs" / f"{name}.hlo").read_text()),
                       target="sm_90").module


@pytest.fixture(scope="module")
def predictions():
    modules, out = {}, []
    spec = device_spec("h200")
    for row in csv.DictReader((ROOT / "tests" / "data" / "h200_attention_tiles.csv").open()):
        name = row["program"]
        module = modules.setdefault(name, _program(name))
        sizes = tuple(int(x) for x in row["tiles"].split("x"))
        kernel = compile_fusion(module, row["fusion"], tile_sizes=sizes, target="sm_90")
        warps, stages = int(row["warps"]), int(row["stages"])
        workload = attention_workload(module, module.entry.instruction(row["fusion"]), kernel,
                                      spec, warps)
        model = estimate(workload, spec, num_warps=warps, num_stages=stages)
        out.append((name, row["fusion"], float(row["us"]), model.predicted_time_s * 1e6,
                    workload))
    return out


def test_predictions_are_about_the_measured_times(predictions):
    ratios = [predicted / measured for _, _, measured, predicted, _ in predictions]
    assert len(ratios) == 36
    assert 0.85 <= statistics.median(ratios) <= 1.2, statistics.median(ratios)
    assert min(ratios) > 0.5 and max(ratios) < 2.0, (min(ratios), max(ratios))


def test_the_predicted_best_configuration_is_near_the_measured_best(predictions):
    regrets = pick_regrets(predictions)
    assert len(regrets) == 4 and max(regrets) < 1.3, regrets


def test_no_prediction_beats_the_tensor_core_roofline(predictions):
    peak = device_spec("h200").peak_flops("bf16", tensor_cores=True)
    for name, _, _, predicted, workload in predictions:
        assert workload.tensor_core_flops > 0, name
        assert predicted * 1e-6 >= workload.tensor_core_flops / peak, name


def test_flops_count_the_visited_blocks_of_a_causal_kernel():
    """Causal [4,8,512,64] at 64x64: 8 query blocks see 1..8 key blocks, 36 of 64; each block
    runs two 64x64x64 dots."""
    module = _program("attention_causal_bf16_4x8x512x64")
    kernel = compile_fusion(module, "fusion", tile_sizes=(64, 64), target="sm_90")
    workload = attention_workload(module, module.entry.instruction("fusion"), kernel,
                                  device_spec("h200"))
    assert workload.num_blocks == 4 * 8 * 8
    assert workload.tensor_core_flops == 4 * 8 * 36 * 2 * (2 * 64 * 64 * 64)


def test_the_report_models_attention_by_its_dots():
    """The 2048-token attention's kernel was predicted at 44 us from its bytes (394 us on an
    H200); now its FLOPs at the measured fraction of the peak."""
    compiled = compile_hlo(parse_hlo((ROOT / "bench" / "programs" /
                                      "attention_bf16_4x16x2048x128.hlo").read_text()),
                           target="sm_90")
    (kernel,) = build_report(compiled, device="h200").fusions
    flops = 4 * 4 * 16 * 2048 * 2048 * 128  # two dots, every block visited
    peak = device_spec("h200").peak_flops("bf16", tensor_cores=True)
    model = kernel.model
    assert model.predicted_time_s >= flops / peak
    assert model.bound != "memory" and math.isfinite(model.predicted_time_s)
    # the report's per-kernel FLOPs, predicted TFLOP/s and share of the tensor-core peak
    assert model.dot_flops == flops and model.tensor_core_peak_flops == peak
    assert model.predicted_tflops == pytest.approx(flops / model.predicted_time_s / 1e12)
    assert 0 < model.tensor_core_peak_fraction <= TENSOR_CORE_EFFICIENCY
    fields = _fusion_json(kernel)["model"]
    assert fields["predicted_tflops"] == model.predicted_tflops
    assert fields["tensor_core_peak_fraction"] == model.tensor_core_peak_fraction


def test_the_report_gives_a_dot_kernels_flops_and_none_for_a_normalization():
    for name, flops in (("matmul_bf16_2048x768x2304", 2 * 2048 * 768 * 2304),
                        ("softmax_bf16_4096x1024", 0)):
        compiled = compile_hlo(parse_hlo((ROOT / "bench" / "programs" / f"{name}.hlo")
                                         .read_text()), target="sm_90", dot_library="never")
        (kernel,) = build_report(compiled, device="h200").fusions
        assert kernel.model.dot_flops == flops, name
        assert (kernel.model.predicted_tflops is None) == (flops == 0), name


def test_a_backward_kernels_dots_per_block_are_the_dots_its_file_runs():
    """The renderer's count (the cost model's) against the ``tl.dot`` calls in each file:
    the row statistics recompute the scores once per dependency level, the dQ and dK/dV
    kernels once, beside their output dots."""
    compiled = compile_hlo(parse_hlo((ROOT / "bench" / "programs" /
                                      "vjp_attention_causal_bf16_4x8x512x64.hlo").read_text()),
                           target="sm_90")
    kernels = [f for f in compiled.fusions.values()
               if f.kind is TemplateKind.ATTENTION_BACKWARD]
    assert len(kernels) == 3
    for kernel in kernels:
        assert kernel.module.DOTS_PER_BLOCK == kernel.source.count("tl.dot("), kernel.fusion_name
    (kernel,) = [k for k in build_report(compiled, device="h200").fusions
                 if k.name == kernels[0].fusion_name]
    block_m, block_n = kernels[0].tile_sizes[:2]
    per_block = kernels[0].module.DOTS_PER_BLOCK * 2 * block_m * block_n * 64
    assert kernel.model.dot_flops % per_block == 0
