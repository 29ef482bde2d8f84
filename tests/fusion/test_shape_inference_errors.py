"""Invalid HLO: each shape rule's complaint, located at the instruction, in its own words."""
from __future__ import annotations

import pytest

from fusion.errors import HloVerifyError
from fusion.text.parser import parse_hlo
from fusion.shapes.verifier import verify_module

ADD = "add { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }\n"
LT = "lt { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = pred[] compare(a, b), direction=LT }\n"


def module(params: str, root: str, extra: str = "") -> str:
    lines = [f"  p{k} = {s} parameter({k})" for k, s in enumerate(params.split(";"))]
    return "HloModule m\n" + extra + "ENTRY e {\n" + "\n".join(lines) + f"\n  ROOT r = {root}\n}}"


def check(text: str) -> None:
    verify_module(parse_hlo(text))


VALID = [
    ("f32[2]", "f32[2] log(p0)"),
    ("f32[2]", "f32[2] sqrt(p0)"),
    ("f32[2]", "f32[2] logistic(p0)"),
    ("c64[2]", "f32[2] imag(p0)"),
    ("c128[2]", "f64[2] abs(p0)"),
    ("f32[2]", "pred[2] is-finite(p0)"),
    ("f32[2];f32[2]", "c64[2] complex(p0, p1)"),
    ("f32[2];s32[2]", "s32[2] map(p0, p1), dimensions={0}, to_apply=g",
     "g { a = f32[] parameter(0)  b = s32[] parameter(1)  ROOT c = s32[] convert(a) }\n"),
    ("f32[2]", "(f32[2], s8[]) custom-call(p0), custom_call_target=\"x\""),
    ("f32[3,4]", "f32[2,4] reduce-window(p0, f32[] constant(0)), window={size=2x1}, to_apply=add",
     ADD),
    ("f32[]", "f32[3] constant({1, 2, 3})"),
    ("f32[4];s32[]", "f32[4] dynamic-update-slice(p0, p0, p1)"),
]


@pytest.mark.parametrize("case", VALID, ids=[c[1].split("(")[0] for c in VALID])
def test_valid(case):
    params, root, *extra = case
    text = module(params, root, *extra)
    if "constant(0)" in root:  # constants are instructions, not inline operands
        text = text.replace("reduce-window(p0, f32[] constant(0))", "reduce-window(p0, z)")
        text = text.replace("  ROOT r", "  z = f32[] constant(0)\n  ROOT r")
    check(text)


INVALID = [
    ("f32[2];s32[2]", "f32[2] add(p0, p1)", "", "mismatched element types f32, s32"),
    ("f32[2];f32[3]", "f32[2] multiply(p0, p1)", "", "incompatible shapes f32[2], f32[3]"),
    ("f32[2];f32[2]", "f32[2] compare(p0, p1), direction=LT", "", "inferred shape pred[2]"),
    ("f32[2];f32[2]", "pred[2] compare(p0, p1), direction=XX", "", "invalid direction 'XX'"),
    ("s32[2]", "s32[2] exponential(p0)", "", "element type s32"),
    ("f32[2]", "f32[2] not(p0)", "", "element type f32"),
    ("f32[2]", "f32[2] shift-left(p0, p0)", "", "element type f32"),
    ("s32[2];f32[2];f32[2]", "f32[2] select(p0, p1, p2)", "", "predicate must be pred"),
    ("f32[3];f32[2];f32[2]", "f32[2] clamp(p0, p1, p2)", "", "must be a scalar or have"),
    ("f32[2,3]", "f32[3] reshape(p0)", "", "changes the element count"),
    ("f32[2]", "s32[3] bitcast(p0)", "", "changes the size"),
    ("f32[2,3]", "f32[2,3,1] broadcast(p0), dimensions={0,2}", "", "to result dim 2 (size 1)"),
    ("f32[2,3]", "f32[3,2] transpose(p0), dimensions={0,0}", "", "not a permutation"),
    ("f32[4]", "f32[2] slice(p0), slice={[3:5]}", "", "invalid for size 4"),
    ("f32[4]", "f32[4] reverse(p0), dimensions={1}", "", "out of range for rank 1"),
    ("f32[4];f32[]", "f32[4] dynamic-slice(p0, p1), dynamic_slice_sizes={2}", "",
     "start index 0 of dynamic-slice has element type f32"),
    ("f32[4];s32[]", "f32[5] dynamic-slice(p0, p1), dynamic_slice_sizes={5}", "", "exceeds"),
    ("f32[4];s32[]", "f32[4] dynamic-update-slice(p0, p0, p1, p1)", "", "needs 1 start indices"),
    ("f32[4];f32[]", "f32[1] pad(p0, p1), padding=-3_-3", "", "negative"),
    ("f32[4];s32[]", "f32[4] pad(p0, p1), padding=0_0", "", "mismatched element types"),
    ("f32[4];f32[3,1]", "f32[7] concatenate(p0, p1), dimensions={0}", "", "differ outside dim 0"),
    ("f32[4]", "s32[] reduce(p0, p0), dimensions={0}, to_apply=add", ADD,
     "init value 0 of reduce must be a scalar"),
    ("f32[4];s32[]", "s32[] reduce(p0, p1), dimensions={0}, to_apply=add", ADD,
     "parameter 0 of to_apply computation 'add' is f32[]"),
    ("f32[4];f32[]", "f32[] reduce(p0, p1), dimensions={0}, to_apply=lt", LT,
     "to_apply computation 'lt' returns pred[]"),
    ("f32[4];f32[]", "f32[4] reduce-window(p0, p1), to_apply=add", ADD, "needs a window"),
    ("f32[2,3];f32[4,3]", "f32[4,2] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={1}",
     "", "inferred shape f32[2,4]"),
    ("f32[2,3];f32[4,5]", "f32[2,5] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
     "", "contracting dims differ"),
    ("f32[5,3];s32[2,1]", "f32[2,3] gather(p0, p1), offset_dims={1}, collapsed_slice_dims={0}, "
     "start_index_map={0}, index_vector_dim=1, slice_sizes={2,3}", "",
     "collapsed or batching dim 0 must have slice size <= 1"),
    ("f32[5,3];f32[2,1]", "f32[2,3] gather(p0, p1), offset_dims={1}, collapsed_slice_dims={0}, "
     "start_index_map={0}, index_vector_dim=1, slice_sizes={1,3}", "",
     "the indices of gather has element type f32"),
    ("f32[6,3];s32[2,1];f32[3,3]", "f32[6,3] scatter(p0, p1, p2), update_window_dims={1}, "
     "inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, "
     "to_apply=add", ADD, "do not match the indices' batch dims"),
    ("f32[4]", "f32[4] sort(p0), dimensions={0}, to_apply=add", ADD,
     "to_apply computation 'add' returns f32[]"),
    ("f32[4]", "f32[4] map(p0), to_apply=lt", LT, "takes 2 parameters"),
    ("f32[4]", "f32[4] call(p0), to_apply=add", ADD, "takes 2 parameters, but call passes 1"),
    ("s32[];f32[]", "f32[] conditional(p0, p1, p1), true_computation=neg, false_computation=neg",
     "neg { x = f32[] parameter(0)  ROOT y = f32[] negate(x) }\n", "must be pred[]"),
    ("f32[]", "f32[] while(p0), condition=neg, body=neg",
     "neg { x = f32[] parameter(0)  ROOT y = f32[] negate(x) }\n", "returns f32[]"),
    ("f32[2]", "f32[2] get-tuple-element(p0), index=0", "", "needs a tuple operand"),
    ("(f32[2])", "f32[2] get-tuple-element(p0), index=1", "", "tuple index 1 out of range"),
    ("f32[2]", "f32[2] iota(), iota_dimension=1", "", "out of range for rank 1"),
    ("s32[2]", "s32[2] reduce-precision(p0), exponent_bits=5, mantissa_bits=2", "",
     "element type s32"),
    ("f32[2]", "f32[2] bitcast-convert(p0)", "", None),  # same width: valid, control case
    ("f32[3]", "u16[2] bitcast-convert(p0)", "", "inferred shape u16[3,2]"),
]


@pytest.mark.parametrize("case", INVALID, ids=[f"{k}-{c[1].split('(')[0]}" for k, c in enumerate(INVALID)])
def test_invalid_is_reported_at_the_instruction(case):
    params, root, extra, message = case
    text = module(params, root, extra)
    if message is None:
        check(text)
        return
    with pytest.raises(HloVerifyError) as info:
        check(text)
    err = info.value
    assert message in str(err)
    assert err.where == "r" and err.line == text.count("\n") and err.column == 3


def test_constant_literal_must_fill_the_shape():
    # The parser rejects such text; a built module can still carry a wrong literal.
    from fusion.ir.attributes import Literal
    from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
    from fusion.ir.shape import ArrayShape

    c = HloInstruction("c", "constant", ArrayShape("f32", (5,)), (),
                       (("literal", Literal((2,), (1.0, 2.0))),))
    with pytest.raises(HloVerifyError, match=r"literal has dims \[2\] but the shape is f32\[5\]"):
        verify_module(HloModule("m", (HloComputation("e", (c,), "c", True),), "e"))
