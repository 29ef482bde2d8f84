"""Regression tests for the bugs the front-end fuzzer found, one minimal reproducer each.

Every case used to end in an internal traceback (RecursionError, KeyError, ValueError,
ZeroDivisionError, TypeError, or a project error without a location); each must now be a
project error carrying a location, or a success.
"""
from __future__ import annotations

import json
import math
import pathlib

import numpy as np
import pytest

from fusion.errors import (
    EvaluationError,
    HloParseError,
    HloVerifyError,
    UnsupportedOpError,
)
from fusion.evaluator import evaluate
from fusion.evaluator.size_limit import DEFAULT_MAX_ELEMENTS, ENV_VAR, check_module_size
from fusion.evaluator.npz_io import random_inputs
from fusion.text.parser import parse_hlo
from fusion.text.shape_parsing import MAX_NESTING
from fusion.shapes.verifier import verify_module
from tiling.layouts.tiled_layout import layout_indexing_map, parse_tiles, row_major_coords
from triton_backend.cli import main

CORPUS = pathlib.Path(__file__).parents[1] / "data" / "hlo"


def _module(body: str) -> str:
    return "HloModule m\nENTRY e {\n" + body + "\n}\n"


def _verify_error(text: str) -> HloVerifyError:
    with pytest.raises(HloVerifyError) as info:
        verify_module(parse_hlo(text))
    assert info.value.line is not None and info.value.where
    return info.value


# -- deep nesting: RecursionError in the parser and verifier ----------------------------------

def test_deeply_nested_tuple_shape_is_a_located_parse_error():
    depth = 3000
    text = _module(f"  ROOT p = {'(' * depth}f32[2]{')' * depth} parameter(0)")
    with pytest.raises(HloParseError) as info:
        parse_hlo(text)
    assert info.value.line == 3 and f"deeper than {MAX_NESTING}" in info.value.message


def test_tuple_shape_nested_just_within_the_limit_parses_and_verifies():
    depth = MAX_NESTING
    shape = "(" * depth + "f32[2]" + ")" * depth
    module = parse_hlo(_module(f"  ROOT p = {shape} parameter(0)"))
    verify_module(module)  # same_shape and friends recurse once per level: must not overflow
    leaf = module.entry.root.shape
    for _ in range(depth):
        leaf = leaf.elements[0]
    assert str(leaf) == "f32[2]"


def test_deeply_nested_array_literal_is_a_located_parse_error():
    depth = 5000
    text = _module(f"  ROOT c = f32[] constant({'{' * depth}1{'}' * depth})")
    with pytest.raises(HloParseError) as info:
        parse_hlo(text)
    assert info.value.line == 3 and "nested deeper" in info.value.message


# -- required attributes: KeyError in the indexing analysis ----------------------------------

@pytest.mark.parametrize("line", [
    # XLA's parser defaults dimensions={} for a scalar operand only (tests/triton_backend/
    # test_scalar_forms.py); a broadcast of an array must say where its dims go.
    "  ROOT b = f32[3,2] broadcast(q)",
    "  ROOT r = f32[2] reverse(q)",
])
def test_missing_dimensions_attribute_is_a_verify_error(line):
    text = _module("  p = f32[] parameter(0)\n  q = f32[2] parameter(1)\n" + line)
    err = _verify_error(text)
    assert "missing attribute 'dimensions'" in err.message


def test_reduce_without_dimensions_is_a_verify_error():
    text = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  p = f32[2] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[2] reduce(p, z), to_apply=add
}
"""
    assert "missing attribute 'dimensions'" in _verify_error(text).message


@pytest.mark.parametrize("line", [
    "  ROOT c = f32[4] concatenate(p, p), dimensions={}",
    "  ROOT c = f32[4] concatenate(p, p), dimensions={0,0}",
])
def test_concatenate_needs_exactly_one_dim(line):
    err = _verify_error(_module("  p = f32[2] parameter(0)\n" + line))
    assert "exactly one dim" in err.message


def test_sort_with_empty_dimensions_is_a_verify_error():
    # The fuzzer's reproducer: a broadcast turned into a sort keeps ``dimensions={}``.
    err = _verify_error(_module("  c = s32[] constant(1)\n"
                                "  ROOT s = s32[3] sort(c), dimensions={}"))
    assert "exactly one dim" in err.message


# -- complex values: RecursionError in the coverage check -------------------------------------

_REAL_REDUCE_OF_COMPLEX = """HloModule m

red {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  s = f32[] add(a, b)
  c = c64[] convert(s)
  ROOT r = f32[] convert(c)
}

fc {
  p = c64[4] parameter(0)
  x = f32[4] convert(p)
  z = f32[] constant(0)
  ROOT r = f32[] reduce(x, z), dimensions={0}, to_apply=red
}

ENTRY e {
  p = c64[4] parameter(0)
  ROOT f = f32[] fusion(p), kind=kLoop, calls=fc
}
"""


def test_real_reduce_whose_reducer_holds_complex_values_is_expanded():
    # bf16_special_floats retyped to c128 (seed 32): a reduce of real values whose reducer
    # round-trips through c128.  The complex expansion copied the reduce with its reducer
    # unexpanded, so the expansion still held complex values and the coverage check expanded
    # it again without end; a c64 -> f32 convert also became a pair of f32 values.
    import torch
    from triton_backend import compile_hlo
    from triton_backend.driver.op_coverage import uncovered_ops

    assert uncovered_ops(parse_hlo(_REAL_REDUCE_OF_COMPLEX)) == []
    x = np.array([1 + 2j, 3 - 1j, -0.5 + 4j, 2j], dtype=np.complex64)
    (want,) = evaluate(parse_hlo(_REAL_REDUCE_OF_COMPLEX), x)
    assert want == np.float32(3.5)  # the sum of the real parts
    (got,) = compile_hlo(_REAL_REDUCE_OF_COMPLEX)(torch.from_numpy(x))
    np.testing.assert_array_equal(got.numpy(), want)


# -- the CLI ----------------------------------------------------------------------------------

def _cli(tmp_path, capsys, argv_head, text, data: bytes | None = None):
    path = tmp_path / "case.hlo"
    if data is None:
        path.write_text(text, encoding="utf-8")
    else:
        path.write_bytes(data)
    status = main(argv_head + [str(path)])
    out = capsys.readouterr()
    return status, out.out, out.err


def test_indexing_command_on_an_instruction_without_operands(tmp_path, capsys):
    # Used to be a TypeError: an empty operand list was mistaken for a missing one.
    status, out, _ = _cli(tmp_path, capsys, ["indexing"],
                          _module("  ROOT c = f32[2] constant({1, 2})"))
    assert status == 0 and out.splitlines() == ["c: output-to-input"]


def test_indexing_command_verifies_the_module_first(tmp_path, capsys):
    # Used to reach the analysis with a transpose whose permutation is too short.
    status, _, err = _cli(tmp_path, capsys, ["indexing"], _module(
        "  p = f32[2,3] parameter(0)\n  ROOT t = f32[3,2] transpose(p), dimensions={0}"))
    assert status == 1 and "4:3:" in err and "permutation" in err


def test_indexing_command_on_a_file_that_is_not_utf8(tmp_path, capsys):
    status, _, err = _cli(tmp_path, capsys, ["indexing"], "", data=b"HloModule \xff\xfe")
    assert status == 1 and "cannot read" in err


# -- layouts of empty shapes: ZeroDivisionError ----------------------------------------------

def test_row_major_coords_with_a_zero_dim():
    assert row_major_coords(7, (3, 0, 4)) == (1, 0, 3)


def test_layout_map_of_an_empty_shape_is_known_empty():
    m = layout_indexing_map((0, 2, 3), parse_tiles("0,2,1"))
    assert m.is_known_empty


def test_layout_command_on_an_empty_transposed_shape(capsys):
    assert main(["layout", "f32[0,2,3]{0,2,1}", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["padded_elements"] == 0 and report["bytes"] == 0


# -- evaluation: unlocated errors and huge dims ----------------------------------------------

def test_random_inputs_for_a_token_parameter_names_the_parameter():
    module = parse_hlo(_module("  ROOT t = token[] parameter(0)"))
    with pytest.raises(EvaluationError) as info:
        random_inputs(module)
    assert info.value.where == "t"


def test_bad_argument_errors_name_the_parameter():
    module = parse_hlo(_module("  ROOT p = f32[2] parameter(0)"))
    with pytest.raises(EvaluationError) as info:
        evaluate(module, np.zeros(3, np.float32))
    assert info.value.where == "parameter 0 (%p)"


@pytest.mark.parametrize("dim", [2**40, 2**63, 2**64])
def test_huge_dims_are_refused_before_anything_is_allocated(dim):
    module = parse_hlo(_module(f"  p = f32[{dim}] parameter(0)\n  ROOT n = f32[{dim}] negate(p)"))
    verify_module(module)
    for attempt in (lambda: random_inputs(module), lambda: evaluate(module, np.zeros(1))):
        with pytest.raises(EvaluationError) as info:
            attempt()
        assert "too large to evaluate" in info.value.message
        assert str(DEFAULT_MAX_ELEMENTS) in info.value.message
        assert info.value.line is not None


def test_size_limit_counts_every_instruction_and_can_be_overridden(monkeypatch):
    module = parse_hlo(_module("  p = f32[10,10] parameter(0)\n  ROOT n = f32[10,10] negate(p)"))
    check_module_size(module, limit=200)  # 100 + 100 elements: exactly at the limit
    with pytest.raises(EvaluationError):
        check_module_size(module, limit=199)
    monkeypatch.setenv(ENV_VAR, "150")
    with pytest.raises(EvaluationError) as info:
        evaluate(module, np.ones((10, 10), np.float32))
    assert "limit of 150" in info.value.message
    monkeypatch.setenv(ENV_VAR, "200")
    out = evaluate(module, np.ones((10, 10), np.float32))[0]
    assert out.shape == (10, 10) and math.isclose(float(out.sum()), -100.0)
    monkeypatch.setenv(ENV_VAR, "lots")
    with pytest.raises(EvaluationError) as info:
        evaluate(module, np.ones((10, 10), np.float32))
    assert info.value.where == ENV_VAR


def test_evaluate_command_on_a_huge_module(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    status, _, err = _cli(tmp_path, capsys, ["evaluate"],
                          _module(f"  ROOT p = f32[{2**40},2] parameter(0)"))
    assert status == 1 and "too large to evaluate" in err


# -- token and opaque: ZeroDivisionError in bitcast-convert -----------------------------------

@pytest.mark.parametrize("body", [
    "  p = token[] parameter(0)\n  ROOT b = s32[] bitcast-convert(p)",
    "  p = s32[] parameter(0)\n  ROOT b = opaque[] bitcast-convert(p)",
])
def test_bitcast_convert_of_a_type_without_values_is_a_verify_error(body):
    assert "has no values" in _verify_error(_module(body)).message



def test_host_constants_of_a_small_float_type_run_like_the_evaluator():
    # Found by bench/fuzz_frontend.py --stages compile: every s64 of the fori_loop program
    # retyped to s4 made compile_hlo raise without a location while planning host constants.
    # f4e2m1fn, refused then for want of a torch dtype, now travels as its codes in a uint8
    # carrier (input_validation.BYTE_CARRIERS): its loop counter and constants run on the
    # host like any other, as the evaluator computes them (6 is its largest value: 5 rounds
    # to 4, so the loop runs otherwise than in s64).
    import torch
    from triton_backend import compile_hlo

    text = (CORPUS / "fori_loop.before.hlo").read_text().replace("s64[", "f4e2m1fn[")
    x = np.arange(4, dtype=np.float32)
    (want,) = evaluate(parse_hlo(text), x)
    (got,) = compile_hlo(text)(torch.from_numpy(x))
    np.testing.assert_array_equal(got.numpy(), want)


def test_host_constants_of_a_sub_byte_type_run_like_the_evaluator():
    # The s4 retyping of the case above: the loop counter (0..5) fits s4, so the compiled
    # module must run the loop and agree with the reference evaluator.
    import torch
    from triton_backend import compile_hlo

    text = (CORPUS / "fori_loop.before.hlo").read_text().replace("s64[", "s4[")
    x = np.arange(4, dtype=np.float32)
    (want,) = evaluate(parse_hlo(text), x)
    (got,) = compile_hlo(text)(torch.from_numpy(x))
    np.testing.assert_array_equal(got.numpy(), want)


# -- found by --stages tile,compile,run: WRONG results ----------------------------------------

@pytest.mark.parametrize("dtype", ["u8", "u16", "u32", "u64", "s8"])
def test_gather_with_narrow_unsigned_indices_reads_the_indexed_rows(dtype):
    # The evaluator clamped unsigned indices to 2**62 cast to their own type: 0 for u8/u16/u32,
    # so every row gathered was row 0 (the compiled kernel was right).
    text = _module(
        f"  x = f32[6,3] parameter(0)\n  i = {dtype}[3,1] parameter(1)\n"
        "  ROOT g = f32[3,3] gather(x, i), offset_dims={1}, collapsed_slice_dims={0}, "
        "start_index_map={0}, index_vector_dim=1, slice_sizes={1,3}")
    x = np.arange(18, dtype=np.float32).reshape(6, 3)
    idx = np.array([[4], [1], [2]], dtype=np.dtype({"u8": "uint8", "u16": "uint16",
                                                    "u32": "uint32", "u64": "uint64",
                                                    "s8": "int8"}[dtype]))
    (out,) = evaluate(parse_hlo(text), x, idx)
    np.testing.assert_array_equal(out, x[idx[:, 0]])


def test_tuple_declaring_another_layout_than_its_operand_is_a_located_error():
    # A wrong_layout mutation of compare_select's ROOT tuple: element 1 declared tiled while
    # its operand is untiled.  The host groups values as they are, so unpacking the result
    # raised a LayoutError without a location at run time; compile_hlo now refuses it.
    from triton_backend import compile_hlo

    text = _module("  p = f32[2,3] parameter(0)\n  n = f32[2,3]{1,0} negate(p)\n"
                   "  ROOT t = (f32[2,3]{1,0:T(2,2)}) tuple(n)")
    with pytest.raises(UnsupportedOpError, match="different layouts") as info:
        compile_hlo(text)
    assert info.value.line == 5 and info.value.where == "t"


def test_fusion_parameter_declaring_another_layout_than_its_operand_is_a_located_error():
    # A wrong_layout mutation of erf_atan2: the fused computation's parameter declared tiled
    # while the ENTRY passes an untiled value; the kernel, expecting the physical buffer,
    # raised ValueError at run time.  compile_hlo now refuses it, naming the fusion.
    from triton_backend import compile_hlo

    text = ("HloModule m\nf {\n  a = f32[2,3]{1,0:T(2,2)} parameter(0)\n"
            "  ROOT n = f32[2,3] negate(a)\n}\nENTRY e {\n  p = f32[2,3] parameter(0)\n"
            "  ROOT r = f32[2,3] fusion(p), kind=kLoop, calls=f\n}\n")
    with pytest.raises(UnsupportedOpError, match="parameter 0 of f in different layouts") as info:
        compile_hlo(text)
    assert info.value.line == 8 and info.value.where == "r"


def test_module_text_with_a_lone_surrogate_compiles():
    # A hostile_char mutation put "\ud800" into a metadata string; compile_hlo hashed the text
    # as strict UTF-8 for its module cache and raised UnicodeEncodeError.
    from triton_backend import compile_hlo

    text = _module("  p = f32[4] parameter(0)\n"
                   "  ROOT n = f32[4] negate(p), metadata={op_name=\"x\ud800\"}")
    compiled = compile_hlo(text)
    assert compiled.module.entry.root.opcode in ("negate", "fusion")
