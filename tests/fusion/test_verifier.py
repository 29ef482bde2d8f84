"""The verifier's structural checks, on inline HLO and on the JAX-generated corpus."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion.errors import HloVerifyError
from fusion.evaluator import evaluate
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.text.parser import parse_hlo
from fusion.ir.shape import ArrayShape, TupleShape
from fusion.shapes.verifier import MAX_CALL_DEPTH, verify_module

CORPUS = sorted((pathlib.Path(__file__).parents[1] / "data" / "hlo").glob("*.hlo"))
ROOT_DIR = pathlib.Path(__file__).parents[2]


def verify(text: str) -> None:
    verify_module(parse_hlo(text))


def error_of(text: str) -> HloVerifyError:
    with pytest.raises(HloVerifyError) as info:
        verify(text)
    return info.value


ADD = "add { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }\n"


@pytest.mark.parametrize("path", CORPUS, ids=[p.name for p in CORPUS])
def test_corpus_modules_are_valid(path):
    verify(path.read_text())


def test_missing_operand_names_it_the_instruction_and_position():
    err = error_of("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n"
                   "  ROOT n = f32[2] add(p, q)\n}")
    assert (err.line, err.column) == (4, 3)
    assert "operand 'q' of instruction 'n' does not exist" in str(err)
    assert str(err).startswith("4:3: ")


def test_instruction_names_are_scoped_per_computation():
    # As in XLA's parser: the seed's GELU reproducer reuses `param` in both computations.
    module = parse_hlo("HloModule m\nf { x = f32[] parameter(0)  ROOT y = f32[] negate(x) }\n"
                       "ENTRY e {\n  x = f32[] parameter(0)\n  ROOT c = f32[] call(x), to_apply=f\n}")
    verify_module(module)
    verify_module(parse_hlo((ROOT_DIR / "examples" / "gelu.hlo").read_text()))


def test_duplicate_names_in_a_built_module():
    i = HloInstruction("a", "parameter", ArrayShape("f32", ()), (), (("parameter_number", 0),))
    comp = HloComputation("e", (i, i.replace(opcode="negate", operands=("a",),
                                              attributes=())), "a", True)
    with pytest.raises(HloVerifyError, match="duplicate instruction name 'a'"):
        verify_module(HloModule("m", (comp,), "e"))


def test_cycle_is_detected_and_named():
    err = error_of("HloModule m\nENTRY e {\n  p = f32[] parameter(0)\n  a = f32[] add(p, b)\n"
                   "  b = f32[] negate(a)\n  ROOT r = f32[] copy(b)\n}")
    assert "is on a cycle" in err.message
    assert err.where in ("a", "b")
    assert "a -> b -> a" in err.message or "b -> a -> b" in err.message


def test_self_loop_is_a_cycle():
    err = error_of("HloModule m\nENTRY e {\n  ROOT a = f32[] negate(a)\n}")
    assert "instruction 'a' is on a cycle: a -> a" in err.message


def test_called_computation_must_exist():
    err = error_of("HloModule m\nENTRY e {\n  p = f32[2] parameter(0)\n"
                   "  ROOT f = f32[2] fusion(p), kind=kLoop, calls=nowhere\n}")
    assert "called computation 'nowhere'" in err.message and "does not exist" in err.message
    assert (err.line, err.column) == (4, 3)


def test_recursive_computations_are_rejected():
    err = error_of("HloModule m\nf { x = f32[] parameter(0)  ROOT y = f32[] call(x), to_apply=f }\n"
                   "ENTRY e { p = f32[] parameter(0)  ROOT c = f32[] call(p), to_apply=f }")
    assert "recursively: f -> f" in err.message


@pytest.mark.parametrize("numbers,message", [
    ((0, 0), "parameter number 0 is used twice"),
    ((0, 2), "parameter 1 is missing"),
    ((1,), "parameter 0 is missing"),
])
def test_parameter_numbers_must_be_unique_and_contiguous(numbers, message):
    params = "\n".join(f"  p{k} = f32[] parameter({n})" for k, n in enumerate(numbers))
    err = error_of(f"HloModule m\nENTRY e {{\n{params}\n  ROOT t = f32[] copy(p0)\n}}")
    assert message in err.message and err.line is not None


def test_fusion_parameters_must_match_the_operands():
    err = error_of("HloModule m\nf { x = f32[3] parameter(0)  ROOT y = f32[3] negate(x) }\n"
                   "ENTRY e {\n  p = f32[2] parameter(0)\n"
                   "  ROOT r = f32[3] fusion(p), kind=kLoop, calls=f\n}")
    assert "parameter 0 of fused computation 'f' is f32[3], but fusion passes f32[2]" in err.message


def test_fusion_kind_must_be_valid():
    err = error_of("HloModule m\nf { x = f32[] parameter(0)  ROOT y = f32[] negate(x) }\n"
                   "ENTRY e {\n  p = f32[] parameter(0)\n"
                   "  ROOT r = f32[] fusion(p), kind=kBogus, calls=f\n}")
    assert "invalid kind 'kBogus'" in err.message and "kLoop" in err.expected


def test_computation_without_root_in_a_built_module():
    i = HloInstruction("a", "parameter", ArrayShape("f32", ()), (), (("parameter_number", 0),))
    with pytest.raises(HloVerifyError, match="has no ROOT"):
        verify_module(HloModule("m", (HloComputation("e", (i,), "", True),), "e"))


def test_missing_entry_computation():
    i = HloInstruction("a", "parameter", ArrayShape("f32", ()), (), (("parameter_number", 0),))
    with pytest.raises(HloVerifyError, match="entry computation 'main' does not exist"):
        verify_module(HloModule("m", (HloComputation("e", (i,), "a"),), "main"))


def test_unknown_opcode_is_unsupported_with_position():
    err = error_of("HloModule m\nENTRY e {\n  p = f32[] parameter(0)\n  ROOT r = f32[] foo(p)\n}")
    assert err.message == "unsupported op 'foo'" and (err.line, err.column) == (4, 3)


def test_declared_shape_mismatch_says_expected_and_actual():
    err = error_of("HloModule m\nENTRY e {\n  p = f32[2,3]{1,0} parameter(0)\n"
                   "  ROOT t = f32[2,3]{0,1} transpose(p), dimensions={1,0}\n}")
    assert "declared shape f32[2,3] of transpose does not match the inferred shape f32[3,2]" in (
        err.message)
    assert err.expected == "f32[3,2]"


def test_layouts_are_ignored():
    verify("HloModule m\nENTRY e {\n  p = f32[2,3]{0,1} parameter(0)\n"
           "  ROOT t = f32[3,2]{0,1} transpose(p), dimensions={1,0}\n}")


def test_entry_computation_layout_must_match_the_entry():
    err = error_of("HloModule m, entry_computation_layout={(f32[3]{0})->f32[3]{0}}\n"
                   "ENTRY e {\n  p = f32[2] parameter(0)\n  ROOT n = f32[2] negate(p)\n}")
    assert "entry_computation_layout says (f32[3])->f32[3]" in err.message


def _mutable(module: HloModule):
    """(computation index, instruction index) of instructions whose dims are fully implied."""
    free = {"parameter", "iota", "custom-call", "broadcast"}
    return [(ci, ii) for ci, c in enumerate(module.computations)
            for ii, i in enumerate(c.instructions) if i.opcode not in free]


def _grow(shape):
    if isinstance(shape, TupleShape):
        return TupleShape((_grow(shape.elements[0]),) + shape.elements[1:])
    return ArrayShape(shape.dtype, (shape.dims[0] + 1,) + shape.dims[1:] if shape.dims else (2,))


@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_any_wrong_declared_dims_are_rejected(data):
    path = data.draw(st.sampled_from(CORPUS))
    module = parse_hlo(path.read_text())
    sites = _mutable(module)
    ci, ii = data.draw(st.sampled_from(sites))
    comp = module.computations[ci]
    instr = comp.instructions[ii]
    if isinstance(instr.shape, TupleShape) and not instr.shape.elements:
        return
    changed = comp.instructions[:ii] + (instr.replace(shape=_grow(instr.shape)),) + (
        comp.instructions[ii + 1:])
    comps = list(module.computations)
    comps[ci] = HloComputation(comp.name, changed, comp.root_name, comp.is_entry, comp.location)
    with pytest.raises(HloVerifyError):
        verify_module(HloModule(module.name, tuple(comps), module.entry_name, module.attributes))


def _nested_calls(depth: int) -> str:
    lines = ["HloModule nested", "c0 {\n  p = f32[3] parameter(0)\n  ROOT r = f32[3] negate(p)\n}"]
    for i in range(1, depth):
        lines.append(f"c{i} {{\n  p = f32[3] parameter(0)\n"
                     f"  ROOT r = f32[3] call(p), to_apply=c{i - 1}\n}}")
    lines.append(f"ENTRY e {{\n  p = f32[3] parameter(0)\n"
                 f"  ROOT r = f32[3] call(p), to_apply=c{depth - 1}\n}}")
    return "\n".join(lines)


def test_calls_nested_deeper_than_the_limit_are_a_located_error():
    x = np.array([1.0, -2.0, 3.5], np.float32)
    # At the limit every stage still works: one negate, wherever it is nested.
    ok = parse_hlo(_nested_calls(MAX_CALL_DEPTH))
    verify_module(ok)
    (result,) = evaluate(ok, x)
    np.testing.assert_array_equal(result, -x)
    # One deeper: a located error instead of Python's RecursionError later on.
    deep = parse_hlo(_nested_calls(MAX_CALL_DEPTH + 1))
    with pytest.raises(HloVerifyError, match=f"nest {MAX_CALL_DEPTH + 1} calls deep") as info:
        verify_module(deep)
    assert info.value.line is not None
