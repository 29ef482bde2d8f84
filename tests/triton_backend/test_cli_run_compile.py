"""``fusion-compile run`` and ``fusion-compile compile``: files, output, checks and errors."""
from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

from fusion.evaluator import evaluate
from fusion.evaluator.npz_io import load_arrays, save_arrays
from fusion.text.parser import parse_hlo
from triton_backend.cli import main
from triton_backend.reports.ptx_report import find_ptxas

HLO = pathlib.Path(__file__).parents[1] / "data" / "hlo"
EXAMPLES = pathlib.Path(__file__).parents[2] / "examples"


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_run_check_on_the_small_gelu_example(in_tmp, capsys):
    assert main(["run", str(EXAMPLES / "gelu_small.hlo"), "--check", "--save-inputs", "in.npz",
                 "--outputs", "out.bin"]) == 0
    out = capsys.readouterr().out
    assert "o0: bf16[6,8,128]" in out and "check passed" in out and "o0: bf16 max abs error" in out
    assert "outputs written to out.bin" in out and sorted(p.name for p in in_tmp.iterdir()) == [
        "in.npz", "out.bin"]  # the paths exactly as given, nothing else
    inputs, outputs = load_arrays("in.npz"), load_arrays("out.bin")
    module = parse_hlo((EXAMPLES / "gelu_small.hlo").read_text())
    (ref,) = evaluate(module, inputs["p0"])
    assert outputs["o0"].dtype == ref.dtype
    np.testing.assert_allclose(outputs["o0"].astype(np.float32), ref.astype(np.float32), atol=1e-2, rtol=1.6e-2)


def test_run_with_inputs_writes_outputs_like_evaluate(in_tmp, capsys):
    hlo = str(HLO / "reductions.before.hlo")
    x = np.linspace(-3, 3, 15, dtype=np.float32).reshape(3, 5)
    save_arrays("in.npz", {"p0": x}, {"p0": "f32"})
    assert main(["run", hlo, "--inputs", "in.npz", "--outputs", "sub/run.npz"]) == 0
    assert main(["evaluate", hlo, "--inputs", "in.npz", "--outputs", "ref.npz"]) == 0
    got, want = load_arrays("sub/run.npz"), load_arrays("ref.npz")
    assert sorted(got) == sorted(want) == ["o0", "o1", "o2"]
    for key in want:
        assert got[key].dtype == want[key].dtype
        np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-6)
    assert not pathlib.Path("sub/run.inputs.npz").exists()


def test_run_check_fails_with_status_3_when_out_of_tolerance(in_tmp, capsys, monkeypatch):
    from triton_backend.host import output_check

    monkeypatch.setitem(output_check.TOLERANCES, "f32", output_check.Tolerance(-1.0, 0.0))
    # Nor may it pass as accurate as the evaluator against the module computed in f64.
    monkeypatch.setattr(output_check, "EXACT_ERROR_FACTOR", -1.0)
    assert main(["run", str(HLO / "gelu.after.hlo"), "--check"]) == 3
    out = capsys.readouterr().out
    assert "FAILED" in out and "check FAILED for o0" in out


def test_run_errors_are_reported_not_raised(in_tmp, capsys):
    bad = in_tmp / "bad.hlo"
    bad.write_text("HloModule m\nENTRY e {\n  x = f32[2] parameter(0)\n"
                   "  ROOT c = f32[2] custom-call(x), custom_call_target=\"t\"\n}\n")
    assert main(["run", str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:4:3: error: " in err and "custom-call" in err
    assert main(["run", str(HLO / "gelu.after.hlo"), "--inputs", "missing.npz"]) == 1
    assert "no such inputs file: missing.npz" in capsys.readouterr().err
    save_arrays("wrong.npz", {"p0": np.zeros((2, 2), np.float32)}, {})
    assert main(["run", str(HLO / "gelu.after.hlo"), "--inputs", "wrong.npz"]) == 1
    assert "array 'p0' has shape [2, 2]" in capsys.readouterr().err
    assert main(["run", str(HLO / "gelu.after.hlo"), "--tile", "oops"]) == 2  # usage
    assert "malformed --tile 'oops'" in capsys.readouterr().err


def test_compile_writes_kernels_and_report(in_tmp, capsys):
    assert main(["compile", str(HLO / "softmax.after.hlo"), "-o", "out"]) == 0
    out_dir = in_tmp / "out"
    report = json.loads((out_dir / "report.json").read_text())
    module = parse_hlo((HLO / "softmax.after.hlo").read_text())
    fusions = [i for i in module.entry.instructions if i.opcode == "fusion"]
    assert [f["name"] for f in report["fusions"]] == [f.name for f in fusions]
    for entry, instr in zip(report["fusions"], fusions):
        assert (out_dir / entry["kernel_file"]).read_text().count("@triton.jit") >= 1
        assert entry["emitter_kind"] in ("loop", "reduction")
        out_bytes = 4 * int(np.prod(instr.shape.dims))
        assert entry["bytes_written"] == out_bytes and entry["bytes_read"] > 0
        assert entry["programs"] == int(np.prod(entry["grid"])) and entry["target"] is None
    text = (out_dir / "report.txt").read_text()
    assert "reduction emitter" in text and "tiling:" in text and "bytes:" in text
    assert text in capsys.readouterr().out


@pytest.mark.skipif(find_ptxas(90) is None, reason="ptxas not found in the Triton wheel")
def test_compile_for_sm_90_writes_ptx_cubin_and_resources(in_tmp, capsys):
    assert main(["compile", str(HLO / "layernorm.after.hlo"), "-o", "k", "--target", "sm_90"]) == 0
    report = json.loads((in_tmp / "k" / "report.json").read_text())
    assert report["target"] == "sm_90" and report["fusions"]
    for entry in report["fusions"]:
        target = entry["target"]
        ptx = (in_tmp / "k" / target["ptx_file"]).read_text()
        assert ".target sm_90" in ptx and ".entry" in ptx
        assert (in_tmp / "k" / target["cubin_file"]).read_bytes()[:4] == b"\x7fELF"
        assert target["registers"] > 0 and isinstance(target["spills"], int) and target["spills"] >= 0
        assert target["shared_bytes"] >= 0
    text = (in_tmp / "k" / "report.txt").read_text()
    assert "registers" in text and "spills" in text and "shared memory" in text


def test_compile_rejects_an_unknown_target(in_tmp, capsys):
    with pytest.raises(SystemExit):
        main(["compile", str(HLO / "gelu.after.hlo"), "-o", "k", "--target", "sm_70"])
    assert "invalid choice: 'sm_70'" in capsys.readouterr().err
