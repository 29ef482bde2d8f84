"""``fusion-compile check`` and ``fusion-compile evaluate``: output, files and every error path."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

from fusion.evaluator.npz_io import load_arrays, save_arrays
from triton_backend.cli import main

HLO = pathlib.Path(__file__).parents[1] / "data" / "hlo"
SIMPLE = """HloModule simple
ENTRY e {
  x = f32[2,3] parameter(0)
  y = bf16[2,3] parameter(1)
  yf = f32[2,3] convert(y)
  s = f32[2,3] add(x, yf)
  n = f32[2,3] negate(s)
  ROOT t = (f32[2,3], bf16[2,3]) tuple(n, y)
}
"""


@pytest.fixture
def simple(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "simple.hlo"
    path.write_text(SIMPLE)
    return path


def test_check_text_lists_computations_fusions_and_ops(capsys):
    assert main(["check", str(HLO / "softmax.after.hlo")]) == 0
    out = capsys.readouterr().out
    assert "valid" in out and "(ENTRY)" in out and "fusions (" in out
    assert "  reduce: " in out and "  fusion: " in out


def test_check_json_matches_the_module(capsys):
    from fusion.text.parser import parse_hlo

    path = HLO / "layernorm.after.hlo"
    assert main(["check", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    module = parse_hlo(path.read_text())
    assert report["valid"] is True and report["error"] is None
    assert report["module"] == module.name
    assert report["computations"] == [c.name for c in module.computations]
    assert sorted(n for names in report["fusions"].values() for n in names) == sorted(
        i.name for _, i in module.fusions())
    assert sum(report["ops"].values()) == sum(len(c.instructions) for c in module.computations)


def test_check_verify_error_is_located(tmp_path, capsys):
    bad = tmp_path / "bad.hlo"
    bad.write_text("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n"
                   "  ROOT n = f32[2] add(p, q)\n}\n")
    assert main(["check", str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:4:3: error: operand 'q' of instruction 'n' does not exist" in err
    assert main(["check", str(bad), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] is False and report["module"] == "m"
    assert report["error"]["line"] == 4 and report["error"]["column"] == 3
    assert "operand 'q'" in report["error"]["message"]


def test_check_parse_error_is_located(tmp_path, capsys):
    bad = tmp_path / "bad.hlo"
    bad.write_text("HloModule m\nENTRY e {\n  p = f32[2 parameter(0)\n}\n")
    assert main(["check", str(bad)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"{bad}:3:") and ": error: " in err
    assert main(["check", str(bad), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] is False and report["error"]["line"] == 3


def test_check_missing_file(tmp_path, capsys):
    assert main(["check", str(tmp_path / "nope.hlo")]) == 1
    assert "no such file: " in capsys.readouterr().err
    assert main(["check", str(tmp_path / "nope.hlo"), "--json"]) == 1
    assert "no such file" in json.loads(capsys.readouterr().out)["error"]["message"]


def test_evaluate_random_inputs_writes_only_what_is_asked(simple, capsys):
    assert main(["evaluate", str(simple)]) == 0
    out = capsys.readouterr().out
    assert "o0: f32[2,3] min=" in out and "o1: bf16[2,3]" in out and "written" not in out
    assert sorted(p.name for p in simple.parent.iterdir()) == ["simple.hlo"]  # nothing asked
    assert main(["evaluate", str(simple), "--save-inputs", "in", "--outputs", "out"]) == 0
    assert capsys.readouterr().out == out + "inputs written to in\noutputs written to out\n"
    inputs = load_arrays("in")  # exactly the paths given: no ".npz" appended
    outputs = load_arrays("out")
    assert sorted(inputs) == ["p0", "p1"] and inputs["p1"].dtype.name == "bfloat16"
    want = -(inputs["p0"] + inputs["p1"].astype(np.float32))
    np.testing.assert_array_equal(outputs["o0"], want)
    np.testing.assert_array_equal(outputs["o1"].view(np.uint16), inputs["p1"].view(np.uint16))
    assert f"min={want.min():.6g} max={want.max():.6g} mean={want.astype(np.float64).mean():.6g}" in out


def test_evaluate_with_inputs_and_outputs(simple, tmp_path, capsys):
    import ml_dtypes

    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    y = np.full((2, 3), 0.5, ml_dtypes.bfloat16)
    save_arrays(tmp_path / "in.npz", {"p0": x, "p1": y}, {"p0": "f32", "p1": "bf16"})
    assert main(["evaluate", str(simple), "--inputs", str(tmp_path / "in.npz"),
                 "--outputs", str(tmp_path / "res.npz")]) == 0
    np.testing.assert_array_equal(load_arrays(tmp_path / "res.npz")["o0"], -(x + 0.5))
    assert not (tmp_path / "res.inputs.npz").exists()


def test_evaluate_writes_the_outputs_alone_when_only_they_are_asked(simple, tmp_path):
    assert main(["evaluate", str(simple), "--outputs", str(tmp_path / "out.npz")]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.npz", "simple.hlo"]


@pytest.mark.parametrize("arrays,message", [
    ({"p0": np.zeros((2, 3), np.float32)}, "has no array 'p1' for parameter y (bf16[2,3])"),
    ({"p0": np.zeros((3, 2), np.float32), "p1": None}, "array 'p0' has shape [3, 2], but parameter x is f32[2,3]"),
    ({"p0": np.zeros((2, 3), np.int32), "p1": None}, "array 'p0' has element type s32, but parameter x is f32[2,3]"),
    ({"p0": np.zeros((2, 3), np.float32), "p1": None, "p7": np.zeros(1)}, "unexpected array(s) p7"),
])
def test_evaluate_rejects_wrong_inputs(simple, tmp_path, capsys, arrays, message):
    import ml_dtypes

    arrays = {k: (np.zeros((2, 3), ml_dtypes.bfloat16) if v is None else v) for k, v in arrays.items()}
    save_arrays(tmp_path / "in.npz", arrays, {})
    assert main(["evaluate", str(simple), "--inputs", str(tmp_path / "in.npz")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("fusion-compile evaluate: error: ") and message in err


def test_evaluate_missing_files(simple, tmp_path, capsys):
    assert main(["evaluate", str(tmp_path / "nope.hlo")]) == 1
    assert "no such file" in capsys.readouterr().err
    assert main(["evaluate", str(simple), "--inputs", str(tmp_path / "nope.npz")]) == 1
    assert "no such inputs file" in capsys.readouterr().err


def test_evaluate_verify_and_parse_errors(tmp_path, capsys):
    bad = tmp_path / "bad.hlo"
    bad.write_text("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n"
                   "  ROOT n = s32[2] negate(p)\n}\n")
    assert main(["evaluate", str(bad)]) == 1
    assert f"{bad}:4:3: error: declared shape s32[2] of negate does not match" in capsys.readouterr().err
    bad.write_text("HloModule m\nENTRY e {\n  p = f32[2] parameter(0\n}\n")
    assert main(["evaluate", str(bad)]) == 1
    assert f"{bad}:4:1: error: expected ')'" in capsys.readouterr().err


def _script() -> str:
    return str(pathlib.Path(sys.executable).with_name("fusion-compile"))


def test_installed_script_checks_a_corpus_file():
    result = subprocess.run([_script(), "check", str(HLO / "gelu.after.hlo"), "--json"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["valid"] is True


def test_check_and_evaluate_never_import_torch_or_triton(simple):
    code = (
        "import sys\nfrom triton_backend.cli import main\n"
        f"assert main(['check', {str(simple)!r}]) == 0\n"
        f"assert main(['evaluate', {str(simple)!r}]) == 0\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'triton'))\n"
        "assert not bad, bad\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120, cwd=simple.parent, env={**os.environ})
    assert result.returncode == 0, result.stderr
