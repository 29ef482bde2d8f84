"""Fusion maps against the reference evaluator (random chains of data-movement ops), the
unsimplified composition against the simplified one, multi-output fusions, undefined ops."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings, strategies as st

from fusion.text.parser import parse_hlo
from tests.tiling.indexing_oracle import check_copy, iota_input, read_sets
from tiling import input_to_output_indexing, output_to_input_indexing
from tiling.indexing_analysis.fusion_indexing import output_to_input_indexing_of_computation
from tiling.indexing_analysis import input_to_output_indexing_per_output
from tiling.indexing_analysis.op_indexing import op_output_to_input
from tiling.indexing_analysis.operands import Operand
from tiling.maps.indexing_map import IndexingMap, compose, enumerate_points


def st_text(dims):
    return f"s32[{','.join(map(str, dims))}]"


@st.composite
def chains(draw):
    """A fused computation: a chain of data-movement ops from p0, optionally ending in a
    concatenate of the chain with its own reverse (two paths to p0)."""
    dims = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=3)))
    lines = [f"p0 = {st_text(dims)} parameter(0)"]
    cur, name = dims, "p0"
    for i in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["transpose", "reverse", "slice", "reshape", "pad", "negate"]))
        new = f"v{i}"
        if kind == "transpose":
            perm = draw(st.permutations(range(len(cur))))
            cur = tuple(cur[p] for p in perm)
            lines.append(f"{new} = {st_text(cur)} transpose({name}), dimensions={{{','.join(map(str, perm))}}}")
        elif kind == "reverse":
            lines.append(f"{new} = {st_text(cur)} reverse({name}), dimensions={{0}}")
        elif kind == "slice":
            cur2 = tuple((n + 1) // 2 for n in cur)
            parts = ", ".join(f"[{n % 2}:{n}:2]" if n > 1 else "[0:1:1]" for n in cur)
            cur2 = tuple(len(range(n % 2, n, 2)) if n > 1 else 1 for n in cur)
            lines.append(f"{new} = {st_text(cur2)} slice({name}), slice={{{parts}}}")
            cur = cur2
        elif kind == "reshape":
            n = math.prod(cur)
            options = [(n,)] + [(a, n // a) for a in range(1, n + 1) if n % a == 0]
            cur = draw(st.sampled_from(options))
            lines.append(f"{new} = {st_text(cur)} reshape({name})")
        elif kind == "pad":
            cur = tuple(n + 1 + (n - 1) for n in cur)
            lines.append(f"c{i} = s32[] constant(-1)")
            lines.append(f"{new} = {st_text(cur)} pad({name}, c{i}), padding={'x'.join('1_0_1' for _ in cur)}")
        else:
            lines.append(f"{new} = {st_text(cur)} copy({name})")
        name = new
    if draw(st.booleans()):
        lines.append(f"rv = {st_text(cur)} reverse({name}), dimensions={{0}}")
        cur = tuple(2 * n if k == 0 else n for k, n in enumerate(cur))
        lines.append(f"cc = {st_text(cur)} concatenate({name}, rv), dimensions={{0}}")
        name = "cc"
    lines.append(f"ROOT out = {st_text(cur)} copy({name})")
    text = ("HloModule m\nf {\n  " + "\n  ".join(lines) + "\n}\nENTRY e {\n"
            f"  x = {st_text(dims)} parameter(0)\n"
            f"  ROOT r = {st_text(cur)} fusion(x), kind=kLoop, calls=f\n}}\n")
    return parse_hlo(text), dims


@settings(max_examples=40, deadline=None)
@given(chains())
def test_random_chains_read_what_the_evaluator_copies(case):
    module, dims = case
    (maps,) = output_to_input_indexing(module.entry.root, module)
    check_copy(module, [list(maps)], [iota_input(dims)], (0,))


def _points(m: IndexingMap) -> set:
    return {(dims, m.evaluate(dims, syms)) for dims, syms in enumerate_points(m)}


@settings(max_examples=40, deadline=None)
@given(chains())
def test_simplification_preserves_every_point(case):
    """Compose the op maps along every path without simplifying; the points (output index,
    input index) are those of the simplified maps the analysis returns."""
    module, _ = case
    comp = module.computation("f")
    paths = [(comp.root_name, IndexingMap.identity(comp.root.shape.dims))]
    raw: set = set()
    while paths:
        name, m = paths.pop()
        instr = comp.instruction(name)
        if instr.opcode == "parameter":
            raw |= _points(m)
            continue
        operands = tuple(Operand(comp.instruction(o).shape, comp.instruction(o))
                         for o in instr.operands)
        for op_name, op_map in zip(instr.operands, op_output_to_input(instr, operands)):
            paths.append((op_name, compose(op_map, m, simplify=False)))
    (maps,) = output_to_input_indexing(module.entry.root, module)
    simplified = set().union(*(_points(m) for m in maps)) if maps else set()
    assert raw == simplified


MULTI_OUTPUT = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
f {
  p0 = f32[4,6] parameter(0)
  p1 = f32[6] parameter(1)
  z = f32[] constant(0)
  t = f32[6,4] transpose(p0), dimensions={1,0}
  red = f32[6] reduce(p0, z), dimensions={0}, to_apply=add
  s = f32[6] add(red, p1)
  ROOT tup = (f32[6,4], f32[6]) tuple(t, s)
}
ENTRY e {
  x = f32[4,6] parameter(0)
  y = f32[6] parameter(1)
  ROOT r = (f32[6,4], f32[6]) fusion(x, y), kind=kInput, calls=f
}
"""


def test_multi_output_fusion_is_indexed_per_output():
    m = parse_hlo(MULTI_OUTPUT)
    root = m.entry.root
    out0 = output_to_input_indexing(root, m, output_index=0)
    out1 = output_to_input_indexing(root, m, output_index=1)
    assert [str(x) for x in out0[0]] == ["(d0, d1) -> (d1, d0), domain: d0 in [0, 5], d1 in [0, 3]"]
    assert out0[1] == frozenset()  # output 0 does not read p1
    assert [str(x) for x in out1[0]] == ["(d0)[s0] -> (s0, d0), domain: d0 in [0, 5], s0 in [0, 3]"]
    assert [str(x) for x in out1[1]] == ["(d0) -> (d0), domain: d0 in [0, 5]"]
    per_output = input_to_output_indexing_per_output(root, 0, m)
    assert [sorted(str(x) for x in s) for s in per_output] == [
        ["(d0, d1) -> (d1, d0), domain: d0 in [0, 3], d1 in [0, 5]"],
        ["(d0, d1) -> (d1), domain: d0 in [0, 3], d1 in [0, 5]"]]
    assert [sorted(str(x) for x in s) for s in input_to_output_indexing_per_output(root, 1, m)] \
        == [[], ["(d0) -> (d0), domain: d0 in [0, 5]"]]


UNDEFINED = """HloModule m
f {
  p0 = f32[8] parameter(0)
  cc = f32[8] custom-call(p0), custom_call_target="foo"
  n = f32[8] negate(cc)
  ROOT a = f32[8] add(n, p0)
}
ENTRY e {
  x = f32[8] parameter(0)
  ROOT r = f32[8] fusion(x), kind=kLoop, calls=f
}
"""


def test_undefined_propagates_through_composition():
    m = parse_hlo(UNDEFINED)
    (maps,) = output_to_input_indexing(m.entry.root, m)
    assert sorted(str(x) for x in maps) == ["(d0) -> (d0), domain: d0 in [0, 7]", "UNDEFINED"]
    per = output_to_input_indexing_of_computation(m.computation("f"), m)
    assert [str(x) for x in per["n"]] == ["(d0) -> (d0), domain: d0 in [0, 7]"]
    assert [str(x) for x in per["cc"]] == ["(d0) -> (d0), domain: d0 in [0, 7]"]
    assert input_to_output_indexing(m.entry.root, 0, m) == frozenset(
        {IndexingMap.undefined(), IndexingMap.identity((8,))})


def test_unsupported_ops_are_undefined_not_errors():
    m = parse_hlo("""HloModule m
cmp {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=LT
}
ENTRY e {
  x = f32[5] parameter(0)
  ROOT s = f32[5] sort(x), dimensions={0}, to_apply=cmp
}""")
    assert [str(x) for x in output_to_input_indexing(m.entry.root, m)[0]] == ["UNDEFINED"]
    assert [str(x) for x in input_to_output_indexing(m.entry.root, 0, m)] == ["UNDEFINED"]


def test_clamp_with_scalar_bounds_and_select():
    m = parse_hlo("""HloModule m
ENTRY e {
  lo = f32[] parameter(0)
  x = f32[3,2] parameter(1)
  hi = f32[] parameter(2)
  ROOT c = f32[3,2] clamp(lo, x, hi)
}""")
    maps = output_to_input_indexing(m.entry.root, m)
    assert [sorted(str(x) for x in s) for s in maps] == [
        ["(d0, d1) -> (), domain: d0 in [0, 2], d1 in [0, 1]"],
        ["(d0, d1) -> (d0, d1), domain: d0 in [0, 2], d1 in [0, 1]"],
        ["(d0, d1) -> (), domain: d0 in [0, 2], d1 in [0, 1]"]]
