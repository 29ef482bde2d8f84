"""``op_coverage``: the coverage table against the truth, ``compile_hlo``'s up-front rejection, and
``fusion-compile check --triton``.

For every opcode of the reference evaluator a tiny module is compiled: where the table says
the op is covered, ``compile_hlo`` must compile it and the result must match the evaluator (in
the Triton interpreter); where it says not, ``compile_hlo`` must reject it before the fusion
pass or any kernel runs, naming the op at its line:column -- and the backend itself (with the
up-front check switched off) must fail on it too, so the table never rejects what works.
"""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion.ir.element_types import ELEMENT_TYPES, element_type_of_numpy
from fusion.errors import FusionCompilerError, UnsupportedOpError
from fusion.evaluator import evaluate
from fusion.evaluator.registry import OP_RULES
from fusion.ir.layout import Layout
from fusion.evaluator.npz_io import random_inputs
from fusion.text.parser import parse_hlo
from fusion.ir.shape import ArrayShape
from tests.triton_backend.op_coverage_cases import LIMIT_CASES, LONG_SORT, opcode_case
from triton_backend import compile_hlo
from triton_backend.driver import module_compiler
from triton_backend.driver import op_coverage as oc
from triton_backend.driver.coverage_checks import fusion_template
from triton_backend.cli import main
from triton_backend.host.input_validation import (
    TORCH_DTYPES,
    tensor_from_numpy,
    tensor_to_numpy,
)
from triton_backend.host import views
from triton_backend.host.host_dtypes import OWN_DTYPE_NAMES
from triton_backend.host.output_check import compare_output


def _instruction(module, name=None, opcode=None):
    for comp in module.computations:
        for instr in comp.instructions:
            if instr.name == name or (name is None and instr.opcode == opcode):
                return instr
    raise AssertionError(f"no instruction {name or opcode}")


@pytest.fixture
def no_kernels(monkeypatch):
    """Fail if the fusion pass or any kernel compilation starts: rejection must come first."""
    import tiling.fusion_pass.priority_fusion
    import triton_backend.driver.compiled_fusion

    def forbidden(*args, **kwargs):
        raise AssertionError("compiled past the up-front coverage check")

    monkeypatch.setattr(tiling.fusion_pass.priority_fusion, "fuse_module", forbidden)
    monkeypatch.setattr(triton_backend.driver.compiled_fusion, "compile_fusion", forbidden)


def _backend_fails(monkeypatch, text: str, **options) -> FusionCompilerError:
    """The error the backend raises on its own, with the up-front check switched off."""
    monkeypatch.setattr(module_compiler, "check_triton_coverage", lambda *a, **k: None)
    with pytest.raises(FusionCompilerError) as info:
        compile_hlo(text, **options)
    return info.value


def _compile_and_compare(text: str) -> None:
    module = parse_hlo(text)
    inputs = random_inputs(module, seed=3)
    outputs = compile_hlo(text)(*[tensor_from_numpy(a, p.shape.dtype)
                                  for a, p in zip(inputs, module.entry.parameters)])
    references = evaluate(module, *inputs)
    assert len(outputs) == len(references)
    for n, (ref, out) in enumerate(zip(references, outputs)):
        actual = tensor_to_numpy(out)
        comparison = compare_output(f"o{n}", ref, actual, element_type_of_numpy(ref.dtype).name)
        assert comparison.passed, comparison.describe()


# ---- the table --------------------------------------------------------------------------------

def test_table_is_alphabetical_and_lists_every_evaluator_opcode():
    assert list(oc.COVERAGE) == sorted(oc.COVERAGE)
    assert set(OP_RULES) <= set(oc.COVERAGE)
    assert oc.COVERAGE["custom-call"].handler == oc.LIBRARY  # the library targets only
    for opcode, entry in oc.COVERAGE.items():
        assert entry.handler in (oc.HOST, oc.HOST_OR_KERNEL, oc.KERNEL, oc.ELEMENTWISE,
                                 oc.REDUCTION, oc.CONV, oc.DOT, oc.SORT, oc.SCATTER,
                                 oc.SELECT_AND_SCATTER, oc.RAGGED_DOT, oc.FUSION, oc.LIBRARY,
                                 oc.PAIRS, oc.INLINED,
                                 oc.EXPANDED,
                                 oc.NEVER)
        assert entry.covered or entry.limits, f"{opcode}: an uncovered op needs its reason"


def test_table_agrees_with_the_emitter_registries():
    from triton_backend.driver.compiled_fusion import KIND_COMPILERS, SPECIAL_FUSIONS
    from triton_backend.lowering.rules.elementwise_rules import ELEMENTWISE_RULES
    from triton_backend.host.host_ops import HOST_RULES

    templates = {kind for kind, *_ in SPECIAL_FUSIONS} | set(KIND_COMPILERS)
    for opcode, entry in oc.COVERAGE.items():
        kernel = oc.has_kernel_rule(opcode)
        if entry.handler == oc.ELEMENTWISE:
            assert opcode in ELEMENTWISE_RULES
        if entry.handler in (oc.KERNEL, oc.ELEMENTWISE, oc.REDUCTION, oc.HOST_OR_KERNEL):
            assert kernel, opcode
        if entry.handler == oc.HOST_OR_KERNEL:
            assert opcode in HOST_RULES, opcode
        if entry.handler in (oc.DOT, oc.SORT, oc.SCATTER):
            assert opcode in templates and not kernel, opcode
        if entry.handler in (oc.HOST, oc.LIBRARY):
            assert opcode in HOST_RULES, opcode
        if not entry.covered:
            assert not kernel and opcode not in HOST_RULES and opcode not in templates, opcode
    # Every elementwise rule's op is an elementwise kernel op, or also a host view.
    assert set(ELEMENTWISE_RULES) <= {o for o, e in oc.COVERAGE.items()
                                      if e.handler in (oc.ELEMENTWISE, oc.HOST_OR_KERNEL)}
    # Every host rule is a host op, a view (bitcast/reshape) or the zero-element reduce.
    assert {o for o in HOST_RULES
            if oc.COVERAGE[o].handler not in (oc.HOST, oc.HOST_OR_KERNEL, oc.LIBRARY)} == {"reduce"}


def test_every_element_type_with_values_has_a_host_dtype_that_holds_it():
    """One table (``host_dtypes``) says which torch dtype holds each type: its own dtype, of
    the type's width and kind, or a byte of the same signedness for the sub-byte integers and
    the small floats moved as their codes."""
    for name, t in ELEMENT_TYPES.items():
        if t.bits == 0:  # token, opaque: no values
            assert name not in views.HOST_TENSOR_TYPES
            continue
        assert name in views.HOST_TENSOR_TYPES, name
        dtype = TORCH_DTYPES[name]
        if name in OWN_DTYPE_NAMES:
            assert dtype.itemsize * 8 == t.bits, name
            assert dtype.is_floating_point == t.is_float and dtype.is_complex == name.startswith("c")
        else:
            assert dtype.itemsize == 1 and t.bits <= 8, name
            assert dtype.is_signed == name.startswith("s"), name


def test_op_coverage_never_imports_torch_or_triton():
    code = ("import sys\nimport triton_backend.driver.op_coverage\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'triton'))\n"
            "assert not bad, bad\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                            timeout=120, env={**os.environ})
    assert result.returncode == 0, result.stderr


_LAYOUTS = st.sampled_from([None, (1, 0), (0, 1)])


@settings(max_examples=40, deadline=None)
@given(st.sampled_from([(2, 3), (1, 6), (3, 1), (6, 1)]), _LAYOUTS,
       st.sampled_from([(6,), (3, 2), (2, 3), (6, 1)]), _LAYOUTS,
       st.sampled_from(["f32", "s32", "f16", "f8e4m3fn", "s4"]))
def test_host_view_rule_matches_host_ops(src_dims, src_layout, dst_dims, dst_layout, dtype):
    from fusion.ir.hlo_module import HloComputation, HloInstruction
    from triton_backend.host.host_ops import host_executor

    def shape(dims, layout):
        if layout is not None and len(layout) != len(dims):
            layout = tuple(reversed(range(len(dims))))
        return ArrayShape(dtype, dims, Layout(layout) if layout else None)

    source, result = shape(src_dims, src_layout), shape(dst_dims, dst_layout)
    x = HloInstruction("x", "parameter", source, (), (("parameter_number", 0),))
    for opcode in ("bitcast", "reshape"):
        instr = HloInstruction("b", opcode, result, ("x",))
        on_host = host_executor(HloComputation("c", (x, instr), "b"), instr, torch.device("cpu"))
        assert views.is_host_view(source, result) == (on_host is not None)


# ---- every evaluator opcode, compiled or rejected up front ------------------------------------

@pytest.mark.parametrize("opcode", sorted(OP_RULES))
def test_every_evaluator_opcode_compiles_or_is_rejected_up_front(opcode, monkeypatch, request):
    text = opcode_case(opcode)
    module = parse_hlo(text)
    instr = _instruction(module, opcode=opcode)
    uncovered = oc.uncovered_ops(module)
    if oc.COVERAGE[opcode].covered:
        assert uncovered == []
        _compile_and_compare(text)
        return
    assert instr.name in {u.instruction.name for u in uncovered}
    request.getfixturevalue("no_kernels")
    with pytest.raises(UnsupportedOpError) as info:
        compile_hlo(text)
    err = info.value
    first = uncovered[0].instruction
    assert (err.line, err.column) == (first.location.line, first.location.column)
    assert f"op {first.opcode} (%{first.name})" in err.message
    if first is not instr:
        assert f"{instr.location} {opcode} %{instr.name}" in err.message
    assert opcode in err.message
    monkeypatch.undo()
    # The table never rejects what the backend could do: without the check it fails too.
    assert isinstance(_backend_fails(monkeypatch, text), UnsupportedOpError)


def test_complex_ops_without_an_expansion_are_listed_with_their_locations(no_kernels):
    # complex/real run as pairs of floats (fusion.transforms.complex_expansion); a complex
    # logistic and cube root have no expansion into real parts.
    text = ("HloModule m\nENTRY e {\n  x = f32[2] parameter(0)\n  y = f32[2] parameter(1)\n"
            "  c = c64[2] complex(x, y)\n  s = c64[2] logistic(c)\n  t = c64[2] cbrt(s)\n"
            "  ROOT r = f32[2] real(t)\n}\n")
    with pytest.raises(UnsupportedOpError) as info:
        compile_hlo(text)
    assert (info.value.line, info.value.column) == (6, 3)
    assert "2 ops are not covered" in info.value.message
    assert "6:3 logistic %s in computation e" in info.value.message
    assert "7:3 cbrt %t in computation e" in info.value.message


# ---- limits of covered ops --------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(LIMIT_CASES))
def test_limits_are_rejected_up_front_and_are_real(name, monkeypatch, request):
    text, instr_name, fragment = LIMIT_CASES[name]
    module = parse_hlo(text)
    instr = _instruction(module, name=instr_name)
    uncovered = oc.uncovered_ops(module)
    assert uncovered and uncovered[0].instruction.name == instr_name
    assert fragment in uncovered[0].reason
    request.getfixturevalue("no_kernels")
    with pytest.raises(UnsupportedOpError) as info:
        compile_hlo(text, fuse=False)
    assert (info.value.line, info.value.column) == (instr.location.line, instr.location.column)
    assert instr.opcode in info.value.message and fragment in info.value.message
    monkeypatch.undo()
    assert isinstance(_backend_fails(monkeypatch, text, fuse=False), UnsupportedOpError)


def test_an_op_the_fusion_pass_removes_is_not_rejected():
    # Canonicalization drops the reducer's copy, so the fused compile never meets it.
    text = LIMIT_CASES["reducer_with_a_copy"][0]
    assert oc.uncovered_ops(parse_hlo(text))
    _compile_and_compare(text)


def test_sorts_at_and_past_the_tile_limit_are_covered():
    # At the limit, one tile (not compiled here: a 4,096-lane tl.sort takes seconds in the
    # interpreter); past it, one library sort.
    assert oc.uncovered_ops(parse_hlo(LONG_SORT.replace("4097", "4096"))) == []
    assert oc.uncovered_ops(parse_hlo(LONG_SORT)) == []
    _compile_and_compare(LONG_SORT)


def test_covered_template_ops_pass_their_planners():
    s8_dot = ("HloModule m\nENTRY e {\n  x = s8[2,3] parameter(0)\n  y = s8[3,4] parameter(1)\n"
              "  ROOT r = s32[2,4] dot(x, y), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n")
    assert oc.uncovered_ops(parse_hlo(s8_dot)) == []
    _compile_and_compare(s8_dot)
    s32_conv = ("HloModule m\nENTRY e {\n  x = s32[1,4,2] parameter(0)\n  w = s32[2,2,2] parameter(1)\n"
                "  ROOT r = s32[1,3,2] convolution(x, w), window={size=2}, dim_labels=b0f_0io->b0f\n}\n")
    assert oc.uncovered_ops(parse_hlo(s32_conv)) == []
    _compile_and_compare(s32_conv)
    by_magnitude = ("HloModule m\nbyabs {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
                    "  x = f32[] abs(a)\n  y = f32[] abs(b)\n  ROOT c = pred[] compare(x, y), "
                    "direction=LT\n}\nENTRY e {\n  x = f32[8] parameter(0)\n"
                    "  ROOT r = f32[8] sort(x), dimensions={0}, to_apply=byabs\n}\n")
    assert oc.uncovered_ops(parse_hlo(by_magnitude)) == []
    _compile_and_compare(by_magnitude)
    s32_dot = s8_dot.replace("s8[", "s32[")  # summed on the CUDA cores, not tl.dot
    assert oc.uncovered_ops(parse_hlo(s32_dot)) == []
    _compile_and_compare(s32_dot)


def test_xla_fusion_of_unsupported_kind_is_rejected(no_kernels):
    text = ("HloModule m\nfused {\n  a = f32[4] parameter(0)\n  ROOT n = f32[4] negate(a)\n}\n"
            "ENTRY e {\n  x = f32[4] parameter(0)\n  ROOT r = f32[4] fusion(x), kind=kCustom, "
            "calls=fused, backend_config={\"fusion_backend_config\":{\"kind\":\"__cudnn$fusion\"}}\n}\n")
    module = parse_hlo(text)
    template, reason = fusion_template(module, module.entry.root)
    assert template is None and reason and "cudnn" in reason
    with pytest.raises(UnsupportedOpError) as info:
        compile_hlo(text)
    assert (info.value.line, info.value.column) == (8, 3)


def test_corpus_programs_that_compile_are_fully_covered():
    hlo = pathlib.Path(__file__).parents[1] / "data" / "hlo"
    for stem in ("softmax", "gelu", "fori_loop", "cond", "gather", "reductions", "sort", "scatter",
                 "matmul", "cumsum", "max_pool"):
        for phase in ("before", "after"):
            module = parse_hlo((hlo / f"{stem}.{phase}.hlo").read_text())
            assert oc.uncovered_ops(module) == [], (stem, phase)


# ---- fusion-compile check --triton ------------------------------------------------------------

UNCOVERED = """HloModule m
body_add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
calls_add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] call(a, b), to_apply=body_add
}
ENTRY e {
  x = f32[2,3] parameter(0)
  p = f32[2,3] custom-call(x), custom_call_target="foo"
  m = f32[2,3] map(p, x), dimensions={0,1}, to_apply=calls_add
  ROOT n = f32[2,3] negate(m)
}
"""


@pytest.fixture
def uncovered_file(tmp_path):
    path = tmp_path / "uncovered.hlo"
    path.write_text(UNCOVERED)
    return path


def test_check_triton_text_lists_uncovered_ops(uncovered_file, capsys):
    assert main(["check", "--triton", str(uncovered_file)]) == 0
    out = capsys.readouterr().out
    assert "triton: 2 op(s) not covered:" in out
    assert "14:3 custom-call %p in computation e: custom-call target foo is not a library call" in out
    assert "15:3 map %m in computation e: map's to_apply calls_add is more than scalar" in out


def test_a_python_callback_is_named_as_one(tmp_path, capsys):
    # What jax.debug.print inside jit lowers to: the function is not in the text.
    path = tmp_path / "debug_print.hlo"
    path.write_text(UNCOVERED.replace('custom_call_target="foo"',
                                      'custom_call_target="xla_ffi_python_cpu_callback", '
                                      'custom_call_has_side_effect=true'))
    assert main(["check", "--triton", str(path)]) == 0
    out = capsys.readouterr().out
    assert ("14:3 custom-call %p in computation e: custom-call target "
            "xla_ffi_python_cpu_callback is a Python callback (jax.debug.print") in out


def test_check_triton_json_lists_uncovered_ops(uncovered_file, capsys):
    assert main(["check", "--triton", "--json", str(uncovered_file)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] is True
    assert [(u["op"], u["instruction"], u["line"], u["column"]) for u in report["triton_uncovered"]] \
        == [("custom-call", "p", 14, 3), ("map", "m", 15, 3)]
    assert all(u["reason"] for u in report["triton_uncovered"])


def test_check_triton_on_a_covered_module(tmp_path, capsys):
    path = tmp_path / "ok.hlo"
    path.write_text(opcode_case("sort"))
    assert main(["check", "--triton", str(path)]) == 0
    assert "triton: every op is covered" in capsys.readouterr().out
    assert main(["check", "--triton", "--json", str(path)]) == 0
    assert json.loads(capsys.readouterr().out)["triton_uncovered"] == []
    assert main(["check", "--json", str(path)]) == 0
    assert "triton_uncovered" not in json.loads(capsys.readouterr().out)


def test_check_triton_never_imports_torch_or_triton(uncovered_file):
    # Fused modules and lone dot/sort/scatter ops reach the templates' planners too.
    hlo = pathlib.Path(__file__).parents[1] / "data" / "hlo"
    files = [str(uncovered_file)] + [str(hlo / f) for f in (
        "matmul.after.hlo", "sort.after.hlo", "scatter.after.hlo", "sort.before.hlo",
        "matmul.before.hlo", "scatter.before.hlo")]
    code = ("import sys\nfrom triton_backend.cli import main\n"
            f"for f in {files!r}:\n    assert main(['check', '--triton', f]) == 0\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'triton'))\n"
            "assert not bad, bad\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False,
                            timeout=120, env={**os.environ})
    assert result.returncode == 0, result.stderr
