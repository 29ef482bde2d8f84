"""``fusion-compile indexing``: text and JSON output, both directions, errors, the corpus."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from triton_backend.cli import main

CORPUS = sorted((Path(__file__).parent.parent / "data" / "hlo").glob("*.hlo"))

SEED_DOT = """HloModule m
ENTRY e {
  p0 = f32[4,128,256] parameter(0)
  p1 = f32[4,256,64] parameter(1)
  ROOT dot = f32[4,128,64] dot(p0, p1), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}
}
"""


@pytest.fixture
def dot_file(tmp_path):
    path = tmp_path / "dot.hlo"
    path.write_text(SEED_DOT)
    return str(path)


def run_json(capsys, *argv):
    assert main(["indexing", *argv, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    # The envelope every subcommand's JSON has (docs/cli.md); the rest is the command's own.
    assert (doc.pop("schema_version"), doc.pop("command"), doc.pop("error")) == (1, "indexing", None)
    return doc


def test_output_to_input_json(capsys, dot_file):
    assert run_json(capsys, dot_file) == {
        "instruction": "dot", "direction": "output-to-input", "output": 0,
        "operands": [
            {"operand": 0, "maps": ["(d0, d1, d2)[s0] -> (d0, d1, s0), domain: d0 in [0, 3],"
                                    " d1 in [0, 127], d2 in [0, 63], s0 in [0, 255]"]},
            {"operand": 1, "maps": ["(d0, d1, d2)[s0] -> (d0, s0, d2), domain: d0 in [0, 3],"
                                    " d1 in [0, 127], d2 in [0, 63], s0 in [0, 255]"]}]}


def test_input_to_output_json(capsys, dot_file):
    got = run_json(capsys, dot_file, "--direction", "input-to-output", "--operand", "0")
    assert got == {"instruction": "dot", "direction": "input-to-output", "operand": 0,
                   "outputs": [{"output": 0, "maps": [
                       "(d0, d1, d2)[s0] -> (d0, d1, s0), domain: d0 in [0, 3],"
                       " d1 in [0, 127], d2 in [0, 255], s0 in [0, 63]"]}]}


def test_text_output_and_one_operand(capsys, dot_file):
    assert main(["indexing", dot_file, "--instruction", "%dot", "--operand", "1"]) == 0
    out = capsys.readouterr().out
    assert "output 0 -> operand 1:" in out and "operand 0" not in out
    assert "(d0, s0, d2)" in out


def test_input_to_output_needs_an_operand(capsys, dot_file):
    assert main(["indexing", dot_file, "--direction", "input-to-output"]) == 2  # usage
    assert "needs --operand K" in capsys.readouterr().err


def test_unknown_instruction_lists_close_names(capsys, dot_file):
    assert main(["indexing", dot_file, "--instruction", "dott"]) == 2  # usage
    err = capsys.readouterr().err
    assert "no instruction named 'dott'" in err and "did you mean dot" in err


def test_out_of_range_output_and_operand(capsys, dot_file):
    assert main(["indexing", dot_file, "--output", "1"]) == 2
    assert "has 1 outputs" in capsys.readouterr().err
    assert main(["indexing", dot_file, "--operand", "5"]) == 2
    assert "has 2 operands" in capsys.readouterr().err


def test_fusion_root_goes_through_the_fused_computation(capsys):
    path = next(p for p in CORPUS if p.name == "bf16_softmax.after.hlo")
    got = run_json(capsys, str(path))
    assert got["operands"] and all(op["maps"] for op in got["operands"])


@pytest.mark.parametrize("path", CORPUS, ids=[p.name for p in CORPUS])
def test_every_corpus_file(capsys, path):
    got = run_json(capsys, str(path))
    for op in got["operands"]:
        for text in op["maps"]:
            assert text == "UNDEFINED" or "->" in text
    if got["operands"]:
        back = run_json(capsys, str(path), "--direction", "input-to-output", "--operand", "0")
        assert back["outputs"]


def test_does_not_import_torch_or_triton(dot_file):
    code = ("import sys; from triton_backend.cli import main; main(['indexing', %r]);"
            " assert 'torch' not in sys.modules and 'triton' not in sys.modules" % dot_file)
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)
