"""The printer: XLA's style, and print -> parse gives back an equal module (hypothesis)."""
from __future__ import annotations

import functools
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion.ir.attributes import (Literal, PaddingConfig, PaddingDim, RawText, SliceDim, Window,
                               WindowDim)
from fusion.ir.element_types import ELEMENT_TYPES
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.ir.layout import COMBINED, Layout, Tile
from fusion.text.literal_parsing import NAN, NEG_NAN
from fusion.text.parser import parse_hlo, parse_shape
from fusion.text.printer import print_hlo, print_instruction, print_literal, print_shape
from fusion.ir.shape import ArrayShape, TupleShape


def test_module_style():
    module = parse_hlo("""HloModule m, is_scheduled=true

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(f32[] %a, f32[] %b), metadata={op_name="x"}
}

ENTRY %main.5 (p: f32[2]) -> f32[] {
  %p = f32[2]{0} parameter(0)
  %z = f32[] constant(0)
  ROOT %r = f32[] reduce(%p, %z), dimensions={0}, to_apply=%add
}""")
    assert print_hlo(module) == """HloModule m, is_scheduled=true

add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b), metadata={op_name="x"}
}

ENTRY main.5 {
  p = f32[2]{0} parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[] reduce(p, z), dimensions={0}, to_apply=add
}
"""


def test_floats_shortest_for_their_type():
    assert print_literal(Literal((), (float(np.float32(0.1)),)), "f32") == "0.1"
    assert print_literal(Literal((), (0.1,)), "f64") == "0.1"
    assert print_literal(Literal((), (0.796875,)), "bf16") == "0.797"
    assert print_literal(Literal((), (1e-05,)), "f64") == "1e-05"
    assert print_literal(Literal((), (-0.0,)), "f32") == "-0.0"  # "-0" would read back as +0
    assert print_literal(Literal((3,), (math.inf, -math.inf, NEG_NAN)), "f16") == "{inf, -inf, -nan}"
    assert print_literal(Literal((2,), (1 + 2j, -0.5j)), "c64") == "{(1, 2), (-0.0, -0.5)}"
    assert print_literal(Literal((2,), (True, False)), "pred") == "{true, false}"
    assert print_literal(Literal((2, 0), ()), "s32") == "{ {}, {} }"


def test_tuple_constant_and_shapes():
    shape = parse_shape("(f32[], s32[2])")
    lit = Literal((), (), (Literal((), (1.5,)), Literal((2,), (3, 4))))
    assert print_literal(lit, shape) == "(1.5, {3, 4})"
    assert print_shape(parse_shape("f32[<=8,3]{1,0:T(8,128)(2,*)E(4)S(1)}")) == \
        "f32[<=8,3]{1,0:T(8,128)(2,*)E(4)S(1)}"


def test_instruction_attributes_in_order():
    instr = HloInstruction("w", "while", TupleShape(()), ("t",),
                           (("body", "b"), ("condition", "c"), ("backend_config", RawText('"x"'))))
    assert print_instruction(instr, is_root=True) == 'ROOT w = () while(t), body=b, condition=c, backend_config="x"'


# -- hypothesis: random modules round-trip ------------------------------------------------------

names = st.from_regex(r"[a-z_][a-z0-9_]{0,5}(\.[0-9]{1,2})?(-[a-z]{1,3})?", fullmatch=True)
small = st.integers(0, 5)

# The composite strategies taking arguments are cached (functools.cache): one strategy object
# per argument tuple, validated by hypothesis once instead of at every draw.  The examples
# drawn are the same.

@functools.cache
@st.composite
def layouts(draw, rank):
    minor_to_major = tuple(draw(st.permutations(range(rank))))
    tiles = tuple(Tile(tuple(draw(st.lists(st.one_of(st.integers(1, 256), st.just(COMBINED)),
                                           min_size=1, max_size=3))))
                  for _ in range(draw(st.integers(0, 2))))
    extras = tuple(draw(st.lists(st.sampled_from(["D(D,C)", "L(4)", "#(s64)", "*(s32)", "SC(0:1)"]),
                                 max_size=2)))
    return Layout(minor_to_major, tiles, draw(st.sampled_from([0, 4, 8])), draw(st.integers(0, 2)),
                  extras)


@st.composite
def array_shapes(draw, dtypes=st.sampled_from(sorted(ELEMENT_TYPES)), max_rank=3):
    dims = tuple(draw(st.lists(st.integers(0, 4), max_size=max_rank)))
    dynamic = tuple(draw(st.lists(st.booleans(), min_size=len(dims), max_size=len(dims))))
    layout = draw(st.one_of(st.none(), layouts(len(dims))))
    return ArrayShape(draw(dtypes), dims, layout, dynamic)


shapes = st.recursive(array_shapes(), lambda inner: st.lists(inner, max_size=3).map(
    lambda e: TupleShape(tuple(e))), max_leaves=5)

_SPECIALS_OK = {"f16", "bf16", "f32", "f64"}


@functools.cache
@st.composite
def literal_values(draw, dtype, count):
    etype = ELEMENT_TYPES[dtype]
    if etype.kind == "pred":
        return tuple(draw(st.lists(st.booleans(), min_size=count, max_size=count)))
    if etype.kind in ("signed", "unsigned"):
        lo, hi = (-(2 ** (etype.bits - 1)), 2 ** (etype.bits - 1) - 1) if etype.kind == "signed" \
            else (0, 2 ** etype.bits - 1)
        return tuple(draw(st.lists(st.integers(lo, hi), min_size=count, max_size=count)))
    part = "f32" if dtype == "c64" else "f64" if dtype == "c128" else dtype
    special = part in _SPECIALS_OK
    raw = draw(st.lists(st.floats(allow_nan=special, allow_infinity=special, width=64,
                                  min_value=None if special else -2.0,
                                  max_value=None if special else 2.0),
                        min_size=count * (2 if etype.is_complex else 1),
                        max_size=count * (2 if etype.is_complex else 1)))
    with np.errstate(all="ignore"):
        cast = np.asarray(raw, dtype=np.float64).astype(ELEMENT_TYPES[part].numpy_dtype()).astype(
            np.float64).tolist()
    cast = [(NEG_NAN if math.copysign(1, r) < 0 else NAN) if math.isnan(v) else v
            for v, r in zip(cast, raw)]
    if etype.is_complex:
        return tuple(complex(a, b) for a, b in zip(cast[::2], cast[1::2]))
    return tuple(cast)


@st.composite
def constant_parts(draw):
    """A constant's shape and literal (the instruction is named by its computation)."""
    value_types = sorted(t for t, e in ELEMENT_TYPES.items() if e.has_values)
    shape = draw(array_shapes(dtypes=st.sampled_from(value_types), max_rank=2))
    return shape, Literal(shape.dims, draw(literal_values(shape.dtype, shape.num_elements)))


constants = constant_parts()


attribute_values = st.one_of(
    st.tuples(st.just("dimensions"), st.lists(small, max_size=3).map(tuple)),
    st.tuples(st.just("slice"), st.lists(st.builds(SliceDim, small, small, st.integers(1, 3)),
                                         min_size=1, max_size=3).map(tuple)),
    st.tuples(st.just("padding"), st.lists(st.builds(PaddingDim, st.integers(-3, 3),
                                                     st.integers(-3, 3), small),
                                           min_size=1, max_size=3).map(lambda d: PaddingConfig(tuple(d)))),
    st.tuples(st.just("window"), st.lists(st.builds(
        WindowDim, st.integers(1, 4), st.integers(1, 3), small, small, st.integers(1, 2),
        st.integers(1, 2), st.booleans()), max_size=3).map(lambda d: Window(tuple(d)))),
    st.tuples(st.sampled_from(["index", "iota_dimension", "index_vector_dim"]), small),
    st.tuples(st.sampled_from(["is_stable", "indices_are_sorted", "unique_indices"]), st.booleans()),
    st.tuples(st.sampled_from(["kind", "direction", "type"]),
              st.sampled_from(["kLoop", "kInput", "LT", "GE", "TOTALORDER"])),
    st.tuples(st.sampled_from(["to_apply", "calls", "body"]), names),
    st.tuples(st.just("branch_computations"), st.lists(names, max_size=3).map(tuple)),
    st.tuples(st.just("custom_call_target"), st.text("ab$_\"\\ .", max_size=6)),
    st.tuples(st.just("operand_precision"), st.lists(st.sampled_from(["default", "highest"]),
                                                     max_size=2).map(tuple)),
    st.tuples(st.sampled_from(["metadata", "backend_config", "sharding", "mystery_attr"]),
              st.sampled_from(['{op_name="a, b}" x=1}', '"{\\"k\\": [1, 2]}"', "{replicated}",
                               "3x4", "{maximal device=0}"]).map(RawText)),
)


instruction_names = st.lists(names.filter(lambda n: n != "ROOT"), min_size=1, max_size=5,
                             unique=True)


@st.composite
def computations(draw, name, is_entry):
    instrs = []
    used: set[str] = set()
    # One strategy for all the names: a filter built per draw re-validates its strategy.
    for i, iname in enumerate(draw(instruction_names)):
        used.add(iname)
        kind = draw(st.sampled_from(["parameter", "constant", "op"]))
        if kind == "parameter":
            instrs.append(HloInstruction(iname, "parameter", draw(shapes), (),
                                         (("parameter_number", i),)))
        elif kind == "constant":
            shape, literal = draw(constants)
            instrs.append(HloInstruction(iname, "constant", shape, (), (("literal", literal),)))
        else:
            operands = tuple(draw(st.lists(st.sampled_from(sorted(used)), max_size=3)))
            attrs = tuple(draw(st.lists(attribute_values, max_size=4,
                                        unique_by=lambda kv: kv[0])))
            opcode = draw(st.sampled_from(["add", "get-tuple-element", "fusion", "my-new-op"]))
            instrs.append(HloInstruction(iname, opcode, draw(shapes), operands, attrs))
    root = draw(st.sampled_from([i.name for i in instrs]))
    return HloComputation(name, tuple(instrs), root, is_entry)


@st.composite
def modules(draw):
    comp_names = draw(st.lists(names, min_size=1, max_size=3, unique=True))
    comps = tuple(draw(computations(n, i == len(comp_names) - 1)) for i, n in enumerate(comp_names))
    attributes = tuple(draw(st.lists(st.sampled_from(
        [("is_scheduled", "true"), ("entry_computation_layout", "{(f32[2]{0})->f32[2]{0}}"),
         ("num_partitions", "2")]), unique=True, max_size=3)))
    frames = draw(st.sampled_from(["", 'FileNames\n1 "a.py"\n\nStackFrames\n1 {file_location_id=1 parent_frame_id=1}']))
    return HloModule(draw(names), comps, comp_names[-1], attributes, frames)


@settings(max_examples=75, deadline=None)
@given(modules())
def test_random_modules_round_trip(module):
    text = print_hlo(module)
    assert parse_hlo(text) == module
    assert print_hlo(parse_hlo(text)) == text


@settings(max_examples=100, deadline=None)
@given(shapes)
def test_random_shapes_round_trip(shape):
    assert parse_shape(print_shape(shape)) == shape


def test_complex_nan_constant_round_trips():
    # Found by the random round trip: NaN != NaN made a complex NaN literal parse back unequal.
    text = "HloModule m\nENTRY e {\n  ROOT c = c128[2] constant({(0, nan), (1, -nan)})\n}\n"
    module = parse_hlo(text)
    assert parse_hlo(print_hlo(module)) == module
