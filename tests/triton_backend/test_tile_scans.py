"""Scans computed along the tile (``tiling.policy.tile_scans``, ``rules.tile_scan``): which
reduce-windows qualify, and the kernels against the reference evaluator under the
interpreter, as rendered for it and for a GPU."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo
from fusion.evaluator.npz_io import random_inputs
from tests.tiling.test_scan_fusion import module as scan_fusion_module
from tests.triton_backend.fusion_check import fusion_module, run_and_compare, to_torch
from tests.triton_backend.test_codegen_reductions import reducers
from tests.triton_backend.fusion_check import single_fusion_module as fm
from tiling.symbolic.tiled_fusion import analyze_computation_tiling
from tiling.policy.tile_scans import tile_scans
from tiling.policy.limits import CARRIED_SCAN_TILE
from triton_backend.lowering import kernel_plan
from triton_backend import compile_hlo
from triton_backend.driver.compiled_fusion import compile_fusion
from triton_backend.lowering.kernel_plan import plan_kernel


#: name -> the (low, high) padding of a scan of n elements: cumsum(x, reverse=...) and the
#: exclusive forms, whose outputs have one element more.
SCANS = {"forward": lambda n: (n - 1, 0), "reverse": lambda n: (0, n - 1),
         "exclusive": lambda n: (n, 0), "reverse_exclusive": lambda n: (0, n)}


def scan_text(t: str, n: int, kind: str = "forward", reducer: str = "add", init: str = "0",
              rows: int = 3, tail: str = "", padding: str | None = None) -> str:
    """A fusion scanning ``t[rows, n]`` along dim 1 (a ``kind`` of ``SCANS``, or the window
    ``padding``); ``tail`` lines consume it as ``c``."""
    low, high = SCANS[kind](n)
    padding = padding or f"{low}_{high}"
    out = low + high + 1
    body = (f"  z = {t}[] constant({init})\n"
            f"  c = {t}[{rows},{out}] reduce-window(p0, z), window={{size=1x{n} pad=0_0x{padding}}}, "
            f"to_apply={reducer}\n")
    root = tail or f"  ROOT r = {t}[{rows},{out}] add(c, c)"
    shape = root.split(" = ")[1].split(" ")[0]
    return fm([f"{t}[{rows},{n}]"], body + root, shape, reducers(t))


def scans_of(text: str) -> dict[str, int]:
    module = parse_hlo(text)
    return tile_scans(analyze_computation_tiling(module.computation("f"), "f"), module)


@pytest.mark.parametrize("kind", sorted(SCANS))
def test_every_scan_direction_is_found(kind):
    assert scans_of(scan_text("f32", 300, kind)) == {"c": 1}


def test_a_transposed_scan_runs_along_the_output_dim_it_becomes():
    tail = "  ROOT r = f32[300,3] transpose(c), dimensions={1,0}"
    assert scans_of(scan_text("f32", 300, tail=tail)) == {"c": 0}


@pytest.mark.parametrize("tail", [
    # Read shifted: lane o would need element o + 1 of the scan.
    "  ROOT r = f32[3,299] slice(c), slice={[0:3], [1:300]}",
    # Read reversed along the scanned dim.
    "  ROOT r = f32[3,300] reverse(c), dimensions={1}",
    # Read at two indexings, one of them shifted.
    "  s = f32[3,299] slice(c), slice={[0:3], [0:299]}\n"
    "  t = f32[3,299] slice(c), slice={[0:3], [1:300]}\n"
    "  ROOT r = f32[3,299] subtract(t, s)",
])
def test_a_scan_read_other_than_lane_by_lane_is_a_window(tail):
    assert scans_of(scan_text("f32", 300, tail=tail)) == {}


def test_windows_that_are_not_scans_and_fp8_scans_are_windows():
    assert scans_of(scan_text("f32", 300, padding="298_1")) == {}  # a window off the end
    assert scans_of(scan_text("f8e4m3fn", 12)) == {}  # folds in XLA:CPU's order


@pytest.mark.parametrize("reducer,init,found", [
    ("add", "0", True), ("add", "-0", True), ("add", "3", False), ("mul", "1", True),
    ("mul", "2", False), ("max", "5", True), ("max", "-inf", True)])
def test_a_scan_along_the_tile_needs_an_init_that_absorbs_itself(reducer, init, found):
    # Each padding position of a window is one more init value: a sum starting at 3 adds
    # 3 once per padding position, which a scan along the tile cannot.
    text = scan_text("f32", 30, reducer=reducer, init=init)
    assert scans_of(text) == ({"c": 1} if found else {})


WRAPPED = """HloModule m
{reducers}
f {{
  p0 = f32[3,300] parameter(0)
  p1 = f32[] parameter(1)
  ROOT c = f32[3,300] reduce-window(p0, p1), window={{size=1x300 pad=0_0x299_0}}, to_apply=add
}}

ENTRY e {{
  x0 = f32[3,300] parameter(0)
  {init}
  ROOT fusion = f32[3,300] fusion(x0, z), kind=kLoop, calls=f
}}
"""


@pytest.mark.parametrize("init,found", [("z = f32[] constant(0)", True),
                                        ("z = f32[] parameter(1)", False)])
def test_an_init_passed_in_by_the_calling_fusion_is_checked_there(init, found):
    # JAX's cumsum reaches the backend as a single-op fusion whose init is a parameter.
    text = WRAPPED.format(reducers=reducers("f32"), init=init)
    assert scans_of(text) == ({"c": 1} if found else {})
    if found:  # the kernel is for this module: its init is the caller's 0
        x = np.random.default_rng(0).standard_normal((3, 300)).astype(np.float32)
        compiled = run_and_compare(text, exact=False, reduction_length=300,
                                   arrays=[x, np.float32(0)])
        assert "tl.cumsum(" in compiled.source


def test_the_default_tile_spans_the_scan_and_explicit_tiles_decide():
    module = parse_hlo(scan_text("f32", 300))
    computation = module.computation("f")
    plan = plan_kernel(computation, (3, 300), module=module)
    assert plan.tile_sizes[1] == 300 and plan.tile_scans == (("c", 1),)
    assert plan.reduce_axes == ()  # no window axis: one pass, not 300 reads per output
    assert plan_kernel(computation, (3, 300)).tile_scans == ()  # no reducers to check
    # A tile spanning part of the row: the scan is carried, its window axis reduces the
    # window next to the tile.
    carried = plan_kernel(computation, (3, 300), (1, 128), module=module)
    assert carried.tile_scans == (("c", 1),) and carried.reduce_axes[0][0] == "c"


def test_a_row_longer_than_a_tile_is_scanned_in_carried_tiles():
    module = parse_hlo(scan_text("f32", 20000, rows=2))
    plan = plan_kernel(module.computation("f"), (2, 20000), module=module)
    assert plan.tile_sizes == (1, CARRIED_SCAN_TILE) and plan.tile_scans == (("c", 1),)
    assert plan.reduce_axes[0][0] == "c" and plan.reduction_chunk is not None


def _column_scan(rows: int, columns: int) -> str:
    body = (f"  z = f32[] constant(0)\n  ROOT c = f32[{rows},{columns}] reduce-window(p0, z), "
            f"window={{size={rows}x1 pad={rows - 1}_0x0_0}}, to_apply=add\n")
    return fm([f"f32[{rows},{columns}]"], body, f"f32[{rows},{columns}]", reducers("f32"))


@pytest.mark.parametrize("rows, columns, tile", [
    (4096, 64, (4096, 4)),  # a persistent reduction's elements allow 4 of each row
    (300, 40, (300, 8)),  # SCAN_ROW_ELEMENTS
    (300, 2, (300, 2)),  # the whole row
])
def test_a_scan_down_the_columns_takes_several_elements_of_each_row(rows, columns, tile):
    module = parse_hlo(_column_scan(rows, columns))
    plan = plan_kernel(module.computation("f"), (rows, columns), module=module)
    assert plan.tile_sizes == tile and plan.tile_scans == (("c", 0),)
    assert plan_kernel(module.computation("f"), (rows, columns), module=module,
                       target_elements=1 << 16).tile_sizes[1] >= tile[1]  # the interpreter's


def test_a_column_scan_kernel_reading_rows_matches_the_evaluator():
    compiled = run_and_compare(_column_scan(300, 40), exact=False, reduction_length=300,
                               target="cuda:90")
    assert "tl.cumsum(" in compiled.source and compiled.tile_sizes == (300, 8)


TYPES = {"f32": ("add", "0", False), "bf16": ("add", "0", False), "s32": ("add", "0", True)}


@pytest.mark.parametrize("kind", sorted(SCANS))
@pytest.mark.parametrize("t", sorted(TYPES))
@pytest.mark.parametrize("target", [None, "cuda:90"])
def test_scan_kernels_match_the_evaluator(kind, t, target):
    reducer, init, exact = TYPES[t]
    compiled = run_and_compare(scan_text(t, 300, kind, reducer, init), exact=exact,
                               reduction_length=300, target=target)
    assert "tl.cumsum(" in compiled.source and "scanned along the tile" in compiled.source


@pytest.mark.parametrize("kind", ["forward", "reverse_exclusive"])
@pytest.mark.parametrize("reducer,init", [("max", "-inf"), ("mul", "1")])
def test_other_reducers_scan_with_their_combiner(kind, reducer, init):
    text = scan_text("f32", 20, kind, reducer, init)
    compiled = run_and_compare(text, exact=reducer == "max", reduction_length=20,
                               target="cuda:90")
    assert "tl.associative_scan(" in compiled.source


def test_a_column_scan_in_a_softmax_fusion():
    # exp(x - max) down each column, then a cumulative sum down the columns: one kernel.
    tail = """  ninf = f32[] constant(-inf)
  m = f32[24] reduce(p0, ninf), dimensions={0}, to_apply=max
  mb = f32[40,24] broadcast(m), dimensions={1}
  d = f32[40,24] subtract(p0, mb)
  e = f32[40,24] exponential(d)
  zero = f32[] constant(0)
  c = f32[40,24] reduce-window(e, zero), window={size=40x1 pad=39_0x0_0}, to_apply=add
  ROOT r = f32[40,24] multiply(c, p0)"""
    text = fm(["f32[40,24]"], tail, "f32[40,24]", reducers("f32"))
    compiled = run_and_compare(text, exact=False, reduction_length=40)
    assert "tl.cumsum(" in compiled.source


def test_a_scan_summed_over_its_other_dim():
    tail = "  ROOT r = f32[300] reduce(c, z), dimensions={0}, to_apply=add"
    compiled = run_and_compare(scan_text("f32", 300, rows=5, tail=tail),
                               exact=False, reduction_length=1500)
    assert "tl.cumsum(" in compiled.source


@pytest.mark.parametrize("kind", ["exclusive", "reverse"])
def test_a_sum_from_a_nonzero_init_reduces_windows(kind):
    # Up to 16 long: one reduce-window, as XLA computes it (longer: its tree, below).
    compiled = run_and_compare(scan_text("s32", 16, kind, "add", "3"), exact=True)
    assert "tl.cumsum(" not in compiled.source


@pytest.mark.parametrize("kind", ["exclusive", "reverse"])
def test_a_long_sum_from_a_nonzero_init_is_xla_cpus_tree(kind):
    # A window counts its init once per padding position, XLA's tree of 16-wide scans
    # another number of times: compile_hlo rewrites the scan as that tree, whose windows of
    # at most 16 its kernels reduce, and the evaluator follows the same tree.
    text = scan_text("s32", 40, kind, "add", "3")
    x = np.random.default_rng(1).integers(-6, 7, (3, 40)).astype(np.int32)
    (want,) = evaluate(parse_hlo(text), x)
    (got,) = compile_hlo(text)(torch.from_numpy(x))
    np.testing.assert_array_equal(got.numpy(), want)


# Each kind of scan once, the reverse ones (whose tiles must leave the next tile's lanes
# out) twice; each type and reducer more than once.
@pytest.mark.parametrize("kind,t,reducer,init", [
    ("exclusive", "f32", "max", "-inf"), ("forward", "bf16", "add", "0"),
    ("reverse", "f32", "max", "-inf"), ("reverse", "s32", "add", "0"),
    ("reverse_exclusive", "bf16", "add", "0"), ("reverse_exclusive", "s32", "add", "0")])
def test_a_tile_spanning_part_of_the_scan_carries_in_the_window_next_to_it(kind, t, reducer,
                                                                           init):
    # (a float sum: bf16's, which rounds each part as f32 does and more)
    # Tiles of 20 in blocks of 32: a reverse scan must leave the next tile's lanes out.
    # (The interpreter folds a GPU kernel's tl.reduce and scan one lane at a time: a row of
    # 60, 3 tiles, the exclusive forms' 61st output in a 4th.)
    compiled = run_and_compare(scan_text(t, 60, kind, reducer, init), exact=t == "s32" or
                               reducer == "max", reduction_length=60, tile_sizes=(1, 20),
                               target="cuda:90")
    assert "carried in from the other tiles" in compiled.source
    assert compiled.tile_sizes == (1, 20)


def test_a_long_row_is_scanned_tile_by_tile(monkeypatch):
    # The evaluator's windows of a really long row do not fit this machine's memory: the
    # plan's limits are lowered instead, so a row of 1,000 takes 4 tiles of 256.
    monkeypatch.setattr(kernel_plan, "MAX_PERSISTENT_REDUCTION", 512)
    monkeypatch.setattr(kernel_plan, "CARRIED_SCAN_TILE", 256)
    compiled = run_and_compare(scan_text("f32", 1000, "reverse_exclusive", rows=2), exact=False,
                               reduction_length=1000)
    assert compiled.tile_sizes == (1, 256) and "carried in" in compiled.source


def test_a_scan_also_read_reversed_reduces_windows():
    tail = "  v = f32[3,60] reverse(c), dimensions={1}\n  ROOT r = f32[3,60] add(c, v)"
    compiled = run_and_compare(scan_text("f32", 60, tail=tail), exact=False,
                               reduction_length=60)
    assert "tl.cumsum(" not in compiled.source and "tl.associative_scan" not in compiled.source


def test_a_long_cumsum_keeps_the_evaluators_accuracy():
    # 4,096 f32 values added one after another drift 5 times further from the exact sums
    # than the evaluator (XLA's tree of 16-wide scans) on these 16 rows; the interpreter's
    # blocks of 16 stay within run --check's bound, 4 times the evaluator's own error.
    module = parse_hlo(scan_text("f32", 4096, rows=16))
    x = np.random.default_rng(0).standard_normal((16, 4096)).astype(np.float32)
    compiled = compile_fusion(module, "fusion")
    (got,) = compiled(torch.from_numpy(x))
    (evaluated,) = evaluate(fusion_module(module, "fusion"), x)
    exact = 2 * np.cumsum(x.astype(np.float64), axis=1)  # the fusion's root is c + c
    assert np.abs(got.numpy() - exact).max() <= 4 * np.abs(evaluated - exact).max()
    assert "tl.reshape(" in compiled.source


@pytest.mark.parametrize("n,form", [(300, "one pass over the tile's lanes"),
                                    (20000, "tile by tile, each folding in the window next "
                                            "to it")])
def test_the_compile_report_says_how_each_scan_runs(n, form):
    from triton_backend.reports.compile_report import build_report
    from triton_backend.reports.report_text import render_text

    report = build_report(compile_hlo(scan_text("f32", n, rows=2)))
    (fusion,) = report.fusions
    assert fusion.tile_scans == (f"c along dim 1, {form}",)
    assert f"  scan:     c along dim 1, {form}" in render_text(report).splitlines()


def _two_scans(rows: int, columns: int) -> str:
    """A cumsum of ``f32[rows, columns]`` down the columns minus one along the rows."""
    shape = f"f32[{rows},{columns}]"
    body = (f"  z = f32[] constant(0)\n"
            f"  down = {shape} reduce-window(p0, z), "
            f"window={{size={rows}x1 pad={rows - 1}_0x0_0}}, to_apply=add\n"
            f"  across = {shape} reduce-window(p0, z), "
            f"window={{size=1x{columns} pad=0_0x{columns - 1}_0}}, to_apply=add\n"
            f"  ROOT r = {shape} subtract(down, across)")
    return fm([shape], body, shape, reducers("f32"))


@pytest.mark.parametrize("rows, columns", [(150, 150), (40, 600)])
def test_scans_along_two_dims_take_the_tile_along_one(rows, columns):
    # A cumsum down the columns and one along the rows: a tile spanning both would hold
    # 256 x 256 (64 x 1024) elements; the row scan (minor-most) is along the tile, the
    # column scan reduces windows.  The kernel runs on the narrower form (its windows of
    # 64 rows: the interpreter folds a tl.reduce one lane at a time).
    text = _two_scans(rows, columns)
    module = parse_hlo(text)
    plan = plan_kernel(module.computation("f"), (rows, columns), module=module)
    assert plan.tile_scans == (("across", 1),) and plan.tile_sizes[1] == columns
    assert [name for name, _ in plan.reduce_axes] == ["down"]
    if rows < columns:  # (the bound of the 150 x 150 run, for sums 600 long)
        run_and_compare(text, exact=False, reduction_length=150)


# Whole (a max, exactly; a row of 100: the interpreter folds a max one lane at a time), and
# in carried tiles past 16384 (a sum: the interpreter's masked scan of a max over 8192 lanes
# takes seconds per program).
@pytest.mark.parametrize("n,reducer,init", [(100, "max", "-inf"), (16500, "add", "0")])
def test_a_fused_scan_kernel_matches_the_evaluator(n, reducer, init):
    body = (f"  d = f32[8,{n}] subtract(cs, c)\n"
            f"  e = f32[8,{n}] exponential(d)\n" if reducer == "max" else
            f"  e = f32[8,{n}] subtract(cs, c)\n") + f"  ROOT o = bf16[8,{n}] convert(e)"
    text = scan_fusion_module(body, reducer=reducer, init=init, n=n)
    compiled = compile_hlo(text)
    assert len(compiled.fusions) == 1  # the pass fused the convert, scan and epilogue
    (x,) = random_inputs(parse_hlo(text), seed=5)
    got = compiled(to_torch(x, "bf16"))[0].float().numpy()
    want = np.asarray(evaluate(parse_hlo(text), x)[0], dtype=np.float32)
    if reducer == "max":
        np.testing.assert_array_equal(got, want)
    else:  # sums in another order, rounded to bf16: at most its rounding apart
        np.testing.assert_allclose(got, want, rtol=2 ** -7, atol=1e-2)
