"""The long tail of real programs (issue 29): small programs of the kinds that crashed or
differed from XLA, each run three ways (XLA on the same text, the evaluator, ``compile_hlo``
under the interpreter) by ``xla_three_way.compare_three_ways``."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("jax")
from tests.triton_backend.xla_three_way import compare_three_ways  # noqa: E402 - after jax


def _rand(shape, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _loop_fusion(params: list[str], body: str, root: str) -> str:
    """A module whose entry calls one kLoop fusion of ``body`` on parameters ``params``."""
    fused = "\n".join(f"  p{i} = {s} parameter({i})" for i, s in enumerate(params))
    entry = "\n".join(f"  a{i} = {s} parameter({i})" for i, s in enumerate(params))
    args = ", ".join(f"a{i}" for i in range(len(params)))
    return (f"HloModule m\nfused {{\n{fused}\n  {body}\n}}\nENTRY e {{\n{entry}\n"
            f"  ROOT f = {root} fusion({args}), kind=kLoop, calls=fused\n}}")


# -- a concatenate the fusion never reads --------------------------------------------------------
# Its map from the output is empty (it is an empty operand of another concatenate or of a
# pad), so its tile is empty; the legality rule "the tile along the axis divides every
# operand" took ``size % 0`` and raised a raw ZeroDivisionError.
NEVER_READ_CONCATENATES = {
    "operand_of_a_concatenate": (
        ["f32[4,0]", "f32[4,3]"],
        "i = f32[4,0] concatenate(p0, p0), dimensions={1}\n"
        "  ROOT x = f32[4,3] concatenate(i, p1), dimensions={1}", "f32[4,3]"),
    "operand_of_a_pad": (
        ["f32[4,0]", "f32[4,3]"],
        "i = f32[4,0] concatenate(p0, p0), dimensions={1}\n  k = f32[] constant(1)\n"
        "  ROOT x = f32[4,3] pad(i, k), padding=0_0x1_2", "f32[4,3]"),
    "negated_twice_along_dim_0": (
        ["f32[0,4]", "f32[2,4]"],
        "i = f32[0,4] concatenate(p0, p0), dimensions={0}\n  n = f32[0,4] negate(i)\n"
        "  ROOT x = f32[2,4] concatenate(n, p1, n), dimensions={0}", "f32[2,4]"),
}


@pytest.mark.parametrize("case", sorted(NEVER_READ_CONCATENATES))
def test_a_concatenate_the_fusion_never_reads_compiles(case):
    params, body, root = NEVER_READ_CONCATENATES[case]
    shapes = [tuple(int(n) for n in p[4:-1].split(",")) for p in params]
    compare_three_ways(_loop_fusion(params, body, root),
                       *(_rand(s, k) for k, s in enumerate(shapes)))


# -- a dot fusion whose output is not shaped like the dot ---------------------------------------
# The template renders the root at the dot's output indices; a root that broadcasts the dot to
# another rank was lowered at indices of the wrong rank (a raw IndexError inside the broadcast
# rule).  The template now refuses such outputs, located at the fusion, and ``compile_hlo``
# runs the fusion as two kernels (``driver.fusion_split``): the dot, then the broadcast.
DOT_THEN_BROADCAST = """HloModule m
fused {
  p0 = f32[16,32] parameter(0)
  p1 = f32[32,8] parameter(1)
  d = f32[16,8] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT b = f32[2,16,8] broadcast(d), dimensions={1,2}
}
ENTRY e {
  a0 = f32[16,32] parameter(0)
  a1 = f32[32,8] parameter(1)
  ROOT f = f32[2,16,8] fusion(a0, a1), kind=kOutput, calls=fused
}"""


def test_a_dot_fusion_broadcasting_the_dot_runs_as_two_kernels():
    compiled = compare_three_ways(DOT_THEN_BROADCAST, _rand((16, 32)), _rand((32, 8), 1),
                                  rtol=1e-4, atol=1e-4)
    assert list(compiled.fusions) == ["f.dot", "f"]
    assert compiled.fusion_fallbacks == (
        "one kernel for fusion f of computation e: it runs as f.dot (its d through d) and f "
        "(the rest), since output 0 [2, 16, 8] is not shaped like the dot [16, 8]",)


def test_a_dot_with_a_lower_rank_broadcast_in_prologue_and_epilogue_matches_xla():
    text = _loop_fusion(
        ["f32[16,32]", "f32[4,32,8]", "f32[16]"],
        "b = f32[4,16,32] broadcast(p0), dimensions={1,2}\n"
        "  d = f32[4,16,8] dot(b, p1), lhs_batch_dims={0}, rhs_batch_dims={0},"
        " lhs_contracting_dims={2}, rhs_contracting_dims={1}\n"
        "  c = f32[4,16,8] broadcast(p2), dimensions={1}\n"
        "  ROOT r = f32[4,16,8] add(d, c)", "f32[4,16,8]").replace("kLoop", "kOutput")
    compare_three_ways(text, _rand((16, 32)), _rand((4, 32, 8), 1), _rand((16,), 2),
                       rtol=1e-4, atol=1e-4)


# -- pred values in every position ---------------------------------------------------------------
# Training steps (an AdamW step's finiteness checks, an attention mask) combine 0-d pred
# parameters and constants, broadcasts of them, logical ops on compares, reduces of pred with
# or/and reducers and selects on their results.
PRED_PROGRAM = """HloModule m
or_ { a = pred[] parameter(0)
  b = pred[] parameter(1)
  ROOT s = pred[] or(a, b) }
and_ { a = pred[] parameter(0)
  b = pred[] parameter(1)
  ROOT s = pred[] and(a, b) }
ENTRY e {
  p = pred[] parameter(0)
  x = f32[4,8] parameter(1)
  k = pred[] constant(true)
  z = f32[] constant(0)
  bz = f32[4,8] broadcast(z), dimensions={}
  c = pred[4,8] compare(x, bz), direction=GT
  q = pred[] and(p, k)
  bq = pred[4,8] broadcast(q), dimensions={}
  o = pred[4,8] or(c, bq)
  xo = pred[4,8] xor(o, c)
  n = pred[4,8] not(xo)
  f = pred[] constant(false)
  any = pred[4] reduce(n, f), dimensions={1}, to_apply=or_
  all = pred[] reduce(c, k), dimensions={0,1}, to_apply=and_
  s = f32[4,8] select(n, x, bz)
  i = s32[4,8] convert(n)
  ROOT t = (pred[4], pred[], f32[4,8], s32[4,8]) tuple(any, all, s, i)
}"""


@pytest.mark.parametrize("flag", [False, True])
def test_pred_values_in_every_position_match_xla(flag):
    compare_three_ways(PRED_PROGRAM, np.bool_(flag), _rand((4, 8)))


# -- special float values ------------------------------------------------------------------------
# inf, NaN and -0 through the ops where they land differently by convention (max/min propagate
# NaN; remainder and atan2 of zeros and infinities; converts saturate).  Denormals are left
# out: XLA:CPU flushes them to zero, which XLA's semantics (and its GPU backend) do not.
SPECIAL = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -2.5, 1e30],
                   np.float32)
SPECIAL_PROGRAM = """HloModule m
ENTRY e {
  x = f32[100] parameter(0)
  y = f32[100] parameter(1)
  mx = f32[100] maximum(x, y)
  mn = f32[100] minimum(x, y)
  rm = f32[100] remainder(x, y)
  at = f32[100] atan2(x, y)
  dv = f32[100] divide(x, y)
  pw = f32[100] power(x, y)
  cl = f32[100] clamp(y, x, y)
  ci = s32[100] convert(x)
  rn = f32[100] round-nearest-even(x)
  sg = f32[100] sign(x)
  ROOT t = (f32[100], f32[100], f32[100], f32[100], f32[100], f32[100], f32[100], s32[100],
            f32[100], f32[100]) tuple(mx, mn, rm, at, dv, pw, cl, ci, rn, sg)
}"""


def test_special_float_values_land_where_xla_puts_them():
    x, y = np.repeat(SPECIAL, SPECIAL.size), np.tile(SPECIAL, SPECIAL.size)
    compare_three_ways(SPECIAL_PROGRAM, x, y, rtol=2e-6, atol=0)


# -- kCustom fusions that name no backend kind ---------------------------------------------------
# A bare ``kind=kCustom`` fusion (no backend config, or one without a fusion kind) was refused
# as a "custom" fusion, XLA:GPU's name for one a custom emitter must claim; XLA runs its body
# like any other fusion, and so does ``compile_hlo`` now, whatever its outputs' ranks.
ADD = "add {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT s = f32[] add(x, y)\n}\n"
SCALED = ("b = f32[16,8] broadcast(p1), dimensions={1}\n  m = f32[16,8] multiply(p0, b)\n"
          "  z = f32[] constant(0)\n  ")
BARE_CUSTOM_FUSIONS = {
    "loop_outputs_of_two_ranks": (
        SCALED + "n = f32[8] negate(p1)\n  ROOT t = (f32[16,8], f32[8]) tuple(m, n)",
        "(f32[16,8], f32[8])"),
    "the_product_and_its_row_sums": (
        SCALED + "r = f32[16] reduce(m, z), dimensions={1}, to_apply=add\n"
        "  ROOT t = (f32[16,8], f32[16]) tuple(m, r)", "(f32[16,8], f32[16])"),
    "the_product_and_its_total": (
        SCALED + "r = f32[] reduce(m, z), dimensions={0,1}, to_apply=add\n"
        "  ROOT t = (f32[16,8], f32[]) tuple(m, r)", "(f32[16,8], f32[])"),
    "row_and_column_sums": (
        SCALED + "r = f32[16] reduce(m, z), dimensions={1}, to_apply=add\n"
        "  c = f32[8] reduce(m, z), dimensions={0}, to_apply=add\n"
        "  ROOT t = (f32[16], f32[8], f32[16,8]) tuple(r, c, m)",
        "(f32[16], f32[8], f32[16,8])"),
    "one_output": (SCALED + "ROOT e = f32[16,8] exponential(m)", "f32[16,8]"),
}


@pytest.mark.parametrize("config", ["", ', backend_config={"operation_queue_id":"0"}'])
@pytest.mark.parametrize("case", sorted(BARE_CUSTOM_FUSIONS))
def test_a_kcustom_fusion_naming_no_backend_kind_runs_its_body(case, config):
    body, root = BARE_CUSTOM_FUSIONS[case]
    text = "HloModule m\n" + ADD + _loop_fusion(["f32[16,8]", "f32[8]"], body, root).replace(
        "HloModule m\n", "").replace("kind=kLoop, calls=fused", "kind=kCustom, calls=fused"
                                     + config)
    assert "kCustom" in text
    compiled = compare_three_ways(text, _rand((16, 8)), _rand((8,), 1), rtol=1e-5, atol=1e-5)
    assert list(compiled.fusions) == ["f"]


def test_a_kcustom_fusion_naming_an_unknown_backend_kind_stays_refused():
    from fusion.errors import UnsupportedOpError
    from triton_backend import compile_hlo

    body, root = BARE_CUSTOM_FUSIONS["one_output"]
    text = _loop_fusion(["f32[16,8]", "f32[8]"], body, root).replace(
        "kind=kLoop, calls=fused", 'kind=kCustom, calls=fused, '
        'backend_config={"fusion_backend_config":{"kind":"__custom_fusion"}}')
    with pytest.raises(UnsupportedOpError) as err:
        compile_hlo(text)
    assert str(err.value) == (
        "13:3: op fusion (%f) in computation e is not covered by the Triton path: custom "
        "fusions are not emitted by the Triton backend (custom: kCustom fusion with "
        "backend_config kind '__custom_fusion') (in f)")
