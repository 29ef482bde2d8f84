"""The seed's fusion examples: one input read through several maps, maps deduplicated up to
simplification, softmax, and chained reshapes that cancel."""
from __future__ import annotations

from fusion.text.parser import parse_hlo
from tests.tiling.indexing_seed_helpers import normalize, only, texts
from tiling import output_to_input_indexing
from tiling.indexing_analysis.fusion_indexing import output_to_input_indexing_of_computation


def fusion_module(fused: str, params: list[str], root_shape: str):
    args = ", ".join(f"x{i}" for i in range(len(params)))
    entry = "\n".join(f"  x{i} = {s} parameter({i})" for i, s in enumerate(params))
    return parse_hlo(f"HloModule m\n{fused}\nENTRY e {{\n{entry}\n"
                     f"  ROOT r = {root_shape} fusion({args}), kind=kLoop, calls=f\n}}\n")


P0_PLUS_TRANSPOSE = """
f {
  p0 = f32[1000, 1000] parameter(0)
  transpose_p0 = f32[1000, 1000]{0, 1} transpose(p0), dimensions={1, 0}
  ROOT a0 = f32[1000, 1000] add(p0, transpose_p0)
}
"""


def test_one_input_two_maps():
    m = fusion_module(P0_PLUS_TRANSPOSE, ["f32[1000,1000]"], "f32[1000,1000]")
    (maps,) = output_to_input_indexing(m.entry.root, m)
    assert sorted(str(x).split(", domain")[0] for x in maps) == [
        "(d0, d1) -> (d0, d1)", "(d0, d1) -> (d1, d0)"]


TRANSPOSE_CHAIN = """
f {
  p0 = f32[20, 10, 50] parameter(0)
  lhs_transpose_1 = f32[10, 20, 50] transpose(p0), dimensions={1, 0, 2}
  lhs_e = f32[10, 20, 50] exponential(lhs_transpose_1)
  lhs_transpose_2 = f32[10, 50, 20] transpose(lhs_e), dimensions={0, 2, 1}
  rhs_transpose_1 = f32[50, 10, 20] transpose(p0), dimensions={2, 1, 0}
  rhs_log = f32[50, 10, 20] exponential(rhs_transpose_1)
  rhs_transpose_2 = f32[10, 50, 20] transpose(rhs_log), dimensions={1, 0, 2}
  ROOT add = f32[10, 50, 20] add(lhs_transpose_2, rhs_transpose_2)
}
"""


def test_one_input_deduplicated_maps():
    m = fusion_module(TRANSPOSE_CHAIN, ["f32[20,10,50]"], "f32[10,50,20]")
    (maps,) = output_to_input_indexing(m.entry.root, m)
    assert texts(maps) == [normalize(
        "(d0, d1, d2) -> (d2, d0, d1)\ndomain:\nd0 in [0, 9]\nd1 in [0, 49]\nd2 in [0, 19]")]


SOFTMAX = """
add_f {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
max_f {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] maximum(a, b)
}
f {
  p0 = f32[2,65,125] parameter(0)
  ninf = f32[] constant(-inf)
  mx = f32[2,65] reduce(p0, ninf), dimensions={2}, to_apply=max_f
  mxb = f32[2,65,125] broadcast(mx), dimensions={0,1}
  sub = f32[2,65,125] subtract(p0, mxb)
  e = f32[2,65,125] exponential(sub)
  zero = f32[] constant(0)
  sm = f32[2,65] reduce(e, zero), dimensions={2}, to_apply=add_f
  smb = f32[2,65,125] broadcast(sm), dimensions={0,1}
  ROOT div = f32[2,65,125] divide(e, smb)
}
"""


def test_softmax():
    m = fusion_module(SOFTMAX, ["f32[2,65,125]"], "f32[2,65,125]")
    (maps,) = output_to_input_indexing(m.entry.root, m)
    assert texts(maps) == sorted(normalize(t) for t in ["""
(d0, d1, d2)[s0] -> (d0, d1, s0)
domain:
d0 in [0, 1]
d1 in [0, 64]
d2 in [0, 124]
s0 in [0, 124]
""", """
(d0, d1, d2) -> (d0, d1, d2)
domain:
d0 in [0, 1]
d1 in [0, 64]
d2 in [0, 124]
"""])


RESHAPE_CHAIN = """
f {
  p0 = f32[10, 10, 10] parameter(0)
  reshape1 = f32[50, 20] reshape(p0)
  ROOT reshape2 = f32[10, 10, 10] reshape(reshape1)
}
"""


def test_chained_reshapes_cancel():
    m = fusion_module(RESHAPE_CHAIN, ["f32[10,10,10]"], "f32[10,10,10]")
    (maps,) = output_to_input_indexing(m.entry.root, m)
    assert str(only(maps)).split(", domain")[0] == "(d0, d1, d2) -> (d0, d1, d2)"


def test_per_instruction_maps():
    m = fusion_module(TRANSPOSE_CHAIN, ["f32[20,10,50]"], "f32[10,50,20]")
    per = output_to_input_indexing_of_computation(m.computation("f"), m)
    assert set(per) == {i.name for i in m.computation("f").instructions}
    assert str(only(per["lhs_e"])).split(", domain")[0] == "(d0, d1, d2) -> (d0, d2, d1)"
    assert str(only(per["rhs_log"])).split(", domain")[0] == "(d0, d1, d2) -> (d1, d0, d2)"
