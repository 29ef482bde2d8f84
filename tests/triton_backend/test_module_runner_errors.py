"""Every way to misuse ``compile_hlo`` and a ``CompiledModule``: a clear error naming the problem."""
from __future__ import annotations

import pytest
import torch

from fusion.errors import EvaluationError, FusionCompilerError, HloParseError, HloVerifyError, UnsupportedOpError
from fusion.text.parser import parse_hlo
from triton_backend import compile_hlo

ADD = """HloModule m
ENTRY e {
  x = f32[2,3] parameter(0)
  y = f32[2,3] parameter(1)
  ROOT s = f32[2,3] add(x, y)
}
"""


@pytest.fixture(scope="module")
def add():
    return compile_hlo(ADD)


def test_wrong_number_of_arguments_lists_the_parameters(add):
    with pytest.raises(EvaluationError, match=r"takes 2 argument\(s\) \(%x: f32\[2,3\], %y: f32\[2,3\]\), got 1"):
        add(torch.zeros(2, 3))


def test_wrong_shape_names_the_parameter(add):
    with pytest.raises(EvaluationError, match=r"parameter 1 \(%y\): has shape \[3, 2\], but the parameter is f32\[2,3\]"):
        add(torch.zeros(2, 3), torch.zeros(3, 2))


def test_wrong_dtype_names_the_parameter_and_both_types(add):
    with pytest.raises(EvaluationError, match=r"parameter 0 \(%x\): has dtype torch.float64 \(f64\), but the parameter is f32"):
        add(torch.zeros(2, 3, dtype=torch.float64), torch.zeros(2, 3))


def test_wrong_device_names_the_parameter(add):
    with pytest.raises(EvaluationError, match=r"parameter 1 \(%y\): is on device meta, but the module runs on cpu"):
        add(torch.zeros(2, 3), torch.zeros(2, 3, device="meta"))


def test_not_a_tensor_names_the_parameter(add):
    with pytest.raises(EvaluationError, match=r"parameter 0 \(%x\): expected a torch.Tensor .* got list"):
        add([[0.0] * 3] * 2, torch.zeros(2, 3))


def test_non_contiguous_inputs_are_made_contiguous(add):
    x = torch.arange(6.0).reshape(3, 2).t()  # a (2,3) view with strides (1, 2)
    assert not x.is_contiguous()
    (out,) = add(x, torch.ones(2, 3))
    torch.testing.assert_close(out, x.contiguous() + 1)


def test_unsupported_op_is_rejected_up_front_with_its_location():
    text = """HloModule m
ENTRY e {
  a = f32[2,3] parameter(0)
  b = f32[2,3] parameter(1)
  ROOT cc = f32[2,3] custom-call(a, b), custom_call_target="my_op"
}
"""
    for fuse in (True, False):
        with pytest.raises(UnsupportedOpError) as info:
            compile_hlo(text, fuse=fuse)
        err = info.value
        assert (err.line, err.column) == (5, 3), str(err)
        assert "custom-call" in err.message and "cc" in str(err), str(err)


def test_unsupported_op_inside_an_xla_fusion_points_at_the_op():
    text = """HloModule m
f {
  p = f32[4] parameter(0)
  ROOT s = f32[4] custom-call(p), custom_call_target="foo"
}
ENTRY e {
  x = f32[4] parameter(0)
  ROOT r = f32[4] fusion(x), kind=kLoop, calls=f
}
"""
    with pytest.raises(UnsupportedOpError) as info:
        compile_hlo(text)
    assert info.value.line in (4, 8), str(info.value)
    assert "custom-call" in str(info.value) or "fusion" in str(info.value)


def test_parse_error_is_located():
    with pytest.raises(HloParseError) as info:
        compile_hlo("HloModule m\nENTRY e {\n  x = f32[2] parameter(0\n}\n")
    assert info.value.line is not None


def test_verify_error_is_located():
    with pytest.raises(HloVerifyError, match="3:"):
        compile_hlo("HloModule m\nENTRY e {\n  x = f32[2] parameter(0)\n"
                    "  ROOT y = f32[3] negate(x)\n}\n")


def test_tuple_parameter_is_rejected_naming_it():
    text = "HloModule m\nENTRY e {\n  t = (f32[2], f32[2]) parameter(0)\n  ROOT g = f32[2] get-tuple-element(t), index=0\n}\n"
    with pytest.raises(UnsupportedOpError, match=r"3:3: parameter 0 \(%t\) has tuple shape"):
        compile_hlo(text)


def test_a_small_float_travels_as_its_codes():
    # (s4 and the other sub-byte integers travel as int8/uint8: test_sub_byte_boundary.py)
    # f4e2m1fn has no torch dtype: a uint8 tensor holds one code a byte (BYTE_CARRIERS), and a
    # tensor of another dtype is an error naming the parameter.
    import ml_dtypes
    import numpy as np

    from fusion.evaluator import evaluate
    from triton_backend.host.input_validation import tensor_from_numpy, tensor_to_numpy

    text = "HloModule m\nENTRY e {\n  x = f4e2m1fn[8] parameter(0)\n  ROOT n = f4e2m1fn[8] negate(x)\n}\n"
    codes = np.arange(8, dtype=np.uint8).view(ml_dtypes.float4_e2m1fn)
    compiled = compile_hlo(text)
    (got,) = compiled(tensor_from_numpy(codes, "f4e2m1fn"))
    assert got.dtype == torch.uint8
    (want,) = evaluate(parse_hlo(text), codes)
    assert tensor_to_numpy(got, "f4e2m1fn").tobytes() == np.asarray(want).tobytes()
    with pytest.raises(EvaluationError, match=r"parameter 0 \(%x\): has dtype torch.float32"):
        compiled(torch.zeros(8))


def test_tiling_for_an_unknown_fusion_lists_the_fusions():
    with pytest.raises(FusionCompilerError, match=r"^tiling: names fusion\(s\) nope not in the "
                       r"compiled module; its fusions are wrapped_s$"):
        compile_hlo(ADD, tiling={"nope": (2, 4)}, fuse=False)


def test_bad_tile_sizes_are_a_compile_error():
    with pytest.raises(UnsupportedOpError, match=r"^5:3: .*tile sizes \[2\].*wrapped_s"):
        compile_hlo(ADD, tiling={"wrapped_s": (2,)}, fuse=False)


def test_unknown_target_is_an_error():
    with pytest.raises(FusionCompilerError, match="unknown target 'gfx90a'"):
        compile_hlo(ADD, target="gfx90a")


def test_not_text_nor_module_is_a_type_error():
    with pytest.raises(TypeError, match="HLO text or an HloModule"):
        compile_hlo(42)
