"""Plain dot fusions as one library call, XLA:GPU's first path (issue 26).

``compile_hlo(dot_library=...)`` runs a dot fusion with nothing fused (parameters -> one dot)
as ``torch.einsum`` (``templates.dot.library_call``): with ``"always"`` on the CPU too, where
it must match the reference evaluator like the Triton dot template and compile no kernel;
dots with a prologue, an epilogue or mixed types stay Triton kernels, as do all dots with
``"never"`` and (under the interpreter) ``"auto"``.
"""
from __future__ import annotations

import json

import pytest

from fusion.errors import BadArgumentError
from fusion.text.parser import parse_hlo
from tests.triton_backend.dot_fusion_helpers import (
    assert_close, fused_module, random_inputs, reference, to_numpy, to_torch,
)
from triton_backend.driver import compiled_fusion
from triton_backend.driver.module_compiler import compile_hlo
from triton_backend.reports.compile_report import build_report
from triton_backend.reports.report_text import render_text
from triton_backend.runtime import module_cache
from triton_backend.runtime.kernel_loading import CompiledFusion
from triton_backend.templates.dot.library_call import (
    MIN_LIBRARY_DIM, LibraryDot, library_dot_reason, plain_dot_sizes,
)

#: name -> (fused body, ENTRY parameter shapes, result shape, K).
PLAIN = {
    "2d_f32": ("""  p0 = f32[16,32] parameter(0)
  p1 = f32[32,24] parameter(1)
  ROOT d = f32[16,24] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}""",
               ["f32[16,32]", "f32[32,24]"], "f32[16,24]", 32),
    "batched_bf16": ("""  p0 = bf16[3,16,32] parameter(0)
  p1 = bf16[3,32,8] parameter(1)
  ROOT d = bf16[3,16,8] dot(p0, p1), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}""",
                     ["bf16[3,16,32]", "bf16[3,32,8]"], "bf16[3,16,8]", 32),
    "transposed_f16": ("""  p0 = f16[32,16] parameter(0)
  p1 = f16[24,32] parameter(1)
  ROOT d = f16[16,24] dot(p0, p1), lhs_contracting_dims={0}, rhs_contracting_dims={1}""",
                       ["f16[32,16]", "f16[24,32]"], "f16[16,24]", 32),
    "inner_batch_two_k_f32": ("""  p0 = f32[8,2,4,6] parameter(0)
  p1 = f32[6,2,4,5] parameter(1)
  ROOT d = f32[2,8,5] dot(p0, p1), lhs_batch_dims={1}, rhs_batch_dims={1}, lhs_contracting_dims={2,3}, rhs_contracting_dims={2,0}""",
                              ["f32[8,2,4,6]", "f32[6,2,4,5]"], "f32[2,8,5]", 24),
    "layouts_bf16": ("""  p0 = bf16[16,32]{0,1} parameter(0)
  p1 = bf16[32,24] parameter(1)
  ROOT d = bf16[16,24]{0,1} dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}""",
                     ["bf16[16,32]{0,1}", "bf16[32,24]"], "bf16[16,24]{0,1}", 32),
    "same_operand_twice_f32": ("""  p0 = f32[16,32] parameter(0)
  ROOT d = f32[16,16] dot(p0, p0), lhs_contracting_dims={1}, rhs_contracting_dims={1}""",
                               ["f32[16,32]"], "f32[16,16]", 32),
}

#: Dot fusions with something fused or mixed types: never plain.
NOT_PLAIN = {
    "bias_epilogue": ("""  p0 = f32[16,32] parameter(0)
  p1 = f32[32,24] parameter(1)
  p2 = f32[24] parameter(2)
  d = f32[16,24] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  b = f32[16,24] broadcast(p2), dimensions={1}
  ROOT s = f32[16,24] add(d, b)""", ["f32[16,32]", "f32[32,24]", "f32[24]"], "f32[16,24]"),
    "convert_prologue": ("""  p0 = f32[16,32] parameter(0)
  p1 = bf16[32,24] parameter(1)
  c = bf16[16,32] convert(p0)
  ROOT d = bf16[16,24] dot(c, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}""",
                         ["f32[16,32]", "bf16[32,24]"], "bf16[16,24]"),
    "mixed_types": ("""  p0 = bf16[16,32] parameter(0)
  p1 = bf16[32,24] parameter(1)
  ROOT d = f32[16,24] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}""",
                    ["bf16[16,32]", "bf16[32,24]"], "f32[16,24]"),
    "algorithm": ("""  p0 = f32[16,32] parameter(0)
  p1 = f32[32,24] parameter(1)
  ROOT d = f32[16,24] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}, algorithm=dot_tf32_tf32_f32""",
                  ["f32[16,32]", "f32[32,24]"], "f32[16,24]"),
}


def _module(case):
    body, shapes, root = case[:3]
    return fused_module(body, [(f"x{i}", s) for i, s in enumerate(shapes)], root)


@pytest.fixture
def no_kernels(monkeypatch):
    """Any kernel compiled from here on is a test failure."""
    def refuse(*args, **kwargs):
        raise AssertionError("a kernel was compiled for a library dot")

    monkeypatch.setattr(compiled_fusion, "compile_fusion", refuse)


@pytest.mark.parametrize("name", sorted(PLAIN))
def test_plain_dots_run_as_one_library_call_and_match_the_evaluator(name, no_kernels):
    module = _module(PLAIN[name])
    compiled = compile_hlo(module, dot_library="always", cache=False)
    call = compiled.fusions["r"]
    assert isinstance(call, LibraryDot) and call.kernel_path is None
    arrays = random_inputs(module, seed=3)
    got = compiled(*map(to_torch, arrays))[0]
    (want,) = reference(module, arrays)
    assert_close(to_numpy(got), want, PLAIN[name][3])


@pytest.mark.parametrize("name", sorted(NOT_PLAIN))
def test_fused_or_mixed_dots_stay_triton_kernels(name):
    module = _module(NOT_PLAIN[name])
    assert plain_dot_sizes(module, module.entry.root) is None
    compiled = compile_hlo(module, dot_library="always", cache=False)
    assert type(compiled.fusions["r"]) is CompiledFusion
    arrays = random_inputs(module, seed=4)
    got = compiled(*map(to_torch, arrays))[0]
    (want,) = reference(module, arrays)
    if name == "algorithm":  # TF32 products: the evaluator's bound, not f32's
        assert abs(to_numpy(got) - want).max() < 5e-2
    else:
        assert_close(to_numpy(got), want, 32)


@pytest.mark.parametrize("option", ["never", "auto"])
def test_never_and_auto_under_the_interpreter_keep_the_kernel(option):
    module = _module(PLAIN["2d_f32"])
    compiled = compile_hlo(module, dot_library=option, cache=False)
    assert type(compiled.fusions["r"]) is CompiledFusion
    arrays = random_inputs(module)
    assert_close(to_numpy(compiled(*map(to_torch, arrays))[0]), reference(module, arrays)[0], 32)


def test_auto_rule_needs_a_gpu_and_tensor_core_sized_dims():
    big = MIN_LIBRARY_DIM
    body = (f"  p0 = bf16[{big},{big}] parameter(0)\n  p1 = bf16[{big},{2 * big}] parameter(1)\n"
            f"  ROOT d = bf16[{big},{2 * big}] dot(p0, p1), lhs_contracting_dims={{1}}, "
            "rhs_contracting_dims={0}")
    module = fused_module(body, [("a", f"bf16[{big},{big}]"), ("b", f"bf16[{big},{2 * big}]")],
                          f"bf16[{big},{2 * big}]")
    root = module.entry.root
    assert plain_dot_sizes(module, root) == (big, 2 * big, big)
    assert "M, N, K = 128, 256, 128" in library_dot_reason(module, root, "auto", on_gpu=True)
    assert library_dot_reason(module, root, "auto", on_gpu=False) is None
    assert library_dot_reason(module, root, "auto", on_gpu=True, explicit_tiling=True) is None
    assert library_dot_reason(module, root, "never", on_gpu=True) is None
    small = _module(PLAIN["2d_f32"])
    assert library_dot_reason(small, small.entry.root, "auto", on_gpu=True) is None
    f32 = fused_module(body.replace("bf16", "f32"),
                       [("a", f"f32[{big},{big}]"), ("b", f"f32[{big},{2 * big}]")],
                       f"f32[{big},{2 * big}]")
    # f32 stays Triton under "auto": torch's matmul would follow the process-wide TF32 flags.
    assert library_dot_reason(f32, f32.entry.root, "auto", on_gpu=True) is None
    assert library_dot_reason(f32, f32.entry.root, "always", on_gpu=True) is not None
    assert library_dot_reason(small, small.entry.root, "always", on_gpu=False) is not None


def test_report_names_the_library_call_and_why():
    compiled = compile_hlo(_module(PLAIN["batched_bf16"]), dot_library="always", cache=False)
    report = build_report(compiled, device=None)
    assert report.fusions == ()
    (call,) = report.library_calls
    assert (call.name, call.opcode, call.target, call.torch_call) == (
        "r", "dot", "torch CPU matmul", "torch.matmul ('abc,acd->abd')")
    assert "dot_library='always'" in call.reason
    data = report.to_json()
    assert data["summary"]["library_calls"] == 1 and data["summary"]["kernels"] == 0
    text = render_text(report)
    assert "library call r (computation e): gemm (torch CPU matmul) via torch.matmul" in text
    assert "why:      a plain dot (nothing fused)" in text


def test_library_dot_beside_kernels_in_one_module():
    text = """HloModule m
ENTRY e {
  a = f32[8,16] parameter(0)
  b = f32[16,4] parameter(1)
  n = f32[8,16] negate(a)
  d = f32[8,4] dot(n, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT e = f32[8,4] negate(d)
}"""
    module = parse_hlo(text)
    compiled = compile_hlo(text, dot_library="always", fuse=False, cache=False)
    kinds = {name: type(f).__name__ for name, f in compiled.fusions.items()}
    assert sorted(kinds.values()) == ["CompiledFusion", "CompiledFusion", "LibraryDot"]
    arrays = random_inputs(module, seed=5)
    got = compiled(*map(to_torch, arrays))[0]
    assert_close(to_numpy(got), reference(module, arrays)[0], 16)


def test_the_option_keys_the_module_cache_and_a_plan_makes_the_library_dot_again(
        tmp_path, monkeypatch):
    monkeypatch.setenv(module_cache.CACHE_DIR_ENV, str(tmp_path))
    module_cache.forget_remembered()
    module = _module(PLAIN["2d_f32"])
    assert type(compile_hlo(module, dot_library="never").fusions["r"]) is CompiledFusion
    assert len(list(tmp_path.glob("*/*.json"))) == 1
    cold = compile_hlo(module, dot_library="always")
    assert isinstance(cold.fusions["r"], LibraryDot)
    assert len(list(tmp_path.glob("*/*.json"))) == 2  # a plan of its own
    assert type(compile_hlo(module, dot_library="never").fusions["r"]) is CompiledFusion
    module_cache.forget_remembered()
    monkeypatch.setattr(compiled_fusion, "compile_fusion", _refuse_compiling)
    warm = compile_hlo(module, dot_library="always")  # from its plan: no kernel, no codegen
    assert warm is not cold and warm.fusions["r"] == cold.fusions["r"]
    arrays = random_inputs(module, seed=4)
    got = warm(*map(to_torch, arrays))[0]
    assert_close(to_numpy(got), reference(module, arrays)[0], PLAIN["2d_f32"][3])


def _refuse_compiling(*args, **kwargs):
    raise AssertionError("a warm compile compiled a fusion")


@pytest.mark.parametrize("value", ["sometimes", None, True])
def test_bad_option_is_a_bad_argument(value):
    with pytest.raises(BadArgumentError, match="dot_library.*'auto', 'never', 'always'"):
        compile_hlo(_module(PLAIN["2d_f32"]), dot_library=value)


def test_compile_command_reports_the_library_call(tmp_path, monkeypatch, capsys):
    from fusion.text.printer import print_hlo
    from triton_backend.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "dot.hlo").write_text(print_hlo(_module(PLAIN["2d_f32"])))
    assert main(["compile", "dot.hlo", "-o", "out", "--dot-library", "always"]) == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["fusions"] == [] and report["summary"]["kernels"] == 0
    (call,) = report["library_calls"]
    assert (call["name"], call["torch_call"]) == ("r", "torch.matmul ('ab,bc->ac')")
    assert "plain dot" in call["reason"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["report.json", "report.txt"]
    assert "why:      a plain dot" in (tmp_path / "out" / "report.txt").read_text()


def test_the_torch_op_takes_the_option_for_forward_and_backward():
    import torch

    from triton_backend import torch_op

    text = """HloModule libdot_op
ENTRY e {
  a = f32[16,32] parameter(0)
  b = f32[32,24] parameter(1)
  ROOT d = f32[16,24] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}"""
    op = torch_op(text, name="test_library_dot_op", dot_library="always")
    assert any(isinstance(f, LibraryDot) for f in op.compiled.fusions.values())
    a = torch.randn(16, 32, requires_grad=True)
    b = torch.randn(32, 24)
    out = op(a, b)
    assert torch.allclose(out, a.detach() @ b, rtol=1e-5, atol=1e-5)
    out.sum().backward()
    assert torch.allclose(a.grad, torch.ones(16, 24) @ b.t(), rtol=1e-5, atol=1e-5)
    with pytest.raises(BadArgumentError, match="dot_library"):
        torch_op(text, name="test_library_dot_op_bad", dot_library="sometimes")
