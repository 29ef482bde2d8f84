"""Every way a caller can misuse the evaluator gives an EvaluationError saying what and where."""
from __future__ import annotations

import numpy as np
import pytest

from fusion.errors import EvaluationError
from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo


def module(body: str, extra: str = ""):
    return parse_hlo(f"HloModule m\n{extra}\nENTRY e {{\n{body}\n}}\n")


NEGATE = module("p = f32[2,3] parameter(0)\nROOT n = f32[2,3] negate(p)")


def test_unsupported_opcode_names_op_and_location():
    m = module("p = f32[2] parameter(0)\n  ROOT r = f32[2] recv(p), channel_id=1")
    with pytest.raises(EvaluationError) as info:
        evaluate(m, np.zeros(2, np.float32))
    message = str(info.value)
    assert "unsupported opcode 'recv'" in message and "%r" in message
    assert message.startswith("5:3:") and info.value.line == 5


def test_custom_call_names_target():
    m = module('p = f32[2] parameter(0)\nROOT r = f32[2] custom-call(p), custom_call_target="MyKernel"')
    with pytest.raises(EvaluationError, match="custom-call target MyKernel is not supported"):
        evaluate(m, np.zeros(2, np.float32))


def test_wrong_argument_count():
    with pytest.raises(EvaluationError, match="takes 1 arguments, got 2"):
        evaluate(NEGATE, np.zeros((2, 3), np.float32), np.zeros((2, 3), np.float32))


def test_wrong_dims_names_parameter():
    with pytest.raises(EvaluationError, match=r"parameter 0 \(%p\) expects dims \[2, 3\]"):
        evaluate(NEGATE, np.zeros((3, 2), np.float32))


def test_inexact_dtype_conversion_is_rejected_exact_one_accepted():
    with pytest.raises(EvaluationError, match=r"parameter 0 \(%p\) expects f32.*not all exactly"):
        evaluate(NEGATE, np.full((2, 3), 2**24 + 1, np.int64))
    (got,) = evaluate(NEGATE, np.full((2, 3), 7, np.int64))
    assert got.dtype == np.float32 and got[0, 0] == -7
    m = module("p = s8[2] parameter(0)\nROOT n = s8[2] negate(p)")
    with pytest.raises(EvaluationError, match="s8"):
        evaluate(m, np.array([1.0, 300.0]))


def test_tuple_parameter_needs_a_tuple():
    m = module("p = (f32[2], s32[]) parameter(0)\nROOT g = s32[] get-tuple-element(p), index=1")
    with pytest.raises(EvaluationError, match="expects a tuple of 2 values"):
        evaluate(m, np.zeros(2, np.float32))
    with pytest.raises(EvaluationError, match=r"element 1 expects dims \[\]"):
        evaluate(m, (np.zeros(2, np.float32), np.zeros(3, np.int32)))


def test_array_parameter_rejects_a_tuple():
    with pytest.raises(EvaluationError, match="got a tuple"):
        evaluate(NEGATE, (np.zeros((2, 3), np.float32), np.zeros(1)))


def test_tiled_bitcast_is_rejected_naming_the_op():
    m = module("p = f32[8,128]{1,0:T(8,128)} parameter(0)\nROOT b = f32[1024]{0} bitcast(p)")
    with pytest.raises(EvaluationError, match=r"bitcast with tiled layout .* \(in bitcast %b\)"):
        evaluate(m, np.zeros((8, 128), np.float32))


def test_bad_shape_in_module_is_reported_at_the_op():
    m = module("p = f32[2,3] parameter(0)\nROOT r = f32[3,2] negate(p)")
    with pytest.raises(EvaluationError, match=r"computed dims \[2, 3\], declared \[3, 2\]"):
        evaluate(m, np.zeros((2, 3), np.float32))
