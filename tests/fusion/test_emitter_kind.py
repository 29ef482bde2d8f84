"""Emitter kind decisions (XLA's GetEmitterFusionKind) on small realistic fusions.

Reduction groupings are checked against NumPy: reducing the grouped physical 3-D view must
give the logical reduce.  The corpus test runs every fusion XLA made in tests/data/hlo.
"""
from __future__ import annotations

import pathlib

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fusion.analysis.emitter_kind import EmitterKind, analyze_computation, analyze_fusion
from fusion.errors import HloVerifyError, UnsupportedOpError
from fusion.ir.layout import Layout
from fusion.text.parser import parse_hlo
from fusion.analysis.reduction_kind import dimensions_are_consecutive, reduction_dimensions
from fusion.ir.shape import ArrayShape

ROOT_DIR = pathlib.Path(__file__).resolve().parents[2]
CORPUS = ROOT_DIR / "tests" / "data" / "hlo"

ADD = """
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}

max {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] maximum(x, y)
}
"""


def analyze(fused: str, params: list[str], out: str, extra: str = "", **kw):
    """Wrap ``fused`` (a computation body) in a module whose entry calls it; analyze it."""
    args = "\n".join(f"  a{i} = {s} parameter({i})" for i, s in enumerate(params))
    operands = ", ".join(f"a{i}" for i in range(len(params)))
    text = (
        f"HloModule m\n{ADD}\nfused {{\n{fused}\n}}\n\nENTRY e {{\n{args}\n"
        f"  ROOT f = {out} fusion({operands}), kind=kLoop, calls=fused{extra}\n}}\n"
    )
    m = parse_hlo(text)
    return analyze_fusion(m, m.entry.root, **kw)


def test_row_reduction_softmax_max():
    a = analyze("""
  p = f32[128,1024] parameter(0)
  c = f32[] constant(-inf)
  ROOT reduce.3 = f32[128] reduce(p, c), dimensions={1}, to_apply=max""",
                ["f32[128,1024]"], "f32[128]")
    assert a.kind == EmitterKind.REDUCTION and a.heroes == ("reduce.3",)
    assert a.is_row_reduction is True
    assert (a.reduced_dims, a.kept_dims, a.reduction_dimensions) == ((1,), (0,), (1, 128, 1024))
    assert "reduce.3" in a.reason and "{1}" in a.reason and "f32[128,1024]" in a.reason
    assert "row reduction" in a.reason


def test_column_reduction_with_unary_epilogue():
    a = analyze("""
  p = f32[1024,256] parameter(0)
  c = f32[] constant(0)
  r = f32[256] reduce(p, c), dimensions={0}, to_apply=add
  ROOT s = f32[256] sqrt(r)""", ["f32[1024,256]"], "f32[256]")
    assert a.kind == EmitterKind.REDUCTION and a.heroes == ("r",)
    assert a.is_row_reduction is False and a.reduction_dimensions == (1, 1024, 256)
    assert "column reduction" in a.reason


def test_small_reduction_prefers_loop_emitter_and_says_why():
    a = analyze("""
  p = f32[3,5] parameter(0)
  c = f32[] constant(0)
  ROOT r = f32[3] reduce(p, c), dimensions={1}, to_apply=add""", ["f32[3,5]"], "f32[3]")
    assert a.kind == EmitterKind.LOOP and "too small" in a.reason


def test_multi_output_reduction_sharing_inputs():
    a = analyze("""
  p = f32[64,512] parameter(0)
  c = f32[] constant(0)
  e = f32[64,512] exponential(p)
  r1 = f32[64] reduce(e, c), dimensions={1}, to_apply=add
  m = f32[64,512] multiply(e, e)
  r2 = f32[64] reduce(m, c), dimensions={1}, to_apply=add
  ROOT t = (f32[64], f32[64], f32[64,512]) tuple(r1, r2, e)""",
                ["f32[64,512]"], "(f32[64], f32[64], f32[64,512])")
    assert a.kind == EmitterKind.REDUCTION
    assert a.heroes == ("r1", "r2", "e") and a.roots == ("r1", "r2", "e")
    assert "3 outputs" in a.reason


def test_multi_output_with_incompatible_reductions_is_loop():
    a = analyze("""
  p = f32[64,512] parameter(0)
  c = f32[] constant(0)
  r1 = f32[64] reduce(p, c), dimensions={1}, to_apply=add
  r2 = f32[512] reduce(p, c), dimensions={0}, to_apply=add
  ROOT t = (f32[64], f32[512]) tuple(r1, r2)""", ["f32[64,512]"], "(f32[64], f32[512])")
    assert a.kind == EmitterKind.LOOP and "not compatible" in a.reason


def test_transpose_via_transpose_op():
    a = analyze("""
  p = f32[20,160,170] parameter(0)
  e = f32[20,160,170] exponential(p)
  t = f32[170,160,20] transpose(e), dimensions={2,1,0}
  ROOT r = f32[170,160,20] abs(t)""", ["f32[20,160,170]"], "f32[170,160,20]")
    # The seed's transpose-emitter example: exp, transpose, abs.
    assert a.kind == EmitterKind.TRANSPOSE and a.heroes == ("t",)
    assert a.transpose.permutation == (2, 1, 0) and a.transpose.dimensions == (20, 160, 170)


def test_transpose_via_copy_changing_layout():
    a = analyze("""
  p = f32[256,128]{0,1} parameter(0)
  ROOT c = f32[256,128]{1,0} copy(p)""", ["f32[256,128]{0,1}"], "f32[256,128]{1,0}")
    assert a.kind == EmitterKind.TRANSPOSE and a.heroes == ("c",)
    assert "copy changing the layout" in a.reason and ">= 16" in a.reason


def test_small_transpose_is_loop_with_reason():
    a = analyze("""
  p = f32[8,8] parameter(0)
  ROOT t = f32[8,8] transpose(p), dimensions={1,0}""", ["f32[8,8]"], "f32[8,8]")
    assert a.kind == EmitterKind.LOOP and "too small" in a.reason


def test_concatenate():
    a = analyze("""
  p0 = f32[64,32] parameter(0)
  p1 = f32[64,96] parameter(1)
  c = f32[64,128] concatenate(p0, p1), dimensions={1}
  ROOT n = f32[64,128] negate(c)""", ["f32[64,32]", "f32[64,96]"], "f32[64,128]")
    assert a.kind == EmitterKind.CONCATENATE and a.heroes == ("c",)


def test_concatenate_of_five_operands_is_loop():
    params = [f"p{i} = f32[8] parameter({i})" for i in range(5)]
    a = analyze("\n".join("  " + p for p in params) + """
  ROOT c = f32[40] concatenate(p0, p1, p2, p3, p4), dimensions={0}""",
                ["f32[8]"] * 5, "f32[40]")
    assert a.kind == EmitterKind.LOOP and "more than" in a.reason


def test_in_place_dynamic_update_slice():
    a = analyze("""
  p0 = f32[64,128] parameter(0)
  p1 = f32[8,128] parameter(1)
  i = s32[] parameter(2)
  z = s32[] constant(0)
  u = f32[8,128] exponential(p1)
  ROOT d = f32[64,128] dynamic-update-slice(p0, u, i, z)""",
                ["f32[64,128]", "f32[8,128]", "s32[]"], "f32[64,128]")
    assert a.kind == EmitterKind.IN_PLACE_DYNAMIC_UPDATE_SLICE and a.heroes == ("d",)
    assert "'p0' (parameter 0)" in a.reason


def test_in_place_dynamic_update_slice_through_bitcast_in_tuple():
    a = analyze("""
  p0 = f32[64,128] parameter(0)
  p1 = f32[8,128] parameter(1)
  i = s32[] parameter(2)
  z = s32[] constant(0)
  d = f32[64,128] dynamic-update-slice(p0, p1, i, z)
  b = f32[8192] bitcast(d)
  ROOT t = (f32[8192]) tuple(b)""",
                ["f32[64,128]", "f32[8,128]", "s32[]"], "(f32[8192])")
    assert a.kind == EmitterKind.IN_PLACE_DYNAMIC_UPDATE_SLICE


def test_dynamic_update_slice_into_a_transposed_read_is_not_in_place():
    a = analyze("""
  p0 = f32[128,128] parameter(0)
  p1 = f32[8,128] parameter(1)
  i = s32[] parameter(2)
  z = s32[] constant(0)
  t = f32[128,128] transpose(p0), dimensions={1,0}
  n = f32[128,128] negate(t)
  ROOT d = f32[128,128] dynamic-update-slice(n, p1, i, z)""",
                ["f32[128,128]", "f32[8,128]", "s32[]"], "f32[128,128]")
    assert a.kind == EmitterKind.LOOP and "not a fusion parameter" in a.reason


def test_scatter():
    a = analyze("""
  p0 = f32[64,16] parameter(0)
  idx = s32[4,1] parameter(1)
  upd = f32[4,16] parameter(2)
  ROOT s = f32[64,16] scatter(p0, idx, upd), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add""",
                ["f32[64,16]", "s32[4,1]", "f32[4,16]"], "f32[64,16]")
    assert a.kind == EmitterKind.SCATTER and a.heroes == ("s",)


def test_input_slices():
    a = analyze("""
  p = f32[1024] parameter(0)
  e = f32[1024] exponential(p)
  s0 = f32[512] slice(e), slice={[0:512]}
  s1 = f32[512] slice(e), slice={[512:1024]}
  ROOT t = (f32[512], f32[512]) tuple(s0, s1)""", ["f32[1024]"], "(f32[512], f32[512])")
    assert a.kind == EmitterKind.INPUT_SLICES and a.heroes == ("s0", "s1")


def test_strided_slices_are_a_multi_output_loop():
    a = analyze("""
  p = f32[1024] parameter(0)
  s0 = f32[512] slice(p), slice={[0:1024:2]}
  s1 = f32[512] slice(p), slice={[1:1024:2]}
  ROOT t = (f32[512], f32[512]) tuple(s0, s1)""", ["f32[1024]"], "(f32[512], f32[512])")
    assert a.kind == EmitterKind.LOOP


def test_loop_gelu_from_the_seed():
    m = parse_hlo((ROOT_DIR / "examples" / "gelu.hlo").read_text())
    a = analyze_fusion(m, m.entry.root)
    assert a.kind == EmitterKind.LOOP and a.heroes == ("multiply_0",)
    assert "default" in a.reason


def test_triton_block_level_fusion():
    config = (', backend_config={"fusion_backend_config":{"kind":"__triton",'
              '"block_level_fusion_config":{"output_tile_sizes":["1","128"]}}}')
    text_body = """
  p = f32[128,1024] parameter(0)
  c = f32[] constant(0)
  ROOT r = f32[128] reduce(p, c), dimensions={1}, to_apply=add"""
    a = analyze(text_body, ["f32[128,1024]"], "f32[128]", extra=config)
    assert a.kind == EmitterKind.TRITON and "block_level_fusion_config" in a.reason


def test_analyze_computation_matches_analyze_fusion_without_config():
    m = parse_hlo((ROOT_DIR / "examples" / "gelu.hlo").read_text())
    assert analyze_computation(m.computation("gelu"), m) == analyze_fusion(m, m.entry.root)


def test_errors_name_the_instruction():
    m = parse_hlo((ROOT_DIR / "examples" / "gelu.hlo").read_text())
    with pytest.raises(UnsupportedOpError, match="param"):
        analyze_fusion(m, m.entry.instruction("param"))
    bad = m.entry.root.replace(attributes=(("kind", "kLoop"), ("calls", "nope")))
    with pytest.raises(HloVerifyError, match="nope"):
        analyze_fusion(m, bad)


@st.composite
def reductions(draw):
    dims = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=4)))
    m2m = tuple(draw(st.permutations(range(len(dims)))))
    shape = ArrayShape("f32", dims, Layout(m2m))
    reduced = tuple(sorted(draw(st.sets(st.sampled_from(range(len(dims))), min_size=1))))
    kept = [d for d in range(len(dims)) if d not in reduced]
    if not (dimensions_are_consecutive(shape, kept) or dimensions_are_consecutive(shape, reduced)):
        reduced = tuple(range(len(dims)))
    return shape, reduced


@settings(max_examples=200, deadline=None)
@given(reductions())
def test_reduction_grouping_matches_numpy(case):
    shape, reduced = case
    r = reduction_dimensions(shape, reduced)
    rng = np.random.default_rng(0)
    logical = rng.integers(0, 10, size=shape.dims)
    order = list(reversed(shape.effective_layout.minor_to_major))
    memory = np.transpose(logical, order).reshape(-1)
    grouped = memory.reshape(r.dimensions)
    axes = (0, 2) if r.is_row_reduction else (1,)
    got = grouped.sum(axis=axes).reshape(-1)
    expected_logical = logical.sum(axis=reduced)
    kept_order = [d for d in order if d not in reduced]
    kept_rank = {d: k for k, d in enumerate(r.kept_dims)}
    expected = np.transpose(expected_logical, [kept_rank[d] for d in kept_order]).reshape(-1)
    assert np.array_equal(got, expected)


def corpus_files():
    return sorted(CORPUS.glob("*.after.hlo"))


def test_every_corpus_fusion_is_analyzed():
    files = corpus_files()
    if not files:
        pytest.skip("no corpus")
    count = 0
    for path in files:
        m = parse_hlo(path.read_text())
        for _, fusion in m.fusions():
            a = analyze_fusion(m, fusion)
            assert a.kind in EmitterKind and a.reason and len(a.heroes) == len(a.roots)
            count += 1
    assert count > 20


@pytest.mark.parametrize(
    "name,fusion,kind",
    [
        ("softmax", "wrapped_reduce", EmitterKind.REDUCTION),  # f32[4,8] row: 32 % 8 == 0
        ("softmax", "reduce_divide_fusion", EmitterKind.LOOP),  # divide(1, reduce): binary
        ("reductions", "wrapped_reduce", EmitterKind.LOOP),  # f32[3,5] row: 32 % 5 != 0
        ("scatter", "wrapped_scatter", EmitterKind.SCATTER),
        ("dynamic_update_slice", "select_dynamic-update-slice_fusion",
         EmitterKind.IN_PLACE_DYNAMIC_UPDATE_SLICE),
        ("transpose", "transpose_copy_fusion", EmitterKind.LOOP),  # 4 x 6 physical: too small
        ("gelu", "multiply_multiply_fusion", EmitterKind.LOOP),
    ],
)
def test_corpus_kinds_we_can_predict(name, fusion, kind):
    path = CORPUS / f"{name}.after.hlo"
    if not path.exists():
        pytest.skip(f"{path.name} not in the corpus")
    m = parse_hlo(path.read_text())
    assert analyze_fusion(m, m.entry.instruction(fusion)).kind == kind
