"""``fusion-compile layout``: output checked against the layout math's independent truths."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from triton_backend.cli import main


def run_cli(capsys, *argv):
    code = main(["layout", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_json_for_the_issue_example(capsys):
    code, out, _ = run_cli(capsys, "bf16[37,300]{1,0:T(8,128)(2,1)}", "--index", "3,5", "--json")
    assert code == 0
    r = json.loads(out)
    assert set(r) == {"schema_version", "command", "error", "shape", "physical_shape",
                      "padded_elements", "bytes", "map", "index", "offset", "word", "bit"}
    assert r["shape"] == "bf16[37,300]{1,0:T(8,128)(2,1)}"
    assert r["physical_shape"] == [5, 3, 4, 128, 2, 1]
    assert r["padded_elements"] == 40 * 384
    assert r["bytes"] == 40 * 384 * 2
    # Row 3 is the odd half of the row pair (2, 3) in the first 8x128 tile; column 5.
    assert r["index"] == [3, 5]
    assert r["offset"] == 1 * 256 + 5 * 2 + 1
    assert (r["word"], r["bit"]) == (133, 16)
    assert r["map"].startswith("(d0, d1) -> (")


def test_seed_figure1_text_output(capsys):
    code, out, _ = run_cli(capsys, "f32[3,5]{1,0:T(2,2)}", "--index", "2,3")
    assert code == 0
    lines = dict(line.split(":", 1) for line in out.splitlines())
    assert lines["offset"].strip() == "17"
    assert lines["physical shape"].strip() == "[2,3,2,2]"
    assert lines["padded elements"].strip() == "24"
    assert lines["bytes"].strip() == "96"
    assert lines["word"].strip() == "17" and lines["bit"].strip() == "0"


def test_pred_bits_and_default_layout(capsys):
    code, out, _ = run_cli(capsys, "pred[37,300]{1,0:T(32,128)(32,1)}", "--index", "5,1", "--json")
    r = json.loads(out)
    # Row 5 of column 1 in the first tile: offset 1 * 32 + 5, bit 5 of word 1.
    assert (r["offset"], r["word"], r["bit"]) == (37, 1, 5)
    assert r["bytes"] == 64 * 384 // 8
    code, out, _ = run_cli(capsys, "f32[3,5]", "--json")
    r = json.loads(out)
    assert r["shape"] == "f32[3,5]{1,0}" and r["offset"] is None and r["padded_elements"] == 15


@pytest.mark.parametrize(
    "argv, message",
    [
        (["f32[3,5]{1,0:T(0,2)}"], "tile dims must be positive"),
        (["f32[3,5]{1,0:T(2,-2)}"], ""),
        (["f32[3,5]{1}"], "has 1 entries but the shape has rank 2"),
        (["f32[3,5]{1,1}"], "not a permutation"),
        (["f32[3,5]{1,0}", "--index", "3,0"], "outside [0, 2]"),
        (["f32[3,5]{1,0}", "--index", "1"], "has 1 entries"),
        (["f32[3,5]{1,0}", "--index", "a,b"], "not a comma-separated list"),
        (["(f32[3], s32[])"], "tuple shape"),
        (["f32[3,5"], ""),
    ],
)
def test_invalid_input_exits_nonzero_with_a_clear_error(capsys, argv, message):
    code, out, err = run_cli(capsys, *argv)
    assert code == 1 and out == ""
    assert err.startswith("fusion-compile layout: error:")
    assert message in err
    assert "Traceback" not in err


def test_layout_command_never_imports_torch_or_triton():
    code = (
        "import sys; from triton_backend.cli import main;"
        "main(['layout', 'bf16[37,300]{1,0:T(8,128)(2,1)}', '--index', '3,5']);"
        "assert 'torch' not in sys.modules and 'triton' not in sys.modules, 'imported'"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "offset:          267" in done.stdout
