"""Reductions split among programs (``kernel_plan._split``, ``rules.split_reduction``): a
looped reduction with too few output tiles to fill the GPU is reduced in parts by several
programs, and the tile's last program combines the parts.  Each kernel runs under the
interpreter against the reference evaluator; integer sums must be exact."""
from __future__ import annotations

import math

import numpy as np
import pytest

from fusion.text.parser import parse_hlo
from tests.triton_backend.fusion_check import ARGMAX, run_and_compare
from tests.triton_backend.fusion_check import single_fusion_module as fm
from tiling.fusion_pass.priority_fusion import fuse_module
from tiling.policy.limits import MIN_SPLIT_ELEMENTS, SPLIT_REDUCTION_PROGRAMS
from triton_backend.lowering import kernel_plan
from triton_backend.lowering.kernel_file import render_kernel_file
from triton_backend.lowering.kernel_plan import plan_kernel

#: Kernels rendered as for a GPU (its blocks, the split) and run here under the interpreter:
#: the interpreter's own blocks are never split (its programs cost milliseconds each).
GPU = "sm_90"

ADD = "add {{ a = {t}[] parameter(0)\n  b = {t}[] parameter(1)\n  ROOT r = {t}[] add(a, b) }}\n"
MAX = "max {{ a = {t}[] parameter(0)\n  b = {t}[] parameter(1)\n  ROOT r = {t}[] maximum(a, b) }}\n"
AND = "and { a = pred[] parameter(0)\n  b = pred[] parameter(1)\n  ROOT r = pred[] and(a, b) }\n"


@pytest.fixture
def small_splits(monkeypatch):
    """Split reductions of test-sized inputs (the default wants 16K elements per part): the
    interpreter pays per element of a GPU-rendered ``tl.reduce``, so the inputs are small."""
    monkeypatch.setattr(kernel_plan, "MIN_SPLIT_ELEMENTS", 128)


def _split_of(compiled):
    plan = compiled.plan if hasattr(compiled, "plan") else None
    return plan.split if plan is not None else None


def _parts(source: str) -> int:
    """The parts a kernel file's header says its reduction is split into (0: none)."""
    for word, following in zip(source.split(), source.split()[1:]):
        if word == "into" and following.isdigit():
            return int(following)
    return 0


def test_sum_of_squares_to_a_scalar_is_split_among_programs(small_splits):
    body = ("  sq = f32[4,100] multiply(p0, p0)\n  z = f32[] constant(0)\n"
            "  ROOT r = f32[] reduce(sq, z), dimensions={0,1}, to_apply=add")
    text = fm(["f32[4,100]"], body, "f32[]", ADD.format(t="f32"))
    compiled = run_and_compare(text, exact=False, reduction_length=400, reduction_chunk=128,
                               target=GPU)
    assert _parts(compiled.source) > 1
    assert "ordered_sums.last_to_arrive" in compiled.source
    assert "split_arrivals" in compiled.source  # the zeroed counters travel as scratch


@pytest.mark.parametrize("dtype", ["s32", "u8"])
def test_integer_sums_of_parts_are_exact(small_splits, dtype):
    out = "s32" if dtype == "s32" else "u8"
    body = (f"  z = {out}[] constant(0)\n"
            f"  ROOT r = {out}[] reduce(p0, z), dimensions={{0,1}}, to_apply=add")
    text = fm([f"{dtype}[4,100]"], body, f"{out}[]", ADD.format(t=out))
    compiled = run_and_compare(text, exact=True, reduction_chunk=64, target=GPU)
    assert _parts(compiled.source) > 1


def test_column_sums_keep_their_tile_and_split_the_rows(small_splits):
    """A bias gradient's shape: few output columns, many rows."""
    body = ("  z = f32[] constant(0)\n"
            "  ROOT r = f32[12] reduce(p0, z), dimensions={0}, to_apply=add")
    text = fm(["f32[100,12]"], body, "f32[12]", ADD.format(t="f32"))
    compiled = run_and_compare(text, exact=False, reduction_length=100, reduction_chunk=32,
                               target=GPU)
    assert _parts(compiled.source) > 1


def test_max_with_nan_and_inf_lanes(small_splits):
    body = ("  ninf = f32[] constant(-inf)\n"
            "  ROOT r = f32[] reduce(p0, ninf), dimensions={0,1}, to_apply=max")
    text = fm(["f32[4,100]"], body, "f32[]", MAX.format(t="f32"))
    rng = np.random.default_rng(3)
    for special in (np.inf, np.nan):
        x = rng.standard_normal((4, 100)).astype(np.float32)
        x[3, 5] = special  # in the last part, which no other program reads first
        compiled = run_and_compare(text, exact=True, arrays=[x], reduction_chunk=64,
                                   target=GPU)
        assert _parts(compiled.source) > 1


def test_argmax_joins_value_and_index_parts(small_splits):
    """A variadic reduce: both accumulators and their validity are joined; of two equal
    maxima in different parts the first index wins, as in the evaluator."""
    body = ("  iota = s32[8,256] iota(), iota_dimension=1\n"
            "  z = f32[] constant(-inf)\n  zi = s32[] constant(0)\n"
            "  ROOT r = (f32[8], s32[8]) reduce(p0, iota, z, zi), dimensions={1}, "
            "to_apply=argmax")
    text = fm(["f32[8,256]"], body, "(f32[8], s32[8])", ARGMAX)
    x = np.random.default_rng(1).standard_normal((8, 256)).astype(np.float32)
    x[:, 7] = x[:, 150] = 9.0
    x[3, 240] = np.nan
    compiled = run_and_compare(text, exact=True, arrays=[x], tile_sizes=(8,),
                               reduction_chunk=64, target=GPU)
    assert _parts(compiled.source) > 1


def test_pred_all_is_split(small_splits):
    body = ("  t = pred[] constant(true)\n"
            "  ROOT r = pred[] reduce(p0, t), dimensions={0,1}, to_apply=and")
    text = fm(["pred[4,100]"], body, "pred[]", AND)
    x = np.ones((4, 100), bool)
    for value in (True, False):
        x[3, 99] = value
        compiled = run_and_compare(text, exact=True, arrays=[x.copy()], reduction_chunk=64,
                                   target=GPU)
    assert _parts(compiled.source) > 1


def test_bf16_sums_accumulate_in_f32_across_parts(small_splits):
    body = ("  z = bf16[] constant(0)\n"
            "  ROOT r = bf16[] reduce(p0, z), dimensions={0,1}, to_apply=add")
    text = fm(["bf16[8,128]"], body, "bf16[]", ADD.format(t="bf16"))
    compiled = run_and_compare(text, exact=False, reduction_length=1024, reduction_chunk=32,
                               target=GPU)
    assert _parts(compiled.source) > 1
    assert "torch.float32" in compiled.source.split("SCRATCH_SPECS = (('")[1].split("\n")[0]


LOSS_MEAN = """  ninf = f32[] constant(-inf)
  m = f32[8] reduce(p0, ninf), dimensions={1}, to_apply=max
  mb = f32[8,40] broadcast(m), dimensions={0}
  d = f32[8,40] subtract(p0, mb)
  e = f32[8,40] exponential(d)
  z = f32[] constant(0)
  s = f32[8] reduce(e, z), dimensions={1}, to_apply=add
  l = f32[8] log(s)
  lse = f32[8] add(l, m)
  t = f32[] reduce(lse, z), dimensions={0}, to_apply=add
  n = f32[] constant(8)
  ROOT r = f32[] divide(t, n)"""


def test_mean_over_rows_of_a_row_reduction_is_split_by_rows(small_splits):
    """A loss's mean over rows of each row's logsumexp: the rows are split among programs,
    each row's own reductions stay whole inside a part."""
    text = fm(["f32[8,40]"], LOSS_MEAN, "f32[]", ADD.format(t="f32") + MAX.format(t="f32"))
    compiled = run_and_compare(text, exact=False, reduction_length=40, reduction_chunk=4,
                               target=GPU)
    assert _parts(compiled.source) > 1


def _plan(text: str, **options):
    module = parse_hlo(text)
    computation = module.computation("f")
    return plan_kernel(computation, computation.root.shape.dims, **options)


def test_default_rule_fills_the_gpu_and_respects_the_work_per_part():
    text = fm(["f32[4096,8192]"], "  z = f32[] constant(0)\n"
              "  ROOT r = f32[] reduce(p0, z), dimensions={0,1}, to_apply=add", "f32[]",
              ADD.format(t="f32"))
    plan = _plan(text)
    # The budget goes to the minor dim first: rows of 1024, one row per step of the split dim.
    assert plan.axis_blocks[1:] == (1, 1024)
    assert plan.split is not None and plan.split.reduce == "r"
    assert plan.split.parts <= SPLIT_REDUCTION_PROGRAMS
    assert plan.split.parts * plan.split.span >= 4096 > (plan.split.parts - 1) * plan.split.span
    assert plan.grid == (plan.split.parts,)
    assert 4096 * 8192 // plan.split.parts >= MIN_SPLIT_ELEMENTS
    assert _plan(text, split_parts=1).split is None
    assert _plan(text, split_parts=7).split.parts == 7


def test_no_split_where_the_output_tiles_fill_the_gpu_or_the_reduction_is_short():
    rows = fm(["f32[4096,32768]"], "  z = f32[] constant(0)\n"
              "  ROOT r = f32[4096] reduce(p0, z), dimensions={1}, to_apply=add", "f32[4096]",
              ADD.format(t="f32"))
    assert _plan(rows, tile_sizes=(1,)).split is None  # 4096 programs already
    short = fm(["f32[64,64]"], "  z = f32[] constant(0)\n"
               "  ROOT r = f32[] reduce(p0, z), dimensions={0,1}, to_apply=add", "f32[]",
               ADD.format(t="f32"))
    assert _plan(short).split is None  # persistent: nothing to loop, nothing to split


def test_fp8_sums_keep_xla_order_and_are_not_split():
    text = fm(["f8e4m3fn[512,512]"], "  z = f8e4m3fn[] constant(0)\n"
              "  ROOT r = f8e4m3fn[] reduce(p0, z), dimensions={0,1}, to_apply=add",
              "f8e4m3fn[]", ADD.format(t="f8e4m3fn"))
    assert _plan(text).split is None


def test_two_outer_reductions_are_not_split():
    """A total logsumexp: the sum needs the whole max first, which no part has."""
    body = ("  ninf = f32[] constant(-inf)\n"
            "  m = f32[] reduce(p0, ninf), dimensions={0,1}, to_apply=max\n"
            "  mb = f32[512,512] broadcast(m), dimensions={}\n"
            "  d = f32[512,512] subtract(p0, mb)\n  e = f32[512,512] exponential(d)\n"
            "  z = f32[] constant(0)\n"
            "  s = f32[] reduce(e, z), dimensions={0,1}, to_apply=add\n"
            "  ROOT l = f32[] log(s)")
    text = fm(["f32[512,512]"], body, "f32[]", ADD.format(t="f32") + MAX.format(t="f32"))
    assert _plan(text).split is None


def test_the_interpreters_blocks_are_not_split():
    text = fm(["f32[1000,1000]"], "  z = f32[] constant(0)\n"
              "  ROOT r = f32[] reduce(p0, z), dimensions={0,1}, to_apply=add", "f32[]",
              ADD.format(t="f32"))
    computation = parse_hlo(text).computation("f")
    interpreted = plan_kernel(computation, (), target_elements=kernel_plan.INTERPRETER_TILE_ELEMENTS)
    assert interpreted.split is None and interpreted.grid == (1,)
    assert _plan(text).split is not None


def test_split_kernel_file_declares_its_scratch():
    text = fm(["f32[4096,8192]"], "  z = f32[] constant(0)\n"
              "  ROOT r = f32[] reduce(p0, z), dimensions={0,1}, to_apply=add", "f32[]",
              ADD.format(t="f32"))
    module = parse_hlo(text)
    rendered = render_kernel_file(module, module.entry.root)
    parts = rendered.plan.split.parts
    assert f"split into {parts} parts" in rendered.source
    assert f"('split_part_0', torch.float32, ({parts},)" in rendered.source
    assert "('split_arrivals', torch.int32, (1,), (0,), True)" in rendered.source
    assert math.prod(rendered.plan.grid) == parts
    single = render_kernel_file(module, module.entry.root, split_parts=1)
    assert single.plan.split is None and "last_to_arrive" not in single.source


def test_column_sums_over_many_rows_loop_instead_of_spilling():
    """A bias gradient's column sums at a GPU's tiling: 64 coalesced columns times 8192 rows
    held whole spilled 47 KB on sm_90; the rows are looped (at most a persistent reduction's
    elements per program) and split among programs."""
    text = fm(["f32[8192,768]"], "  z = f32[] constant(0)\n"
              "  ROOT r = f32[768] reduce(p0, z), dimensions={0}, to_apply=add", "f32[768]",
              ADD.format(t="f32"))
    computation = parse_hlo(text).computation("f")
    plan = plan_kernel(computation, (768,), (64,))
    assert plan.reduction_chunk is not None
    assert kernel_plan.program_elements(computation, plan) <= kernel_plan.MAX_PERSISTENT_REDUCTION
    assert plan.split is not None and plan.grid[0] == 12 * plan.split.parts


def test_a_compiled_module_runs_its_split_kernel_again_and_again(small_splits):
    """Through ``compile_hlo`` (the module's host plan launching the kernel with its scratch):
    the arrival counters are left at zero, so every call joins its parts afresh."""
    import torch

    from fusion.evaluator import evaluate
    from triton_backend import compile_hlo

    text = ("HloModule norm\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
            "  ROOT s = f32[] add(a, b)\n}\nENTRY e {\n  g = f32[40,512] parameter(0)\n"
            "  sq = f32[40,512] multiply(g, g)\n  z = f32[] constant(0)\n"
            "  r = f32[] reduce(sq, z), dimensions={0,1}, to_apply=add\n"
            "  ROOT n = f32[] sqrt(r)\n}\n")
    module = compile_hlo(text, target=GPU)
    (fusion,) = module.fusions.values()
    assert math.prod(fusion.grid) > 1 and "last_to_arrive" in fusion.source
    rng = np.random.default_rng(0)
    for _ in range(2):  # the second call finds the counters the first left
        x = rng.standard_normal((40, 512)).astype(np.float32)
        (got,) = module(torch.from_numpy(x))
        np.testing.assert_allclose(got.numpy(), evaluate(parse_hlo(text), x), rtol=1e-5)


def _column_sums(rows: int) -> str:
    """A batch norm's sum and sum of squares of ``rows`` rows of 64 features."""
    return (f"HloModule m\n{ADD.format(t='f32')}ENTRY e {{\n  p0 = f32[{rows},64] parameter(0)\n"
            "  z = f32[] constant(0)\n  s = f32[64] reduce(p0, z), dimensions={0}, to_apply=add\n"
            f"  q2 = f32[{rows},64] multiply(p0, p0)\n"
            "  q = f32[64] reduce(q2, z), dimensions={0}, to_apply=add\n"
            "  ROOT t = (f32[64], f32[64]) tuple(s, q)\n}\n")


def test_long_sibling_column_sums_stay_apart_and_each_is_split():
    """Over 65,536 rows, as one kernel (XLA's sibling fusion) both sums run in 2 programs;
    apart, each kernel is split among programs.  Over 256 rows they stay one kernel: nothing
    would be split."""
    short = fuse_module(parse_hlo(_column_sums(256)))
    assert len([i for i in short.module.entry if i.opcode == "fusion"]) == 1, short.explain()
    long_sums = fuse_module(parse_hlo(_column_sums(65536)))
    assert "2 reductions side by side (s, q) in 2 blocks" in long_sums.explain()
    fusions = [i for i in long_sums.module.entry if i.opcode == "fusion"]
    assert len(fusions) == 2, long_sums.explain()
    for fusion in fusions:
        rendered = render_kernel_file(long_sums.module, fusion)
        assert rendered.plan.split is not None and math.prod(rendered.plan.grid) >= 128
