"""A dot fusion whose epilogue reads the dot through a data-movement op (other than a layout
tail at its root) or a reduce (issue 29): XLA runs it; ``compile_hlo`` splits it at the dot
into two kernels (``driver.fusion_split``) and says so in ``fusion_fallbacks``.  Each program
runs three ways (XLA, the evaluator, the kernels)."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("jax")
from tests.triton_backend.xla_three_way import compare_three_ways  # noqa: E402 - after jax


def _rand(shape, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _dot_fusion(body: str, root: str, kind: str = "kOutput") -> str:
    """A module calling one dot fusion of ``p0: f32[16,32]``, ``p1: f32[32,8]``, ``p2: f32[8]``."""
    return f"""HloModule m
fused {{
  p0 = f32[16,32] parameter(0)
  p1 = f32[32,8] parameter(1)
  p2 = f32[8] parameter(2)
  d = f32[16,8] dot(p0, p1), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  {body}
}}
ENTRY e {{
  a0 = f32[16,32] parameter(0)
  a1 = f32[32,8] parameter(1)
  a2 = f32[8] parameter(2)
  ROOT f = {root} fusion(a0, a1, a2), kind={kind}, calls=fused
}}"""


PROGRAMS = {
    "broadcast_of_the_dot": _dot_fusion(
        "ROOT b = f32[2,16,8] broadcast(d), dimensions={1,2}", "f32[2,16,8]"),
    "reshape_then_elementwise": _dot_fusion(
        "n = f32[16,8] negate(d)\n  r = f32[4,4,8] reshape(n)\n"
        "  br = f32[4,4,8] broadcast(p2), dimensions={2}\n  ROOT m = f32[4,4,8] multiply(r, br)",
        "f32[4,4,8]"),
    "tuple_of_the_epilogue_and_its_transpose": _dot_fusion(
        "e = f32[16,8] exponential(d)\n  t = f32[8,16] transpose(d), dimensions={1,0}\n"
        "  ROOT o = (f32[16,8], f32[8,16]) tuple(e, t)", "(f32[16,8], f32[8,16])"),
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_a_dot_read_through_data_movement_runs_as_two_kernels(name):
    compiled = compare_three_ways(PROGRAMS[name], _rand((16, 32)), _rand((32, 8), 1),
                                  _rand((8,), 2), rtol=1e-4, atol=1e-4)
    assert list(compiled.fusions) == ["f.dot", "f"]
    (reason,) = compiled.fusion_fallbacks
    assert reason.startswith("one kernel for fusion f of computation e: it runs as f.dot (its d "
                             "through ")
    assert "is not shaped like the dot" in reason


def test_a_transposed_biased_dot_is_one_kernel_storing_through_its_layout_tail():
    text = _dot_fusion("bb = f32[16,8] broadcast(p2), dimensions={1}\n  s = f32[16,8] add(d, bb)\n"
                       "  ROOT t = f32[8,16] transpose(s), dimensions={1,0}", "f32[8,16]",
                       kind="kCustom")
    compiled = compare_three_ways(text, _rand((16, 32)), _rand((32, 8), 1), _rand((8,), 2),
                                  rtol=1e-4, atol=1e-4)
    assert list(compiled.fusions) == ["f"] and not compiled.fusion_fallbacks


def test_the_compile_report_shows_both_kernels_and_why():
    from triton_backend import compile_hlo
    from triton_backend.reports.compile_report import build_report
    from triton_backend.reports.report_text import render_text

    compiled = compile_hlo(PROGRAMS["broadcast_of_the_dot"])
    text = render_text(build_report(compiled))
    assert "f.dot" in text and "(gave up one kernel for fusion f of computation e: it runs as f.dot" in text


# -- a kCustom (Triton gemm) fusion whose roots have different ranks -----------------------------
# A multi-output dot fusion also writing a value not shaped like the dot: the dot part runs as
# the gemm fusion, the tuple of outputs as a loop fusion reading it.
GEMM = 'kCustom, backend_config={"fusion_backend_config":{"kind":"__triton_gemm"}}'
ROOTS_OF_DIFFERENT_RANKS = {
    "the_dot_and_its_broadcast": _dot_fusion(
        "b = f32[2,16,8] broadcast(d), dimensions={1,2}\n"
        "  ROOT t = (f32[16,8], f32[2,16,8]) tuple(d, b)", "(f32[16,8], f32[2,16,8])", GEMM),
    "a_biased_dot_and_the_bias": _dot_fusion(
        "bb = f32[16,8] broadcast(p2), dimensions={1}\n  s = f32[16,8] add(d, bb)\n"
        "  ROOT t = (f32[16,8], f32[8]) tuple(s, p2)", "(f32[16,8], f32[8])", GEMM),
}


@pytest.mark.parametrize("name", sorted(ROOTS_OF_DIFFERENT_RANKS))
def test_a_kcustom_fusion_with_roots_of_different_ranks_runs(name):
    compiled = compare_three_ways(ROOTS_OF_DIFFERENT_RANKS[name], _rand((16, 32)),
                                  _rand((32, 8), 1), _rand((8,), 2), rtol=1e-4, atol=1e-4)
    assert list(compiled.fusions) == ["f.dot", "f"]
    assert "output 1 " in compiled.fusion_fallbacks[0]


# -- a reduce of the dot -------------------------------------------------------------------------
# The dot template renders everything at the dot's output indices, so a reduce after the dot
# is refused there (``refuse_other_loops``); XLA runs it, and so does ``compile_hlo``: the dot
# (with its elementwise epilogue) as the dot fusion, the reduce and what follows as a second.
ADD = "add {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT s = f32[] add(x, y)\n}\n"
MAX = "mx {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT s = f32[] maximum(x, y)\n}\n"


def _with_reducers(text: str) -> str:
    return text.replace("fused {", ADD + MAX + "fused {")


ZERO = "z = f32[] constant(0)\n  "
REDUCES_OF_THE_DOT = {
    "row_sum_input_fusion": (
        ZERO + "ROOT r = f32[16] reduce(d, z), dimensions={1}, to_apply=add", "f32[16]",
        "kInput", "d"),
    "column_max_loop_fusion": (
        ZERO + "ROOT r = f32[8] reduce(d, z), dimensions={0}, to_apply=mx", "f32[8]", "kLoop",
        "d"),
    "softmax_of_the_dot": (
        ZERO + "e = f32[16,8] exponential(d)\n  r = f32[16] reduce(e, z), dimensions={1}, "
        "to_apply=add\n  b = f32[16,8] broadcast(r), dimensions={0}\n"
        "  ROOT o = f32[16,8] divide(e, b)", "f32[16,8]", "kLoop", "e"),
    "the_dot_over_its_biased_row_sum": (
        ZERO + "bb = f32[16,8] broadcast(p2), dimensions={1}\n  s = f32[16,8] add(d, bb)\n"
        "  r = f32[16] reduce(s, z), dimensions={1}, to_apply=add\n"
        "  b = f32[16,8] broadcast(r), dimensions={0}\n  ROOT o = f32[16,8] divide(d, b)",
        "f32[16,8]", "kInput", "d"),
    "gemm_fusion_writing_the_dot_and_its_reduce": (
        ZERO + "r = f32[16] reduce(d, z), dimensions={1}, to_apply=add\n"
        "  ROOT t = (f32[16,8], f32[16]) tuple(d, r)", "(f32[16,8], f32[16])", GEMM, "d"),
}


@pytest.mark.parametrize("name", sorted(REDUCES_OF_THE_DOT))
def test_a_reduce_of_the_dot_runs_as_two_kernels(name):
    from fusion.text.parser import parse_hlo
    from triton_backend.driver.op_coverage import uncovered_ops

    body, root, kind, through = REDUCES_OF_THE_DOT[name]
    text = _with_reducers(_dot_fusion(body, root, kind))
    assert uncovered_ops(parse_hlo(text)) == []  # what ``fusion-compile check --triton`` says
    compiled = compare_three_ways(text, _rand((16, 32)), _rand((32, 8), 1), _rand((8,), 2),
                                  rtol=1e-4, atol=1e-4)
    assert list(compiled.fusions) == ["f.dot", "f"]
    assert compiled.fusion_fallbacks == (
        f"one kernel for fusion f of computation e: it runs as f.dot (its d through {through}) "
        "and f (the rest), since reduce r cannot be fused with dot d (only elementwise/"
        "data-movement prologues and elementwise epilogues are)",)


REDUCE_BEFORE_THE_DOT = ADD + """fused {
  p0 = f32[16,32] parameter(0)
  p1 = f32[32,8] parameter(1)
  z = f32[] constant(0)
  q = f32[16] reduce(p0, z), dimensions={1}, to_apply=add
  b = f32[16,32] broadcast(q), dimensions={0}
  d = f32[16,8] dot(b, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT r = f32[16] reduce(d, z), dimensions={1}, to_apply=add
}
ENTRY e {
  a0 = f32[16,32] parameter(0)
  a1 = f32[32,8] parameter(1)
  ROOT f = f32[16] fusion(a0, a1), kind=kLoop, calls=fused
}"""


def test_a_reduce_before_the_dot_stays_refused_where_it_is():
    # The split cuts after the dot only: a reduce feeding the dot stays in the dot's part.
    from fusion.errors import UnsupportedOpError
    from triton_backend import compile_hlo

    with pytest.raises(UnsupportedOpError) as err:
        compile_hlo("HloModule m\n" + REDUCE_BEFORE_THE_DOT)
    assert str(err.value) == (
        "19:3: op fusion (%f) in computation e is not covered by the Triton path: reduce q "
        "cannot be fused with dot d (only elementwise/data-movement prologues and elementwise "
        "epilogues are) (in f)")
