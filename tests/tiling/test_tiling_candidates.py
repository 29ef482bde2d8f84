"""Candidate enumeration, costs, the default choice, and XLA's block_level_fusion_config."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from fusion.text.parser import parse_hlo
from tiling.policy.candidates import candidate_sizes, evaluate_candidate, tiling_candidates
from tiling.policy.choice import choose_from_report
from tiling.policy.costs import uncoalesced_fraction
from tiling.policy.legality import check_tiling
from tiling.policy.limits import MAX_PERSISTENT_REDUCTION
from tiling.symbolic.tiled_fusion import analyze_fusion_tiling
from tiling.policy.xla_tiling_config import xla_tiling_of


def _module(body: str, params: str, out: str, backend_config: str = "") -> tuple:
    text = (f"HloModule m\nadd {{\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
            f"  ROOT s = f32[] add(a, b)\n}}\nf {{\n{body}\n}}\nENTRY e {{\n{params}\n"
            f"  ROOT y = {out} fusion({', '.join(p.split('=')[0].strip() for p in params.splitlines())}),"
            f" kind=kCustom, calls=f{backend_config}\n}}")
    m = parse_hlo(text)
    return m, m.entry.root


def test_candidate_sizes_are_powers_of_two_plus_the_dim():
    assert candidate_sizes((6,)) == [(1,), (2,), (4,), (6,)]
    assert len(candidate_sizes((6, 512, 4096))) == 4 * 10 * 13


def test_reuse_counts_a_parameter_read_through_two_overlapping_maps_once():
    m, f = _module("  p = f32[8,8] parameter(0)\n  t = f32[8,8] transpose(p), dimensions={1,0}\n"
                   "  ROOT a = f32[8,8] add(p, t)", "  x = f32[8,8] parameter(0)", "f32[8,8]")
    c = evaluate_candidate(analyze_fusion_tiling(m, f), (8, 8))
    assert c.bytes_read == 2 * 64 * 4            # two tiles of the whole parameter
    assert c.bytes_read_with_reuse == 64 * 4     # the same elements: read once
    c = evaluate_candidate(analyze_fusion_tiling(m, f), (2, 8))
    # rows 0-1 and columns 0-1 overlap in a 2x2 corner
    assert c.bytes_read_with_reuse == (16 + 16 - 4) * 4
    assert c.bytes_written == 16 * 4 and c.flops == 16


def test_broadcast_operand_is_reread_by_every_block():
    m, f = _module("  p = f32[256] parameter(0)\n"
                   "  ROOT b = f32[64,256] broadcast(p), dimensions={1}",
                   "  x = f32[256] parameter(0)", "f32[64,256]")
    report = tiling_candidates(m, f)
    c = next(c for c in report.legal if c.tile_sizes == (1, 256))
    assert c.num_blocks == 64 and c.total_bytes_read == 64 * 256 * 4
    assert report.reread_factor(c) == 64.0


def test_default_is_coalesced_and_explained():
    m, f = _module("  p = f32[6,4096] parameter(0)\n  ROOT e = f32[6,4096] exponential(p)",
                   "  x = f32[6,4096] parameter(0)", "f32[6,4096]")
    report = tiling_candidates(m, f)
    assert report.default.tile_sizes[1] >= 128
    assert "coalesce" in report.default_reason and "blocks" in report.default_reason
    assert all(r.reason for r in report.rejected)
    assert any("fewer than 16" in r.reason for r in report.rejected)


@pytest.mark.parametrize("rows, cols, chunked", [(4, 8, False), (4, 65536, True)])
def test_row_reduction_whole_when_it_fits_chunked_otherwise(rows, cols, chunked):
    m, f = _module(f"  p = f32[{rows},{cols}] parameter(0)\n  z = f32[] constant(0)\n"
                   f"  ROOT r = f32[{rows}] reduce(p, z), dimensions={{1}}, to_apply=add",
                   f"  x = f32[{rows},{cols}] parameter(0)", f"f32[{rows}]")
    report = tiling_candidates(m, f)
    assert (report.default.reduction_chunk is not None) == chunked
    if chunked:
        assert report.default.reduction_chunk <= MAX_PERSISTENT_REDUCTION
        assert "chunks" in report.default_reason
    else:
        assert "persistent" in report.default_reason


def test_column_reduction_keeps_the_reduced_dim_whole():
    m, f = _module("  p = f32[64,32] parameter(0)\n  z = f32[] constant(0)\n"
                   "  ROOT r = f32[32] reduce(p, z), dimensions={0}, to_apply=add",
                   "  x = f32[64,32] parameter(0)", "f32[32]")
    analysis = analyze_fusion_tiling(m, f)
    report = tiling_candidates(m, f)
    assert report.default.reduction_chunk is None
    tiled = analysis.instantiate(report.default.tile_sizes)
    p_tile = next(t for t in tiled.instructions if t.name == "p")
    assert p_tile.tile.sizes == (64, report.default.tile_sizes[0])


@pytest.mark.parametrize("path, fusion", [
    ("tests/data/hlo/softmax.after.hlo", "reduce_divide_fusion"),
    ("tests/data/hlo/layernorm.after.hlo", "add_rsqrt_fusion"),
])
def test_corpus_reductions_are_persistent(path, fusion):
    from pathlib import Path
    m = parse_hlo((Path(__file__).resolve().parents[2] / path).read_text())
    f = next(i for _, i in m.fusions() if i.name == fusion)
    report = tiling_candidates(m, f)
    assert report.default is not None and report.default.reduction_chunk is None
    tiled = analyze_fusion_tiling(m, f).instantiate(report.default.tile_sizes)
    assert any(t.tile.sizes == (report.default.tile_sizes[0], 8) for t in tiled.instructions)


def test_concatenate_tiles_must_divide_operands_evenly():
    m, f = _module("  a = f32[4,32] parameter(0)\n  b = f32[4,64] parameter(1)\n"
                   "  ROOT c = f32[4,96] concatenate(a, b), dimensions={1}",
                   "  x = f32[4,32] parameter(0)\n  w = f32[4,64] parameter(1)", "f32[4,96]")
    analysis = analyze_fusion_tiling(m, f)
    assert check_tiling(analysis, (1, 32)) is None
    assert "evenly" in check_tiling(analysis, (1, 64))
    assert "evenly" in check_tiling(analysis, (1, 96))


def test_grid_and_numel_limits():
    m, f = _module("  p = f32[2048,1024] parameter(0)\n  ROOT e = f32[2048,1024] negate(p)",
                   "  x = f32[2048,1024] parameter(0)", "f32[2048,1024]")
    analysis = analyze_fusion_tiling(m, f)
    assert "1048576" in check_tiling(analysis, (2048, 1024))
    assert check_tiling(analysis, (1024, 1024)) is None


XLA_CONFIG = json.dumps({"fusion_backend_config": {"kind": "__triton", "block_level_fusion_config": {
    "output_tiles": [{"sizes": ["2", "128"]}], "num_warps": "4", "num_stages": 1}}})


def test_xla_tiling_is_honored_unless_ours_is_asked_for():
    m, f = _module("  p = f32[8,256] parameter(0)\n  ROOT e = f32[8,256] exponential(p)",
                   "  x = f32[8,256] parameter(0)", "f32[8,256]",
                   f", backend_config='{XLA_CONFIG}'")
    cfg = xla_tiling_of(f)
    assert cfg.tile_sizes == (2, 128) and cfg.num_warps == 4 and cfg.num_stages == 1
    report = tiling_candidates(m, f)
    assert report.xla_problem is None
    chosen, why = choose_from_report(report)
    assert chosen.tile_sizes == (2, 128) and "XLA" in why
    ours, _ = choose_from_report(report, prefer_ours=True)
    assert ours == report.default


def test_illegal_xla_tiling_is_reported_and_ours_used():
    bad = XLA_CONFIG.replace('"2", "128"', '"1", "4"')
    m, f = _module("  p = f32[8,256] parameter(0)\n  ROOT e = f32[8,256] exponential(p)",
                   "  x = f32[8,256] parameter(0)", "f32[8,256]", f", backend_config='{bad}'")
    report = tiling_candidates(m, f)
    assert "fewer than 16" in report.xla_problem
    chosen, why = choose_from_report(report)
    assert chosen == report.default and "rejected" in why


def test_transpose_default_is_2d_with_coalesced_reads_and_writes():
    # f32[128,64]{1,0} -> f32[64,128]{1,0}: a block tiled only along the output's minor dim
    # would read the input with stride 64; the default covers >= 128 bytes of both minor dims.
    m, f = _module("  p = f32[128,64] parameter(0)\n"
                   "  ROOT t = f32[64,128] transpose(p), dimensions={1,0}",
                   "  x = f32[128,64] parameter(0)", "f32[64,128]")
    analysis = analyze_fusion_tiling(m, f)
    default = tiling_candidates(m, f).default
    assert default.coalesced and min(default.tile_sizes) >= 32, default
    assert uncoalesced_fraction(analysis, (1, 128)) == 0.5  # the strided reads: half the bytes
    assert uncoalesced_fraction(analysis, default.tile_sizes) == 0.0


@pytest.mark.parametrize("dtype, at_least", [("f32", 128), ("bf16", 256)])
def test_default_block_holds_one_warp_of_128_bit_accesses(dtype, at_least):
    m, f = _module(f"  p = {dtype}[64,256] parameter(0)\n  ROOT e = {dtype}[64,256] negate(p)",
                   f"  x = {dtype}[64,256] parameter(0)", f"{dtype}[64,256]")
    default = tiling_candidates(m, f).default
    assert default.elements >= at_least and default.tile_sizes[1] >= at_least


def test_multi_output_reduction_keeps_reduced_dims_whole():
    # softmax's exp + row sum: outputs f32[64] and f32[64,256]; tiling the reduced dim would
    # make every block along it recompute the whole row sum.
    m, f = _module("  p = f32[64,256] parameter(0)\n  e = f32[64,256] exponential(p)\n"
                   "  z = f32[] constant(0)\n"
                   "  r = f32[64] reduce(e, z), dimensions={1}, to_apply=add\n"
                   "  ROOT t = (f32[64], f32[64,256]) tuple(r, e)",
                   "  x = f32[64,256] parameter(0)", "(f32[64], f32[64,256])")
    report = tiling_candidates(m, f)
    assert report.output_dims == (64, 256)
    assert report.default.tile_sizes[1] == 256 and report.default.reduction_chunk is None
    whole, split = (next(c for c in report.legal if c.tile_sizes == t) for t in ((1, 256), (1, 64)))
    assert split.total_flops == 4 * whole.total_flops - 3 * 64 * 256  # exp once, sum 4x


# --- parallelism: re-reads of small broadcast operands hit L2, not DRAM ---------------------

def _layernorm_scale_shift(rows: int, cols: int) -> tuple:
    """Layernorm's last loop fusion: (x - mean[row]) * rstd[row] * gamma[col] + beta[col]."""
    return _module(
        f"  x = f32[{rows},{cols}] parameter(0)\n  mu = f32[{rows}] parameter(1)\n"
        f"  rs = f32[{rows}] parameter(2)\n  g = f32[{cols}] parameter(3)\n"
        f"  b = f32[{cols}] parameter(4)\n"
        f"  mub = f32[{rows},{cols}] broadcast(mu), dimensions={{0}}\n"
        f"  rsb = f32[{rows},{cols}] broadcast(rs), dimensions={{0}}\n"
        f"  gb = f32[{rows},{cols}] broadcast(g), dimensions={{1}}\n"
        f"  bb = f32[{rows},{cols}] broadcast(b), dimensions={{1}}\n"
        f"  s = f32[{rows},{cols}] subtract(x, mub)\n  n = f32[{rows},{cols}] multiply(s, rsb)\n"
        f"  m = f32[{rows},{cols}] multiply(n, gb)\n  ROOT y = f32[{rows},{cols}] add(m, bb)",
        f"  x = f32[{rows},{cols}] parameter(0)\n  mu = f32[{rows}] parameter(1)\n"
        f"  rs = f32[{rows}] parameter(2)\n  g = f32[{cols}] parameter(3)\n"
        f"  b = f32[{cols}] parameter(4)", f"f32[{rows},{cols}]")


def test_layernorm_scale_shift_spreads_over_sms_with_128_bit_accesses():
    from tiling.policy.limits import VECTOR_BLOCK_BYTES

    m, f = _layernorm_scale_shift(64, 256)
    report = tiling_candidates(m, f)
    d = report.default
    assert d.num_blocks >= 4, d
    # every access coalesced, one warp of 16-byte accesses per block at least
    assert d.coalesced and d.elements >= VECTOR_BLOCK_BYTES // 4
    assert (d.tile_sizes[1] * 4) % 16 == 0 and d.tile_sizes[1] * 4 >= 128
    # every buffer fits L2: DRAM sees each parameter once (the sum of the buffers' sizes)
    assert d.dram_bytes_read == (64 * 256 + 64 + 64 + 256 + 256) * 4
    # the single block reads less in total, but only through L2: not preferred any more
    whole = next(c for c in report.legal if c.tile_sizes == (64, 256))
    assert whole.total_bytes_read < d.total_bytes_read
    assert d.memory_cost <= 1.1 * whole.memory_cost
    assert "hit L2" in report.default_reason


@pytest.mark.parametrize("dtype, cols", [("f32", 32), ("bf16", 64)])
def test_small_fusion_stays_one_block_rather_than_blocks_under_a_warp_of_vectors(dtype, cols):
    # 4 rows: 128 f32 / 256 bf16 = 512 bytes, one warp of 128-bit accesses; halving the
    # block would leave threads without a full vector.
    m, f = _module(f"  p = {dtype}[4,{cols}] parameter(0)\n  ROOT e = {dtype}[4,{cols}] negate(p)",
                   f"  x = {dtype}[4,{cols}] parameter(0)", f"{dtype}[4,{cols}]")
    d = tiling_candidates(m, f).default
    assert d.num_blocks == 1 and d.tile_sizes == (4, cols)


def test_row_reduction_takes_one_row_per_block_when_the_row_is_wide():
    m, f = _module("  p = f32[64,256] parameter(0)\n  z = f32[] constant(0)\n"
                   "  ROOT r = f32[64] reduce(p, z), dimensions={1}, to_apply=add",
                   "  x = f32[64,256] parameter(0)", "f32[64]")
    analysis = analyze_fusion_tiling(m, f)
    assert check_tiling(analysis, (1,)) is None      # the block holds 1 x 256 elements
    d = tiling_candidates(m, f).default
    assert d.tile_sizes == (1,) and d.num_blocks == 64 and d.reduction_chunk is None
    assert d.bytes_read_with_reuse == 256 * 4 and d.coalesced


def test_narrow_row_reduction_still_needs_16_elements_per_block():
    m, f = _module("  p = f32[4,8] parameter(0)\n  z = f32[] constant(0)\n"
                   "  ROOT r = f32[4] reduce(p, z), dimensions={1}, to_apply=add",
                   "  x = f32[4,8] parameter(0)", "f32[4]")
    analysis = analyze_fusion_tiling(m, f)
    assert "its reduction's input tile: 8" in check_tiling(analysis, (1,))
    assert check_tiling(analysis, (2,)) is None


def test_looped_reduction_keeps_the_root_tile_minimum():
    m, f = _module("  p = f32[2,65536] parameter(0)\n  z = f32[] constant(0)\n"
                   "  ROOT r = f32[2] reduce(p, z), dimensions={1}, to_apply=add",
                   "  x = f32[2,65536] parameter(0)", "f32[2]")
    analysis = analyze_fusion_tiling(m, f)
    assert "fewer than 16" in check_tiling(analysis, (1,), 4096)
    assert check_tiling(analysis, (2,), 4096) is None


def test_broadcast_operand_larger_than_l2_is_reread_from_dram():
    from tiling.policy.limits import L2_RESIDENT_BYTES

    cols = 2 * L2_RESIDENT_BYTES // 4  # f32: twice the resident budget
    m, f = _module(f"  p = f32[{cols}] parameter(0)\n"
                   f"  ROOT b = f32[2,{cols}] broadcast(p), dimensions={{1}}",
                   f"  x = f32[{cols}] parameter(0)", f"f32[2,{cols}]")
    c = evaluate_candidate(analyze_fusion_tiling(m, f), (1, 1024))
    assert c.dram_bytes_read == c.total_bytes_read == 2 * cols * 4


@settings(max_examples=12, deadline=None)
@given(rows=st.sampled_from([2, 8, 64, 512]), cols=st.sampled_from([32, 256, 1024]))
def test_default_is_near_the_least_cost_and_fills_the_sms_when_the_work_allows(rows, cols):
    from tiling.policy.limits import COST_TOLERANCE, NUM_SMS, TARGET_TILE_ELEMENTS

    m, f = _layernorm_scale_shift(rows, cols)
    report = tiling_candidates(m, f)
    d = report.default
    least = min(c.memory_cost for c in report.legal if c.coalesced)
    assert d.coalesced and d.memory_cost <= least * (1 + COST_TOLERANCE)
    work = rows * cols
    assert d.elements >= min(work, 128)  # one warp of 128-bit f32 accesses
    # enough blocks for every SM, or blocks of one warp's vectors when the work is smaller
    assert d.num_blocks >= min(NUM_SMS, work // 128)
    assert d.elements <= TARGET_TILE_ELEMENTS
