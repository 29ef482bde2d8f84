"""Hero finding (XLA's FindNonTrivialHero) and the physical-layout helpers it relies on.

The layout helpers are checked against a brute-force truth: NumPy arrays holding each
element's physical offset.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fusion.errors import UnsupportedOpError
from fusion.analysis.hero import (
    find_hero,
    find_non_trivial_hero,
    fusion_roots,
    normalized_physical_transpose,
    reshape_is_bitcast,
    transpose_description,
)
from fusion.ir.layout import Layout
from fusion.text.parser import parse_hlo
from fusion.ir.shape import ArrayShape


def physical_offsets(shape: ArrayShape) -> np.ndarray:
    """offsets[logical index] = the element's position in memory (brute force)."""
    order = list(reversed(shape.effective_layout.minor_to_major))  # major to minor
    physical = np.arange(shape.num_elements).reshape([shape.dims[d] for d in order])
    return np.transpose(physical, np.argsort(order))


@st.composite
def shapes_with_layout(draw, max_rank=4):
    dims = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=max_rank)))
    m2m = tuple(draw(st.permutations(range(len(dims)))))
    return ArrayShape("f32", dims, Layout(m2m))


@settings(max_examples=200, deadline=None)
@given(shapes_with_layout(), st.data())
def test_reshape_is_bitcast_matches_brute_force(source, data):
    n = source.num_elements
    factors = [d for d in range(1, n + 1) if n % d == 0]
    dims, rest = [], n
    for _ in range(data.draw(st.integers(0, 3))):
        d = data.draw(st.sampled_from([f for f in factors if rest % f == 0]))
        dims.append(d)
        rest //= d
    dims.append(rest)
    m2m = tuple(data.draw(st.permutations(range(len(dims)))))
    result = ArrayShape("f32", tuple(dims), Layout(m2m))
    # A reshape keeps the row-major logical order; a bitcast keeps every physical offset.
    expected = np.array_equal(
        physical_offsets(source).reshape(-1), physical_offsets(result).reshape(-1)
    )
    assert reshape_is_bitcast(source, result) == expected


@settings(max_examples=200, deadline=None)
@given(shapes_with_layout(), st.data())
def test_normalized_physical_transpose_moves_data_like_numpy(source, data):
    perm = tuple(data.draw(st.permutations(range(source.rank))))
    m2m = tuple(data.draw(st.permutations(range(source.rank))))
    result = ArrayShape("f32", tuple(source.dims[p] for p in perm), Layout(m2m))
    in_dims, norm = normalized_physical_transpose(source, result, perm)
    # Memory of the source holds values 0..n-1 in physical order; the op's result, read in
    # its physical order, must equal a NumPy transpose of the normalized input.
    values = physical_offsets(source)
    logical_result = np.transpose(values, perm)
    result_memory = np.empty(result.num_elements, dtype=np.int64)
    result_memory[physical_offsets(result).reshape(-1)] = logical_result.reshape(-1)
    expected = np.transpose(np.arange(source.num_elements).reshape(in_dims or (1,)),
                            norm or (0,)).reshape(-1)
    assert np.array_equal(result_memory, expected)
    assert all(d > 1 for d in in_dims)
    assert all(b != a + 1 for a, b in zip(norm, norm[1:]))  # adjacent groups were merged


def module(body: str, params: str = "f32[64,128]"):
    text = f"HloModule m\n\nfused {{\n{body}\n}}\n\nENTRY e {{\n  a = {params} parameter(0)\n" \
           "  ROOT r = f32[] constant(0)\n}\n"
    m = parse_hlo(text)
    return m.computation("fused")


def test_hero_through_unary_chain_reaches_reduce():
    comp = module("""
  p = f32[64,128] parameter(0)
  c = f32[] constant(0)
  r = f32[64] reduce(p, c), dimensions={1}, to_apply=add
  b = f32[8,8] bitcast(r)
  n = f32[8,8] negate(b)
  ROOT e = f32[8,8] exponential(n)
}

add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)""")
    assert find_hero(comp, "e") == "r"
    assert find_non_trivial_hero(comp, "e") == "r"


def test_reduce_behind_binary_op_is_not_a_hero_in_xla_but_is_with_constant_operands_ignored():
    comp = module("""
  p = f32[64,128] parameter(0)
  c = f32[] constant(0)
  r = f32[64] reduce(p, c), dimensions={1}, to_apply=add
  one = f32[] constant(1)
  b = f32[64] broadcast(one), dimensions={}
  ROOT d = f32[64] divide(b, r)
}

add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)""")
    assert find_non_trivial_hero(comp, "d") == "d"
    assert find_non_trivial_hero(comp, "d", ignore_constant_operands=True) == "r"


def test_transpose_found_through_binary_op_seed_example():
    # Seed: param -> log -> {transpose, add}; the add reads the transpose.
    comp = module("""
  p = f32[64,64] parameter(0)
  l = f32[64,64] log(p)
  t = f32[64,64] transpose(l), dimensions={1,0}
  ROOT a = f32[64,64] add(l, t)""", "f32[64,64]")
    assert find_non_trivial_hero(comp, "a") == "t"
    assert find_hero(comp, "a") == "a"


def test_two_transposes_give_no_hero_and_non_elementwise_epilogue_rejects_one():
    two = module("""
  p = f32[64,64] parameter(0)
  t1 = f32[64,64] transpose(p), dimensions={1,0}
  e = f32[64,64] exponential(p)
  t2 = f32[64,64] transpose(e), dimensions={1,0}
  ROOT a = f32[64,64] add(t1, t2)""", "f32[64,64]")
    assert find_non_trivial_hero(two, "a") == "a"
    reversed_after = module("""
  p = f32[64,64] parameter(0)
  t = f32[64,64] transpose(p), dimensions={1,0}
  ROOT v = f32[64,64] reverse(t), dimensions={0}""", "f32[64,64]")
    assert find_non_trivial_hero(reversed_after, "v") == "v"


def test_bitcast_transpose_is_walked_through_and_small_transpose_is_no_hero():
    comp = module("""
  p = f32[64,1,128] parameter(0)
  t = f32[1,64,128] transpose(p), dimensions={1,0,2}
  ROOT e = f32[1,64,128] exponential(t)""", "f32[64,1,128]")
    assert find_non_trivial_hero(comp, "e") == "e"
    small = module("""
  p = f32[8,8] parameter(0)
  ROOT t = f32[8,8] transpose(p), dimensions={1,0}""", "f32[8,8]")
    assert transpose_description(small, small.instruction("t")) is None


@pytest.mark.parametrize(
    "dims,expected",
    [((16, 16), True), ((15, 64), False), ((8, 1024), True), ((8, 512), False), ((7, 4096), False)],
)
def test_transpose_size_thresholds_follow_xla(dims, expected):
    a, b = dims
    comp = module(f"""
  p = f32[{a},{b}] parameter(0)
  ROOT t = f32[{b},{a}] transpose(p), dimensions={{1,0}}""", f"f32[{a},{b}]")
    assert (transpose_description(comp, comp.instruction("t")) is not None) == expected


def test_copy_changing_layout_is_a_transpose_and_copy_keeping_it_is_not():
    comp = module("""
  p = f32[64,32]{0,1} parameter(0)
  ROOT c = f32[64,32]{1,0} copy(p)""", "f32[64,32]{0,1}")
    desc = transpose_description(comp, comp.instruction("c"))
    assert desc is not None and desc.permutation == (0, 2, 1) and desc.dimensions == (1, 32, 64)
    same = module("""
  p = f32[64,32] parameter(0)
  ROOT c = f32[64,32] copy(p)""", "f32[64,32]")
    assert transpose_description(same, same.instruction("c")) is None


def test_fusion_roots_of_tuple_and_get_tuple_element():
    comp = module("""
  p = f32[64,128] parameter(0)
  c = f32[] constant(0)
  r = (f32[64], f32[64]) reduce(p, p, c, c), dimensions={1}, to_apply=add2
  g0 = f32[64] get-tuple-element(r), index=0
  e = f32[64,128] exponential(p)
  ROOT t = (f32[64], f32[64,128]) tuple(g0, e)
}

add2 {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  z = f32[] parameter(2)
  w = f32[] parameter(3)
  s = f32[] add(x, z)
  u = f32[] add(y, w)
  ROOT o = (f32[], f32[]) tuple(s, u)""")
    assert fusion_roots(comp) == ("r", "e")


def test_nested_tuple_root_is_rejected_with_the_op_name():
    comp = module("""
  p = f32[64,128] parameter(0)
  i = (f32[64,128]) tuple(p)
  ROOT t = ((f32[64,128])) tuple(i)""")
    with pytest.raises(UnsupportedOpError, match="nested tuples"):
        fusion_roots(comp)


def test_physical_offsets_helper_is_row_major_for_default_layout():
    offsets = physical_offsets(ArrayShape("f32", (2, 3)))
    assert [offsets[i, j] for i, j in itertools.product(range(2), range(3))] == list(range(6))


def test_walk_stops_at_an_op_whose_operands_are_all_constant():
    # Found by fuzzing: bitcast-convert(broadcast(constant)) under xor made the unary walk
    # index an empty operand list.
    from fusion.analysis.emitter_kind import analyze_fusion
    from fusion.text.parser import parse_hlo

    module = parse_hlo("""HloModule m
fused {
  p = f32[2,3] parameter(0)
  c = s32[] constant(127)
  b = s32[2,3] broadcast(c), dimensions={}
  bc = s32[2,3] bitcast-convert(b)
  ROOT x = s32[2,3] xor(bc, b)
}
ENTRY e {
  x = f32[2,3] parameter(0)
  ROOT f = s32[2,3] fusion(x), kind=kLoop, calls=fused
}""")
    analysis = analyze_fusion(module, module.entry.root, ignore_constant_operands=True)
    assert analysis.kind.value == "loop"
