"""Triton's and CUDA's limits are met, or the tiling is refused with the reason, BEFORE a launch.

Limits: a tile (padded to powers of two) holds at most 2^20 elements; the grid has at most
2^31 - 1 blocks on x and 65535 on y/z; a dot's software pipeline fits shared memory.  Shapes
here are huge, so only planning runs: the tile analysis (``tiling_candidates``,
``check_tiling``), ``compile_fusion``'s choice (``choose_fusion_tiling``), the kernel plan
(``plan_kernel``) and ``compile_hlo``, which renders and imports kernels but launches nothing.
Truths: the limits themselves, restated here, and brute-force products of the plan's sizes.
"""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings, strategies as st

from fusion.errors import UnsupportedOpError
from fusion.text.parser import parse_hlo
from tiling.policy.candidates import tiling_candidates
from tiling.policy.legality import check_tiling
from tiling.symbolic.tiled_fusion import analyze_fusion_tiling
from triton_backend import compile_hlo
from triton_backend.templates.dot.tiling import (
    SHARED_MEMORY_PER_BLOCK,
    DotProblem,
    default_tiling,
    shared_memory_bytes,
)
from triton_backend.lowering.kernel_plan import plan_kernel
from triton_backend.driver.compiled_fusion import choose_fusion_tiling

TRITON_MAX_NUMEL = 2**20
GRID_X = 2**31 - 1
GRID_YZ = 65535

ADD = """add { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b) }"""


def reduction_fusion(dims: tuple[int, ...], reduced: tuple[int, ...]) -> str:
    shape = f"f32[{','.join(map(str, dims))}]"
    kept = [n for k, n in enumerate(dims) if k not in reduced]
    out = f"f32[{','.join(map(str, kept))}]"
    return f"""HloModule m
{ADD}
f {{ p = {shape} parameter(0)
  c = f32[] constant(0)
  ROOT r = {out} reduce(p, c), dimensions={{{','.join(map(str, reduced))}}}, to_apply=add }}
ENTRY e {{ x = {shape} parameter(0)
  ROOT r = {out} fusion(x), kind=kInput, calls=f }}"""


def loop_fusion(dims: tuple[int, ...]) -> str:
    shape = f"f32[{','.join(map(str, dims))}]"
    return f"""HloModule m
f {{ p = {shape} parameter(0)
  ROOT n = {shape} negate(p) }}
ENTRY e {{ x = {shape} parameter(0)
  ROOT r = {shape} fusion(x), kind=kLoop, calls=f }}"""


def assert_plan_within_limits(text: str, tile_sizes, chunk) -> None:
    """The kernel plan for these tiles: every kernel tile and the grid within the limits."""
    module = parse_hlo(text)
    instr = module.entry.root
    computation = module.computation(instr.attr("calls"))
    space = instr.shape.dims
    plan = plan_kernel(computation, space, tile_sizes, reduction_chunk=chunk)
    assert all(b & (b - 1) == 0 for b in plan.axis_blocks), plan.axis_blocks
    assert math.prod(plan.axis_blocks) <= TRITON_MAX_NUMEL, plan
    blocks = math.prod(-(-n // t) for n, t in zip(space or (1,), plan.tile_sizes))
    blocks *= plan.split.parts if plan.split else 1  # a split reduction's parts per tile
    assert plan.grid == (blocks,) and blocks <= GRID_X, plan


# --- Tile elements: reductions too wide for one tile are chunked -------------------------------


@pytest.mark.parametrize("dims, reduced", [
    ((4, 2**21), (1,)),            # one row of 2^21: no persistent tile can hold it
    ((3, 2**21 + 3), (1,)),        # padded to 2^22
    ((2, 2048, 2048), (1, 2)),     # two reduced dims, 2^22 together
    ((2**21, 8), (0,)),            # a column reduction over 2^21 rows
])
def test_reduction_wider_than_any_tile_is_chunked(dims, reduced):
    text = reduction_fusion(dims, reduced)
    module = parse_hlo(text)
    analysis = analyze_fusion_tiling(module, module.entry.root)
    whole = tuple(module.entry.root.shape.dims)  # one block, the reduced dims persistent
    assert "loop over chunks" in check_tiling(analysis, whole, None)
    report = tiling_candidates(module, module.entry.root, analysis)
    default = report.default
    assert default is not None, report.default_reason
    chunk = default.reduction_chunk
    assert chunk is not None and chunk & (chunk - 1) == 0, default
    assert check_tiling(analysis, default.tile_sizes, chunk) is None
    assert "chunks" in report.default_reason
    assert_plan_within_limits(text, default.tile_sizes, chunk)
    tiles, chosen_chunk, why = choose_fusion_tiling(module, module.entry.root, None, None)
    assert why.startswith("tile analysis"), why
    assert_plan_within_limits(text, tiles, chosen_chunk)


def test_costing_a_2_33_wide_reduction_materializes_nothing():
    """The candidates' traffic count intersects tiles arithmetically (it once built Python
    sets of every index: 2^33 of them here, an out-of-memory kill)."""
    text = reduction_fusion((2, 2**33), (1,))
    module = parse_hlo(text)
    report = tiling_candidates(module, module.entry.root)
    assert report.default is not None and report.default.reduction_chunk is not None
    assert report.default.bytes_read == 2 * 2**33 * 4  # both rows, read whole, once
    assert_plan_within_limits(text, report.default.tile_sizes, report.default.reduction_chunk)


def _ranges():
    return st.builds(lambda start, step, n: range(start, start + step * n, step),
                     st.integers(-20, 60), st.sampled_from([1, 2, 3, 4, 6, -1, -2, -5]),
                     st.integers(0, 25))


@settings(max_examples=300, deadline=None)
@given(a=_ranges(), b=_ranges())
def test_range_intersection_matches_sets(a, b):
    from tiling.policy.costs import _intersect

    assert set(_intersect(a, b)) == set(a) & set(b)


def test_compile_hlo_plans_the_2_21_row_reduction_without_running_it():
    text = f"""HloModule m
{ADD}
ENTRY e {{ x = f32[4,2097152] parameter(0)
  c = f32[] constant(0)
  ROOT r = f32[4] reduce(x, c), dimensions={{1}}, to_apply=add }}"""
    compiled = compile_hlo(text)
    (fusion,) = compiled.fusions.values()
    assert fusion.reduction_chunk is not None and fusion.reduction_chunk <= 2**14
    assert math.prod(fusion.tile_sizes) * fusion.reduction_chunk <= TRITON_MAX_NUMEL
    assert fusion.grid[0] <= GRID_X


def test_persistent_tile_of_a_2_21_row_is_refused_with_the_reason():
    text = reduction_fusion((4, 2**21), (1,))
    module = parse_hlo(text)
    analysis = analyze_fusion_tiling(module, module.entry.root)
    assert "exceed the persistent limit" in check_tiling(analysis, (1,), None)
    assert "more than Triton's 1048576" in check_tiling(analysis, (1,), 2**21)
    with pytest.raises(UnsupportedOpError, match=r"tile sizes \[1\] with reduction chunk 2097152 "
                                                 r"are illegal: .*more than Triton's 1048576"):
        choose_fusion_tiling(module, module.entry.root, (1,), 2**21)


def test_explicit_output_tile_over_2_20_elements_is_refused():
    text = loop_fusion((4, 2**21))
    with pytest.raises(UnsupportedOpError, match=r"more than Triton's 1048576"):
        compile_hlo(text, tiling={"r": (1, 2**21)})


# --- Grid size: a huge leading dim ---------------------------------------------------------------


def test_tiny_tiles_over_a_huge_leading_dim_are_refused_before_launch():
    text = loop_fusion((2**32, 16))
    with pytest.raises(UnsupportedOpError, match=r"4294967296 blocks exceed CUDA's grid x limit 2147483647"):
        compile_hlo(text, tiling={"r": (1, 16)})


def test_default_tiling_of_a_huge_leading_dim_fits_the_grid():
    text = loop_fusion((2**32, 16))
    module = parse_hlo(text)
    report = tiling_candidates(module, module.entry.root)
    assert report.default is not None and report.default.num_blocks <= GRID_X
    assert any("grid x limit" in r.reason for r in report.rejected)
    assert_plan_within_limits(text, report.default.tile_sizes, None)
    compiled = compile_hlo(text)  # the interpreter's larger blocks: still within the limits
    fusion = compiled.fusions["r"]
    assert fusion.grid[0] <= GRID_X and math.prod(fusion.tile_sizes) <= TRITON_MAX_NUMEL


@settings(max_examples=12, deadline=None)
@given(dims=st.lists(st.integers(1, 2**33), min_size=1, max_size=3).filter(
           lambda d: math.prod(d) <= 2**44),
       reduce_last=st.booleans())
def test_default_plan_of_any_huge_shape_is_within_the_limits(dims, reduce_last):
    """Whatever the shape, the default tiling is legal and its kernel plan fits Triton/CUDA."""
    dims = tuple(dims)
    text = reduction_fusion(dims, (len(dims) - 1,)) if reduce_last else loop_fusion(dims)
    module = parse_hlo(text)
    tiles, chunk, why = choose_fusion_tiling(module, module.entry.root, None, None)
    assert_plan_within_limits(text, tiles, chunk)


# --- Shared memory: dot tilings --------------------------------------------------------------------

DOT = """HloModule m
ENTRY e { x = f32[512,512] parameter(0)
  y = f32[512,512] parameter(1)
  ROOT d = f32[512,512] dot(x, y), lhs_contracting_dims={1}, rhs_contracting_dims={0} }"""


@pytest.mark.parametrize("target, limit", [("sm_90", 232448), ("sm_80", 166912)])
def test_dot_tiling_over_shared_memory_is_refused_before_launch(target, limit):
    with pytest.raises(UnsupportedOpError, match=rf"shared memory \d+ bytes .* exceeds sm_\d+'s {limit} bytes"):
        compile_hlo(DOT, target=target, tiling={"wrapped_d": (256, 256, 128)})


@pytest.mark.parametrize("arch", [80, 90])
@pytest.mark.parametrize("operand_bytes", [1, 2, 4, 8])
def test_default_dot_tiling_fits_shared_memory(arch, operand_bytes):
    for m, n, k in [(16, 16, 16), (4096, 4096, 4096), (100000, 30, 7)]:
        tiling = default_tiling(DotProblem(1, m, n, k, operand_bytes), arch)
        assert shared_memory_bytes(tiling, operand_bytes) <= SHARED_MEMORY_PER_BLOCK[arch]
        assert tiling.block_m * tiling.block_n <= TRITON_MAX_NUMEL


def test_batched_dot_with_more_than_65535_batches_fits_the_grid_or_is_refused():
    text = """HloModule m
ENTRY e { x = f32[70000,16,16] parameter(0)
  y = f32[70000,16,16] parameter(1)
  ROOT d = f32[70000,16,16] dot(x, y), lhs_batch_dims={0}, rhs_batch_dims={0},
    lhs_contracting_dims={2}, rhs_contracting_dims={1} }"""
    try:
        compiled = compile_hlo(text)
    except UnsupportedOpError as err:
        assert "grid" in err.message
        return
    grid = compiled.fusions["wrapped_d"].grid
    assert grid[0] <= GRID_X and all(g <= GRID_YZ for g in grid[1:]), grid


def test_explicit_tiles_of_a_fusion_the_analysis_refuses_are_still_bounded():
    text = f"""HloModule m
{ADD}
ENTRY e {{ x = f32[4194304] parameter(0)
  c = f32[] constant(0)
  ROOT w = f32[4194304] reduce-window(x, c), window={{size=3 pad=1_1}}, to_apply=add }}"""
    with pytest.raises(UnsupportedOpError, match=r"1048576"):
        compile_hlo(text, tiling={"wrapped_w": (4194304,)})


def reduce_window_fusion(n: int) -> str:
    return f"""HloModule m
{ADD}
f {{ p = f32[{n}] parameter(0)
  c = f32[] constant(0)
  ROOT w = f32[{n}] reduce-window(p, c), window={{size=3 pad=1_1}}, to_apply=add }}
ENTRY e {{ x = f32[{n}] parameter(0)
  ROOT r = f32[{n}] fusion(x), kind=kLoop, calls=f }}"""


def test_a_refused_fusion_counts_its_window_axes_in_the_tile_bound():
    # 2^20 output lanes fit alone, but each program also walks the window (3, padded to 4).
    module = parse_hlo(reduce_window_fusion(2**22))
    with pytest.raises(UnsupportedOpError, match=r"4194304 elements .* more than Triton's 1048576"):
        choose_fusion_tiling(module, module.entry.root, (2**20,), None)
    tiles, _, why = choose_fusion_tiling(module, module.entry.root, (2**18,), None)
    assert tiles == (2**18,) and "tile analysis refused" in why
    assert_plan_within_limits(reduce_window_fusion(2**22), tiles, None)


def test_a_refused_fusion_with_tiles_over_the_grid_limit_is_refused():
    module = parse_hlo(reduce_window_fusion(2**32))
    with pytest.raises(UnsupportedOpError, match=r"4294967296 blocks exceed CUDA's grid x limit"):
        choose_fusion_tiling(module, module.entry.root, (1,), None)
