"""``fusion-compile fuse``: output parses back and evaluates the same; -o; --explain; errors."""
from __future__ import annotations

import pathlib
import subprocess
import sys

import numpy as np

from fusion.evaluator import evaluate
from fusion.evaluator.npz_io import random_inputs
from fusion.text.parser import parse_hlo
from fusion.shapes.verifier import verify_module
from triton_backend.cli import main

HLO = pathlib.Path(__file__).parents[1] / "data" / "hlo"


def test_fuse_prints_a_module_that_evaluates_the_same(capsys):
    assert main(["fuse", str(HLO / "layernorm.before.hlo")]) == 0
    captured = capsys.readouterr()
    fused = parse_hlo(captured.out)
    verify_module(fused)
    original = parse_hlo((HLO / "layernorm.before.hlo").read_text())
    inputs = random_inputs(original)
    for a, b in zip(evaluate(original, *inputs), evaluate(fused, *inputs)):
        assert np.array_equal(a.view(np.uint8), b.view(np.uint8))
    assert len(fused.fusions()) == 1  # a block holds whole rows: one kernel, both reductions
    assert captured.err == ""


def test_fuse_output_file_and_explain(tmp_path, capsys):
    out = tmp_path / "softmax.fused.hlo"
    assert main(["fuse", str(HLO / "softmax.before.hlo"), "--explain", "-o", str(out)]) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(parse_hlo(out.read_text()).fusions()) == 1
    assert "keep exp.1" in captured.err and "expensive" in captured.err
    assert "fuse reduce_max.7 -> exp.1 [tiled]: modeled memory cost" in captured.err
    assert "kernels: 11 unfused -> 1 fused" in captured.err


def test_fuse_bad_input_is_a_located_error(tmp_path, capsys):
    bad = tmp_path / "bad.hlo"
    bad.write_text("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n  ROOT n = f32[2] nope(p)\n}\n")
    assert main(["fuse", str(bad)]) == 1
    err = capsys.readouterr().err
    assert f"{bad}:4:3: error: unsupported op 'nope'" in err  # FILE:LINE:COL, then a caret
    assert err.splitlines()[1:3] == ["  ROOT n = f32[2] nope(p)", "  ^"]
    assert main(["fuse", str(tmp_path / "missing.hlo")]) == 1
    assert "no such file" in capsys.readouterr().err


def test_fuse_does_not_import_torch_or_triton():
    code = ("import sys; from triton_backend.cli import main; "
            f"main(['fuse', {str(HLO / 'gelu.before.hlo')!r}]); "
            "assert 'torch' not in sys.modules and 'triton' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)


def test_fuse_starts_from_the_plain_ops_compile_runs(tmp_path, capsys):
    """A decoding step's MXFP8 matmul: ``scaled-dot`` is written as its dequantization and
    dot, which fuse into one kernel, as ``compile`` builds it; as written it is one op."""
    text = ("HloModule m\nENTRY e {\n  a = f8e4m3fn[16,256] parameter(0)\n"
            "  b = f8e4m3fn[512,256] parameter(1)\n  sa = f8e8m0fnu[16,8] parameter(2)\n"
            "  sb = f8e8m0fnu[512,8] parameter(3)\n  ROOT d = bf16[16,512] scaled-dot(a, b, sa, "
            "sb), lhs_contracting_dims={1}, rhs_contracting_dims={1}\n}\n")
    path = tmp_path / "mx.hlo"
    path.write_text(text)
    assert main(["fuse", str(path)]) == 0
    fused = parse_hlo(capsys.readouterr().out)
    assert len(fused.fusions()) == 1 and "scaled-dot" not in {
        i.opcode for c in fused.computations for i in c}
    inputs = random_inputs(parse_hlo(text))
    np.testing.assert_array_equal(evaluate(parse_hlo(text), *inputs)[0].astype(np.float32),
                                  evaluate(fused, *inputs)[0].astype(np.float32))
    assert main(["fuse", str(path), "--no-canonicalize"]) == 0
    assert "scaled-dot(" in capsys.readouterr().out
