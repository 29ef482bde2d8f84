"""``fusion-compile compile``'s report numbers against counts made by hand from the shapes.

The module is already fused (two fusions, compiled as they are with ``--no-fuse``), so every
number below follows from its shapes alone:

* ``a = x + broadcast(bias)``: reads x f32[64,256] (65,536 B) and bias f32[256] (1,024 B),
  writes f32[64,256] (65,536 B): 132,096 B compulsory.  Tiled with row blocks of ``r`` rows,
  each block re-reads the bias row it needs: modeled bytes = 65,536 + 1,024 * (64 / r) +
  65,536 (column blocks read disjoint slices of it).
* ``r = reduce(a)`` over dim 1: reads 65,536 B, writes f32[64] (256 B): 65,792 B, and a row
  reduction reads each input byte once whatever the row tile: modeled = compulsory.
* The module: inputs x and bias (66,560 B), output f32[64] (256 B): 66,816 B compulsory;
  the kernels move 197,888 B.
"""
from __future__ import annotations

import json
import math

import pytest

from triton_backend.cli import main
from triton_backend.reports.ptx_report import find_ptxas
from triton_backend.runtime.device_specs import device_spec

TINY = """HloModule tiny

add_bias {
  p0 = f32[64,256]{1,0} parameter(0)
  p1 = f32[256]{0} parameter(1)
  b = f32[64,256]{1,0} broadcast(p1), dimensions={1}
  ROOT s = f32[64,256]{1,0} add(p0, b)
}

sum_f32 {
  l = f32[] parameter(0)
  r = f32[] parameter(1)
  ROOT add = f32[] add(l, r)
}

row_sum {
  p = f32[64,256]{1,0} parameter(0)
  z = f32[] constant(0)
  ROOT red = f32[64]{0} reduce(p, z), dimensions={1}, to_apply=sum_f32
}

ENTRY main {
  x = f32[64,256]{1,0} parameter(0)
  bias = f32[256]{0} parameter(1)
  a = f32[64,256]{1,0} fusion(x, bias), kind=kLoop, calls=add_bias
  ROOT r = f32[64]{0} fusion(a), kind=kInput, calls=row_sum
}
"""

X, BIAS, A, R = 64 * 256 * 4, 256 * 4, 64 * 256 * 4, 64 * 4


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny.hlo").write_text(TINY)
    return tmp_path


def _report(args, capsys):
    assert main(["compile", "tiny.hlo", "-o", "out", "--no-fuse", *args]) == 0
    capsys.readouterr()
    return json.loads(open("out/report.json").read()), open("out/report.txt").read()


def test_kernel_and_module_bytes_match_the_hand_count(tiny, capsys):
    report, text = _report([], capsys)
    kernels = {f["name"]: f for f in report["fusions"]}
    assert sorted(kernels) == ["a", "r"]
    a, r = kernels["a"], kernels["r"]
    assert a["input_shapes"] == ["f32[64,256]{1,0}", "f32[256]{0}"]
    assert a["output_shapes"] == ["f32[64,256]{1,0}"]
    assert r["input_shapes"] == ["f32[64,256]{1,0}"] and r["output_shapes"] == ["f32[64]{0}"]
    assert (a["bytes_read"], a["bytes_written"], a["compulsory_bytes"]) == (X + BIAS, A, X + BIAS + A)
    assert (r["bytes_read"], r["bytes_written"], r["compulsory_bytes"]) == (A, R, A + R)

    # Modeled DRAM bytes of the tiling each kernel was compiled with.
    rows_per_block = a["tile_sizes"][0]
    assert a["modeled_bytes"] == a["model"]["modeled_bytes"] == \
        X + BIAS * math.ceil(64 / rows_per_block) + A
    assert r["modeled_bytes"] == A + R

    for k in (a, r):
        assert k["num_warps"] in (1, 2, 4, 8, 16, 32)
        assert k["programs"] == math.prod(k["grid"]) >= 1
        model = k["model"]
        assert model["device"] == "h100" and model["bound"] in ("memory", "compute")
        roofline = k["compulsory_bytes"] / device_spec("h100").memory_bandwidth_bytes_per_s
        assert model["roofline_time_s"] == pytest.approx(roofline)
        assert 0 < model["hbm_roofline_fraction"] <= 1
        assert model["hbm_roofline_fraction"] == pytest.approx(roofline / model["predicted_time_s"])
        assert k["registers"] is None and k["spills"] is None  # no --target

    summary = report["summary"]
    assert report["device"] == "h100" and summary["kernels"] == 2
    assert (summary["input_bytes"], summary["output_bytes"]) == (X + BIAS, R)
    assert summary["compulsory_bytes"] == X + BIAS + R == 66816
    assert summary["kernel_bytes"] == report["total_bytes_moved"] == 197888
    assert summary["kernel_bytes_ratio"] == pytest.approx(197888 / 66816)
    modeled = a["modeled_bytes"] + r["modeled_bytes"]
    assert summary["modeled_bytes"] == modeled
    assert summary["modeled_bytes_ratio"] == pytest.approx(modeled / 66816)
    total_time = a["model"]["predicted_time_s"] + r["model"]["predicted_time_s"]
    assert summary["predicted_time_s"] == pytest.approx(total_time)
    assert summary["hbm_roofline_fraction"] == pytest.approx(66816 / 3.35e12 / total_time)

    # report.txt says the same.
    assert "compulsory bytes (module inputs + outputs): 66816" in text
    assert f"total bytes moved by kernels: 197888 ({197888 / 66816:.2f}x compulsory)" in text
    assert f"modeled bytes, summed over kernels: {modeled}" in text
    assert "inputs:   f32[64,256]{1,0}, f32[256]{0}" in text
    assert f"{X + BIAS} read + {A} written = {X + BIAS + A} compulsory" in text
    assert f"num_warps: {a['num_warps']}" in text and "% of the HBM roofline" in text


def test_the_device_sets_the_roofline(tiny, capsys):
    h100, _ = _report([], capsys)
    h200, text = _report(["--device", "h200"], capsys)
    assert h200["device"] == "h200" and "modeled on h200" in text
    for a, b in zip(h100["fusions"], h200["fusions"]):
        assert b["model"]["roofline_time_s"] == pytest.approx(a["model"]["roofline_time_s"] * 3.35 / 4.8)
        assert b["modeled_bytes"] == a["modeled_bytes"]


def test_an_unknown_device_is_an_error(tiny, capsys):
    assert main(["compile", "tiny.hlo", "-o", "out", "--device", "v100"]) == 2  # usage
    assert "unknown device 'v100'" in capsys.readouterr().err


def test_a_dot_kernel_is_modeled_with_its_operand_rereads(tmp_path, monkeypatch, capsys):
    # [256,128] x [128,512] f32: each (BM x BN) output block reads a BM x K slab of lhs and a
    # K x BN slab of rhs, so lhs is read N/BN times and rhs M/BM times, from L2 where the
    # blocks run at once: here all of them (one wave), so DRAM sees each operand once.
    monkeypatch.chdir(tmp_path)
    (tmp_path / "dot.hlo").write_text("""HloModule d
ENTRY e {
  a = f32[256,128]{1,0} parameter(0)
  b = f32[128,512]{1,0} parameter(1)
  ROOT d = f32[256,512]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
""")
    assert main(["compile", "dot.hlo", "-o", "out"]) == 0
    capsys.readouterr()
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    (k,) = report["fusions"]
    assert k["emitter_kind"] == "dot"
    bm, bn = k["tile_sizes"][:2]
    lhs, rhs, out = 256 * 128 * 4, 128 * 512 * 4, 256 * 512 * 4
    assert k["compulsory_bytes"] == lhs + rhs + out == report["summary"]["compulsory_bytes"]
    assert math.ceil(512 / bn) * math.ceil(256 / bm) <= 132
    assert k["modeled_bytes"] == lhs + rhs + out
    assert k["model"]["note"] == ""


@pytest.mark.skipif(find_ptxas(90) is None, reason="ptxas not found in the Triton wheel")
def test_registers_and_spills_for_sm_90(tiny, capsys):
    report, text = _report(["--target", "sm_90"], capsys)
    regs = [f["registers"] for f in report["fusions"]]
    spills = [f["spills"] for f in report["fusions"]]
    assert all(isinstance(n, int) and 0 < n <= 255 for n in regs)
    assert all(isinstance(n, int) and n >= 0 for n in spills)
    for f in report["fusions"]:
        assert f["registers"] == f["target"]["registers"] and f["spills"] == f["target"]["spills"]
    assert report["summary"]["max_registers"] == max(regs)
    assert report["summary"]["spills"] == sum(spills)
    assert f"sm_90: at most {max(regs)} registers per thread, {sum(spills)} B spilled" in text
