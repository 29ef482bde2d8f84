"""``fusion-compile vjp``: the backward module printed or written, --wrt, --json, errors."""
from __future__ import annotations

import json
import pathlib

import numpy as np

from fusion.autodiff import vjp
from fusion.evaluator import evaluate
from fusion.evaluator.npz_io import random_inputs
from fusion.text.parser import parse_hlo
from fusion.shapes.verifier import verify_module
from triton_backend.cli import main

HLO = pathlib.Path(__file__).parents[2] / "data" / "hlo"


def test_vjp_prints_the_backward_module(capsys):
    assert main(["vjp", str(HLO / "layernorm.before.hlo")]) == 0
    printed = parse_hlo(capsys.readouterr().out)
    verify_module(printed)
    expected = vjp(parse_hlo((HLO / "layernorm.before.hlo").read_text()))
    inputs = random_inputs(expected, seed=2)
    for a, b in zip(evaluate(expected, *inputs), evaluate(printed, *inputs)):
        np.testing.assert_array_equal(a, b)
    assert len(printed.entry.root.shape.elements) == 3


def test_vjp_wrt_and_output_file(tmp_path, capsys):
    out = tmp_path / "grad.hlo"
    assert main(["vjp", str(HLO / "swiglu.before.hlo"), "--wrt", "0,2", "-o", str(out)]) == 0
    assert capsys.readouterr().out == ""
    backward = parse_hlo(out.read_text())
    assert [str(s) for s in backward.entry.root.shape.elements] == ["f32[2,4]", "f32[4,6]"]


def test_vjp_json(capsys):
    assert main(["vjp", str(HLO / "matmul.before.hlo"), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["command"] == "vjp" and document["error"] is None
    assert document["wrt"] == [0, 1]
    verify_module(parse_hlo(document["hlo"]))


def test_vjp_errors(tmp_path, capsys):
    assert main(["vjp", str(HLO / "matmul.before.hlo"), "--wrt", "5"]) == 2
    assert "wrt index 5 is not a parameter" in capsys.readouterr().err
    bad = tmp_path / "opaque.hlo"
    bad.write_text('HloModule m\nENTRY e {\n  x = f32[2] parameter(0)\n'
                   '  ROOT c = f32[2] custom-call(x), custom_call_target="opaque"\n}\n')
    assert main(["vjp", str(bad)]) == 1
    assert f"{bad}:4:3: error: no VJP rule for op custom-call" in capsys.readouterr().err
