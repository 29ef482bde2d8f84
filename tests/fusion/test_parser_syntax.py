"""One test per syntax feature of the HLO text format."""
from __future__ import annotations

import math

import pytest

from fusion.ir.attributes import Literal, PaddingConfig, PaddingDim, RawText, SliceDim, WindowDim
from fusion.ir.element_types import ELEMENT_TYPES
from fusion.ir.hlo_module import SourceLocation
from fusion.ir.layout import COMBINED, Layout, Tile
from fusion.text.parser import parse_hlo, parse_layout, parse_shape
from fusion.ir.shape import ArrayShape, TupleShape


def entry_root(body: str, header: str = "HloModule m"):
    module = parse_hlo(f"{header}\nENTRY e {{\n{body}\n}}\n")
    return module.entry.root


def one(line: str):
    """Parse a single ROOT instruction after a parameter p (f32[4,6]) and q (s32[])."""
    return entry_root("  p = f32[4,6]{1,0} parameter(0)\n  q = s32[] parameter(1)\n  ROOT " + line)


# -- shapes and layouts ---------------------------------------------------------------------

@pytest.mark.parametrize("dtype", sorted(ELEMENT_TYPES))
def test_every_element_type(dtype):
    assert parse_shape(f"{dtype}[2,3]") == ArrayShape(dtype, (2, 3))
    assert parse_shape(f"{dtype}[]") == ArrayShape(dtype, ())


def test_tiled_layout_shape():
    s = parse_shape("bf16[37,300]{1,0:T(8,128)(2,1)}")
    assert s == ArrayShape("bf16", (37, 300), Layout((1, 0), (Tile((8, 128)), Tile((2, 1)))))


def test_tuples_nested_and_empty():
    assert parse_shape("(f32[2], s32[])") == TupleShape((ArrayShape("f32", (2,)), ArrayShape("s32", ())))
    assert parse_shape("()") == TupleShape(())
    assert parse_shape("(f32[1]{0}, (pred[], ()), token[])") == TupleShape((
        ArrayShape("f32", (1,), Layout((0,))),
        TupleShape((ArrayShape("pred", ()), TupleShape(()))),
        ArrayShape("token", ())))


def test_bounded_dynamic_dims():
    s = parse_shape("f32[<=8,3]")
    assert s.dims == (8, 3) and s.dynamic == (True, False)
    assert str(s) == "f32[<=8,3]"


def test_layout_fields():
    assert parse_layout("{1,0:T(8,128)(2,1)}") == Layout((1, 0), (Tile((8, 128)), Tile((2, 1))))
    assert parse_layout("{0,1:T(2,*,128)}").tiles == (Tile((2, COMBINED, 128)),)
    assert parse_layout("{0:T(1024)E(4)S(1)}") == Layout((0,), (Tile((1024,)),), 4, 1)
    extras = parse_layout("{1,0:D(D,C)T(2,1)L(4)#(s64)*(s32)SC(0:1)}")
    assert extras.extras == ("D(D,C)", "L(4)", "#(s64)", "*(s32)", "SC(0:1)")
    assert extras.tiles == (Tile((2, 1)),)
    assert parse_layout("{ 1, 0 }") == Layout((1, 0))


def test_empty_layout_forms():
    assert parse_shape("f32[]{:T(128)}") == ArrayShape("f32", (), Layout((), (Tile((128,)),)))
    assert parse_shape("f32[]{}").layout == Layout(())
    assert parse_shape("f32[]").layout is None


def test_layout_only_when_touching():
    m = parse_hlo("HloModule m\nENTRY e (a: f32[2]) -> f32[2] {\n ROOT a = f32[2] parameter(0)\n}")
    assert m.entry.root.shape.layout is None


# -- module header, comments, computations ------------------------------------------------------

def test_comments_and_run_lines():
    text = """// RUN: hlo-opt %s | FileCheck %s
HloModule m /* block
comment */, is_scheduled=true
// CHECK: ENTRY
ENTRY e {
  p = f32[2] parameter(0) // trailing
  ROOT n = f32[2] negate(p) /* inline */
}
"""
    module = parse_hlo(text)
    assert module.attributes == (("is_scheduled", "true"),)
    assert module.entry.root.operands == ("p",)


def test_no_entry_takes_last_computation():
    module = parse_hlo("HloModule m\na { ROOT x = f32[] parameter(0) }\nb { ROOT y = f32[] parameter(0) }")
    assert module.entry_name == "b"
    assert module.entry.is_entry and not module.computation("a").is_entry


def test_trailing_colon_header():
    assert parse_hlo("HloModule m:\nENTRY e { ROOT c = f32[] constant(1) }").name == "m"


def test_header_attributes_kept_verbatim():
    module = parse_hlo(
        "HloModule jit_f, is_scheduled=true, entry_computation_layout={(f32[2,3]{1,0})->f32[2,3]{1,0}}, "
        "future_thing={a, {b}}, num_partitions=2\nENTRY e { ROOT c = f32[] constant(1) }")
    assert module.attributes == (
        ("is_scheduled", "true"),
        ("entry_computation_layout", "{(f32[2,3]{1,0})->f32[2,3]{1,0}}"),
        ("future_thing", "{a, {b}}"),
        ("num_partitions", "2"),
    )


def test_stack_frame_tables():
    tables = ('FileNames\n1 "a.py"\n\nFunctionNames\n1 "<module>"\n\nFileLocations\n'
              '1 {file_name_id=1 function_name_id=1 line=5 end_line=5 column=6 end_column=25}\n\n'
              'StackFrames\n1 {file_location_id=1 parent_frame_id=1}')
    module = parse_hlo(f"HloModule m\n\n{tables}\n\nENTRY e {{ ROOT c = f32[] constant(1) }}")
    assert module.stack_frames == tables


def test_signature_and_percent_names():
    module = parse_hlo("""HloModule m
%add.f (x.1: f32[], y-2: f32[]) -> f32[] {
  %x.1 = f32[] parameter(0)
  %y-2 = f32[] parameter(1)
  ROOT %sum-it.3 = f32[] add(f32[] %x.1, f32[] %y-2)
}
ENTRY %main.5 (Arg_0.1: f32[2,3]) -> (f32[], f32[2,3]{1,0}) {
  %Arg_0.1 = f32[2,3]{1,0} parameter(0)
  %c = f32[] constant(0)
  %r = f32[] reduce(f32[2,3]{1,0} %Arg_0.1, %c), dimensions={0,1}, to_apply=%add.f
  ROOT %t = (f32[], f32[2,3]{1,0}) tuple((f32[]) %r, %Arg_0.1)
}""")
    assert [c.name for c in module.computations] == ["add.f", "main.5"]
    assert module.computation("add.f").root.operands == ("x.1", "y-2")
    assert module.entry.instruction("r").attr("to_apply") == "add.f"
    assert module.entry.root.operands == ("r", "Arg_0.1")


def test_source_locations():
    module = parse_hlo("HloModule m\n\nENTRY e {\n  p = f32[] parameter(0)\n    ROOT q = f32[] abs(p)\n}")
    assert module.entry.location == SourceLocation(3, 1)
    assert module.entry.instruction("p").location == SourceLocation(4, 3)
    assert module.entry.root.location == SourceLocation(5, 5)


def test_root_defaults_to_last_instruction():
    module = parse_hlo("HloModule m\nENTRY e {\n p = f32[] parameter(0)\n q = f32[] abs(p)\n}")
    assert module.entry.root_name == "q"


def test_unknown_opcode_and_attribute_parse():
    i = one("x = f32[4,6] frobnicate(p, q), wibble={1, {2}}, zap=3x4, note=\"hi, there\"")
    assert i.opcode == "frobnicate"
    assert i.attributes == (("wibble", RawText("{1, {2}}")), ("zap", RawText("3x4")),
                            ("note", RawText('"hi, there"')))


# -- attributes -------------------------------------------------------------------------------

def test_dimension_lists():
    i = one("t = f32[6,4] transpose(p), dimensions={1,0}")
    assert i.attr("dimensions") == (1, 0)
    assert one("b = f32[4,6] broadcast(q), dimensions={}").attr("dimensions") == ()


def test_slice_padding_window():
    assert one("s = f32[2,3] slice(p), slice={[1:3], [0:6:2]}").attr("slice") == (
        SliceDim(1, 3), SliceDim(0, 6, 2))
    assert one("x = f32[7,13] pad(p, q), padding=1_2_0x-1_1_2").attr("padding") == PaddingConfig(
        (PaddingDim(1, 2, 0), PaddingDim(-1, 1, 2)))
    w = one("r = f32[2,3] reduce-window(p, q), window={size=2x2 stride=2x2 pad=0_1x1_0 "
            "lhs_dilate=1x2 rhs_dilate=3x1 rhs_reversal=0x1}, to_apply=add").attr("window")
    assert w.dims == (WindowDim(2, 2, 0, 1, 3, 1, False), WindowDim(2, 2, 1, 0, 1, 2, True))


def test_dot_gather_scatter_dims():
    d = one("d = f32[4,4] dot(p, p), lhs_batch_dims={}, lhs_contracting_dims={1}, "
            "rhs_contracting_dims={1}, operand_precision={highest,default}, algorithm=dot_f32_f32_f32")
    assert d.attr("lhs_contracting_dims") == (1,) and d.attr("lhs_batch_dims") == ()
    assert d.attr("operand_precision") == ("highest", "default")
    assert d.attr("algorithm") == "dot_f32_f32_f32"
    g = one("g = f32[3,6] gather(p, q), offset_dims={1}, collapsed_slice_dims={0}, "
            "start_index_map={0}, index_vector_dim=1, slice_sizes={1,6}, operand_batching_dims={}, "
            "start_indices_batching_dims={}, indices_are_sorted=true")
    assert (g.attr("offset_dims"), g.attr("index_vector_dim"), g.attr("slice_sizes"),
            g.attr("indices_are_sorted")) == ((1,), 1, (1, 6), True)
    s = one("s = f32[4,6] scatter(p, q, p), update_window_dims={1}, inserted_window_dims={0}, "
            "scatter_dims_to_operand_dims={0}, input_batching_dims={}, "
            "scatter_indices_batching_dims={}, index_vector_dim=1, unique_indices=false, to_apply=%add")
    assert (s.attr("update_window_dims"), s.attr("unique_indices"), s.attr("to_apply")) == (
        (1,), False, "add")


def test_word_and_int_attributes():
    c = one("c = pred[4,6] compare(p, p), direction=LT, type=TOTALORDER")
    assert (c.attr("direction"), c.attr("type")) == ("LT", "TOTALORDER")
    assert one("i = s32[4,6] iota(), iota_dimension=1").attr("iota_dimension") == 1
    assert one("g = f32[] get-tuple-element(p), index=2").attr("index") == 2
    r = one("r = bf16[4,6] reduce-precision(p), exponent_bits=8, mantissa_bits=7")
    assert (r.attr("exponent_bits"), r.attr("mantissa_bits")) == (8, 7)
    assert one("r = f32[4] rng(q, q), distribution=rng_uniform").attr("distribution") == "rng_uniform"
    f = one("f = c64[4,6] fft(p), fft_type=FFT, fft_length={6}")
    assert (f.attr("fft_type"), f.attr("fft_length")) == ("FFT", (6,))
    assert one("d = f32[2,3] dynamic-slice(p, q, q), dynamic_slice_sizes={2,3}").attr(
        "dynamic_slice_sizes") == (2, 3)
    s = one("s = f32[4,6] sort(p), dimensions={1}, is_stable=true, to_apply=cmp")
    assert s.attr("is_stable") is True


def test_called_computations():
    w = one("w = f32[] while(q), condition=%cond.1, body=body.2")
    assert w.called_computations() == ("cond.1", "body.2")
    c = one("c = f32[] conditional(q, q, q), branch_computations={%b0, b1}")
    assert c.attr("branch_computations") == ("b0", "b1")
    c = one("c = f32[] conditional(q, q, q), true_computation=t, false_computation=f")
    assert c.called_computations() == ("t", "f")
    s = one("s = f32[4,6] select-and-scatter(p, p, q), window={size=1x2}, select=ge, scatter=add")
    assert s.called_computations() == ("ge", "add")
    f = one("f = f32[4,6] fusion(p), kind=kLoop, calls=%fused_computation.2")
    assert (f.attr("kind"), f.attr("calls")) == ("kLoop", "fused_computation.2")


def test_custom_call_and_dim_labels():
    c = one('c = f32[2] custom-call(p), custom_call_target="__xla$$x", api_version=API_VERSION_TYPED_FFI, '
            'backend_config="{\\"a\\": 1}"')
    assert c.attr("custom_call_target") == "__xla$$x"
    assert c.attr("backend_config") == RawText('"{\\"a\\": 1}"')
    conv = one("c = f32[1,1] convolution(p, p), window={size=1x1}, dim_labels=b01f_01io->b01f, "
               "feature_group_count=1")
    assert conv.attr("dim_labels") == "b01f_01io->b01f"
    assert conv.attr("feature_group_count") == 1


def test_opaque_attributes_kept_verbatim():
    line = ('a = f32[4,6] add(p, p), metadata={op_name="jit(f)/add, {x}" source_line=3}, '
            'backend_config={"known_trip_count":{"n":"5"}}, frontend_attributes={_xla="1"}, '
            'sharding={devices=[2,1]0,1}, control-predecessors={%q}, origin={{"x"}}, '
            'statistics={visualizing_index=1}, schedule=SCHEDULE_LATEST')
    i = one(line)
    assert [k for k, _ in i.attributes] == ["metadata", "backend_config", "frontend_attributes",
                                            "sharding", "control-predecessors", "origin",
                                            "statistics", "schedule"]
    assert i.attr("metadata") == RawText('{op_name="jit(f)/add, {x}" source_line=3}')
    assert i.attr("sharding") == RawText("{devices=[2,1]0,1}")
    assert i.attr("schedule") == RawText("SCHEDULE_LATEST")


# -- literals ---------------------------------------------------------------------------------

def lit(shape: str, value: str) -> Literal:
    return one(f"c = {shape} constant({value})").attr("literal")


def test_scalar_and_nested_literals():
    assert lit("s32[]", "-7") == Literal((), (-7,))
    assert lit("f32[2,2]", "{ {1, 2}, {3, 4} }") == Literal((2, 2), (1.0, 2.0, 3.0, 4.0))
    assert lit("s8[2,1,3]", "{ { {1, 2, 3} }, { {4, 5, 6} } }").values == (1, 2, 3, 4, 5, 6)
    assert lit("f32[0]", "{}") == Literal((0,), ())


def test_special_float_literals():
    values = lit("f32[5]", "{inf, -inf, nan, -nan, 1e-05}").values
    assert values[0] == math.inf and values[1] == -math.inf
    assert math.isnan(values[2]) and math.copysign(1, values[3]) < 0
    assert values[4] == float(__import__("numpy").float32(1e-05))


def test_literal_rounded_to_type():
    assert lit("bf16[]", "0.79785").values == (0.796875,)
    assert lit("f64[]", "0.1").values == (0.1,)


def test_pred_complex_tuple_literals():
    assert lit("pred[3]", "{true, false, true}").values == (True, False, True)
    assert lit("c64[2]", "{(1, 2), (-0.5, inf)}").values == (1 + 2j, complex(-0.5, math.inf))
    t = lit("(f32[], s32[2])", "(1.5, {3, 4})")
    assert t == Literal((), (), (Literal((), (1.5,)), Literal((2,), (3, 4))))


def test_nan_literals_compare_equal():
    assert lit("f32[2]", "{nan, 1}") == lit("f32[2]", "{nan, 1}")
