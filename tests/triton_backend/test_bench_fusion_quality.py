"""``bench/fusion_quality.py`` and its programs on CPU: one small program end to end, the
committed programs and XLA:CPU counts, and ``bench/gpu_runtime.py``'s clean skip."""
from __future__ import annotations

import csv
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from fusion.text.parser import parse_hlo
from triton_backend.reports.ptx_report import find_ptxas

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
PROGRAMS = BENCH / "programs"


def _load(path: Path):
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location(f"bench_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(BENCH))


def test_every_program_is_committed_parses_and_has_an_xla_cpu_count():
    counts = json.loads((PROGRAMS / "xla_cpu_kernels.json").read_text())
    names = sorted(p.stem for p in PROGRAMS.glob("*.hlo"))
    assert names and sorted(k for k in counts if not k.startswith("_")) == names
    for family in ("softmax", "log_softmax", "layernorm", "rmsnorm", "cross_entropy", "gelu",
                   "swiglu", "matmul_bias_gelu", "attention_causal_f32", "attention_causal_bf16",
                   "attention_bf16", "attention_gqa_sliding_window", "gpt2_block",
                   "matmul_bf16", "llama_block", "cumsum", "top_p_mask"):
        assert any(n.startswith(family) for n in names), family
    for name in names:
        module = parse_hlo((PROGRAMS / f"{name}.hlo").read_text())
        assert not any(True for _ in module.fusions()), f"{name} should be unfused"
        assert isinstance(counts[name], int) and counts[name] >= 1


def test_xla_kernel_count_of_optimized_hlo():
    generate = _load(PROGRAMS / "generate.py")
    text = """HloModule m
%fused_computation (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %n = f32[4]{0} negate(f32[4]{0} %p)
}
%body (t: (s32[], f32[4])) -> (s32[], f32[4]) {
  %t = (s32[], f32[4]{0}) parameter(0)
  %i = s32[] get-tuple-element(%t), index=0
  %v = f32[4]{0} get-tuple-element(%t), index=1
  %e = f32[4]{0} exponential(%v)
  ROOT %o = (s32[], f32[4]{0}) tuple(%i, %e)
}
%cond (t: (s32[], f32[4])) -> pred[] {
  %t = (s32[], f32[4]{0}) parameter(0)
  ROOT %c = pred[] constant(true)
}
ENTRY %main (x: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  %f = f32[4]{0} fusion(f32[4]{0} %x), kind=kLoop, calls=%fused_computation
  %b = f32[2,2]{1,0} bitcast(%f)
  %z = s32[] constant(0)
  %t = (s32[], f32[4]{0}) tuple(%z, %f)
  %w = (s32[], f32[4]{0}) while(%t), condition=%cond, body=%body
  ROOT %g = f32[4]{0} get-tuple-element(%w), index=1
}
"""
    # the fusion, and the exponential in the while body (the negate inside the fusion and
    # the views, tuples and constants launch nothing)
    assert generate.count_xla_kernels(text) == 2


@pytest.mark.skipif(find_ptxas(90) is None, reason="ptxas not found in the Triton wheel")
def test_fusion_quality_on_one_small_program(tmp_path, capsys):
    bench = _load(BENCH / "fusion_quality.py")
    name = "rmsnorm_f32_2048x1024"
    csv_path, png_path = tmp_path / "q.csv", tmp_path / "q.png"
    assert bench.main(["--only", name, "--csv", str(csv_path), "--png", str(png_path),
                       "--keep", str(tmp_path / "k")]) == 0
    out = capsys.readouterr().out
    assert "moved/comp" in out and "xla_cpu" in out and name in out
    assert "triton tutorial softmax" in out and "triton tutorial matmul+bias+GELU" in out
    rows = list(csv.DictReader(csv_path.open()))
    ours = next(r for r in rows if r["program"] == name)
    assert not ours["error"], ours["error"]
    counts = json.loads((PROGRAMS / "xla_cpu_kernels.json").read_text())
    assert int(ours["xla_cpu_kernels"]) == counts[name]
    # x f32[2048,1024], w f32[1024] in; f32[2048,1024] out.
    assert int(ours["compulsory_bytes"]) == 2 * 2048 * 1024 * 4 + 1024 * 4
    report = json.loads((tmp_path / "k" / name / "report.json").read_text())
    assert int(ours["kernels"]) == len(report["fusions"]) >= 1
    moved = sum(f["bytes_read"] + f["bytes_written"] for f in report["fusions"])
    assert int(ours["kernel_bytes"]) == moved
    assert float(ours["moved_over_compulsory"]) == pytest.approx(moved / int(ours["compulsory_bytes"]))
    assert int(ours["max_registers"]) == max(f["target"]["registers"] for f in report["fusions"])
    assert int(ours["spills"]) == sum(f["target"]["spills"] for f in report["fusions"])
    hand = [r for r in rows if r["kind"] == "handwritten"]
    assert hand and all(not r["error"] and int(r["max_registers"]) > 0 for r in hand)
    assert all(float(r["moved_over_compulsory"]) == 1.0 for r in hand)
    if importlib.util.find_spec("matplotlib") is None:
        assert "matplotlib is not installed" in out and not png_path.exists()
    else:
        assert png_path.read_bytes()[:4] == b"\x89PNG"


def test_gpu_runtime_over_the_programs_skips_cleanly_without_a_gpu(tmp_path, capsys):
    gpu_runtime = _load(BENCH / "gpu_runtime.py")
    if gpu_runtime.skip_reason() is None:
        pytest.skip("a GPU is visible: the benchmark would run")
    assert gpu_runtime.main(["--only", "softmax_f32_4096x1024", "--csv", str(tmp_path / "x.csv")]) == 0
    out = capsys.readouterr().out
    assert "gpu_runtime: skipped:" in out and not (tmp_path / "x.csv").exists()
