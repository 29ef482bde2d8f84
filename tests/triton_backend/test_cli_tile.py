"""``fusion-compile tile``: text and JSON reports, single-op wrapping, errors, no torch."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from triton_backend.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _run(capsys, *argv):
    code = main(["tile", *argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_json_report_for_gelu(capsys):
    code, out, _ = _run(capsys, str(ROOT / "examples/gelu.hlo"), "--json")
    assert code == 0
    (fusion,) = json.loads(out)["fusions"]
    assert fusion["name"] == "fusion" and fusion["kind"] == "loop"
    assert fusion["hero"] == "multiply_0"
    assert fusion["legal_tilings"] > 0 and fusion["xla_tiling"] is None
    d = fusion["default"]
    assert d["tile_sizes"][-1] >= 128
    # bf16[6,512,4096] read once and written once
    assert d["bytes_read"] == d["bytes_written"] == 6 * 512 * 4096 * 2
    assert d["num_blocks"] * d["tile_sizes"][-1] == 6 * 512 * 4096
    assert all({"tile_sizes", "reason"} <= set(r) for r in fusion["rejected"])


def test_text_report_with_tile_prints_the_graph(capsys):
    code, out, _ = _run(capsys, str(ROOT / "tests/data/hlo/softmax.after.hlo"),
                        "--fusion", "subtract_exponential_fusion", "--tile", "2,8")
    assert code == 0
    assert "kind: loop; hero: exp.0" in out and "partition:" in out
    assert "default: (4, 8)" in out and "rejected:" in out
    assert ("exp.0 = exponential(sub.0) tile_sizes=(2, 8) tile_strides=(1, 1) "
            "tile_offsets_indexing=(d0, d1) -> (d0 * 2, d1 * 8), "
            "domain: d0 in [0, 1], d1 in [0, 0]") in out


def test_unfused_module_is_tiled_as_single_op_fusions(capsys):
    code, out, _ = _run(capsys, str(ROOT / "tests/data/hlo/softmax.before.hlo"), "--json")
    assert code == 0
    fusions = json.loads(out)["fusions"]
    assert fusions and all(f["single_op"] for f in fusions)
    assert "reduction" in {f["kind"] for f in fusions}
    code, out, _ = _run(capsys, str(ROOT / "tests/data/hlo/softmax.before.hlo"))
    assert "has no fusions" in out


@pytest.mark.parametrize("argv, fragment", [
    (["--fusion", "fusoin"], "no fusion named 'fusoin' in module 'm'; did you mean fusion?"),
    (["--tile", "1,x"], "--tile expects"),
])
def test_bad_arguments_are_usage_errors(capsys, argv, fragment):
    code, _, err = _run(capsys, str(ROOT / "examples/gelu.hlo"), *argv)
    assert code == 2 and fragment in err


def test_illegal_tile_is_refused_as_run_refuses_it(capsys):
    # The one legality rule (tiling.policy.choice.check_requested_tiling), as run --tile uses
    # it: the same message, located at the fusion, exit status 1.
    code, out, err = _run(capsys, str(ROOT / "examples/gelu.hlo"), "--tile", "1,128")
    assert code == 1 and out == ""
    assert "gelu.hlo:26:3: error: fusion fusion: tile sizes [1, 128] are illegal: 2 tile sizes " \
        "for an output of rank 3" in err
    code, _, err = _run(capsys, str(ROOT / "examples/gelu.hlo"), "--tile", "1,1,8192")
    assert code == 1 and "are illegal: tile size 8192 of dim 2 is outside [1, 4096]" in err


def test_tile_verifies_the_module_first(capsys, tmp_path):
    bad = tmp_path / "bad.hlo"
    bad.write_text("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n"
                   "  ROOT n = s32[2] negate(p)\n}\n")
    code, out, err = _run(capsys, str(bad))
    assert code == 1 and out == "" and f"{bad}:4:3: error: declared shape s32[2]" in err


def test_tile_command_imports_neither_torch_nor_triton():
    code = ("import sys; from triton_backend.cli import main; "
            f"main(['tile', {str(ROOT / 'examples/gelu.hlo')!r}, '--json']); "
            "assert 'torch' not in sys.modules and 'triton' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, cwd=ROOT)
