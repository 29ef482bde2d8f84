"""The cost model against numbers computed by hand from the datasheet table."""
from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion.text.parser import parse_hlo
from tests.triton_backend.fusion_check import BROADCAST_ADD
from tiling.policy.candidates import tiling_candidates
from triton_backend.tuning.autotune import workload_for
from triton_backend.tuning.cost_model import (
    InfeasibleLaunch,
    Workload,
    estimate,
    resident_blocks_per_sm,
)
from triton_backend.runtime.device_specs import DEVICES, device_spec

H100_BW = 3.35e12
MIB = 1 << 20


EXP = """HloModule m
f {
  p0 = f32[1024,1024] parameter(0)
  ROOT e = f32[1024,1024] exponential(p0)
}
ENTRY e {
  x = f32[1024,1024] parameter(0)
  ROOT r = f32[1024,1024] fusion(x), kind=kLoop, calls=f
}"""


def _candidate(text, tile_sizes):
    module = parse_hlo(text)
    report = tiling_candidates(module, module.entry.root)
    (candidate,) = [c for c in report.legal if c.tile_sizes == tile_sizes]
    return module, candidate


def test_device_table_matches_datasheets():
    assert [DEVICES[k].memory_bandwidth_bytes_per_s for k in ("a100-40gb", "a100-80gb", "h100", "h200")] \
        == [1.555e12, 2.039e12, 3.35e12, 4.8e12]
    assert device_spec("a100").sm_count == 108 and device_spec("h200").sm_count == 132
    assert device_spec("h100").peak_flops("f32") == pytest.approx(66.9e12)
    assert device_spec("a100-40gb").peak_flops("bf16", tensor_cores=True) == pytest.approx(312e12)


def test_elementwise_modeled_equals_compulsory_and_time_by_hand():
    module, c = _candidate(EXP, (1, 1024))
    w = workload_for(module, module.entry.root, c)
    assert (w.bytes_read, w.bytes_written) == (4 * MIB, 4 * MIB)
    assert (w.compulsory_bytes_read, w.compulsory_bytes_written) == (4 * MIB, 4 * MIB)
    assert w.traffic_ratio == 1.0 and w.num_blocks == 1024 and w.flops == 1024 * 1024
    e = estimate(w, "h100", num_warps=4, launch_overhead_s=0.0)
    # 1024 blocks on 132 SMs: the busiest SM runs ceil(1024/132) = 8 blocks.
    efficiency = 1024 / (132 * 8)
    memory = 8 * MIB / H100_BW
    assert e.wave_efficiency == pytest.approx(efficiency)
    assert e.memory_time_s == pytest.approx(memory)
    assert e.compute_time_s == pytest.approx(MIB / 66.9e12)
    assert e.predicted_time_s == pytest.approx(memory / efficiency)
    assert e.bandwidth_fraction == pytest.approx(efficiency)
    assert e.bound == "memory" and e.waves == 1 and e.slots == 132 * 16


def test_broadcast_operand_is_reread_by_every_block():
    module, c = _candidate(BROADCAST_ADD, (1, 256))
    w = workload_for(module, module.entry.root, c)
    # 64 blocks each read all 256 floats of p0 and one row of p1.
    assert w.bytes_read == 64 * 256 * 4 + 64 * 256 * 4
    assert w.compulsory_bytes_read == 256 * 4 + 64 * 256 * 4
    assert w.bytes_written == w.compulsory_bytes_written == 64 * 256 * 4
    assert w.traffic_ratio == pytest.approx((131072 + 65536) / (66560 + 65536))
    e = estimate(w, "a100-80gb", num_warps=4, launch_overhead_s=0.0)
    # 64 blocks < 108 SMs: one block per busy SM, efficiency 64/108; 4 warps of a lone block
    # hide 4/32 of the latency.
    expected = (131072 + 65536) / 2.039e12 / (4 / 32) / (64 / 108)
    assert e.predicted_time_s == pytest.approx(expected)
    assert e.bandwidth_fraction == pytest.approx((66560 + 65536) / 2.039e12 / expected / 1)
    # The whole output in one block reads p0 once: modeled == compulsory.
    module, whole = _candidate(BROADCAST_ADD, (64, 256))
    assert workload_for(module, module.entry.root, whole).traffic_ratio == 1.0


def test_wave_quantization_one_block_past_a_full_wave_doubles_the_time():
    def w(blocks):
        return Workload((128,), blocks, blocks * 4096, blocks * 4096, blocks * 4096,
                        blocks * 4096, 0)
    full = estimate(w(132 * 4), "h100", num_warps=8, launch_overhead_s=0.0)
    over = estimate(w(132 * 4 + 1), "h100", num_warps=8, launch_overhead_s=0.0)
    assert full.wave_efficiency == 1.0
    assert over.wave_efficiency == pytest.approx(529 / (132 * 5))
    per_block = 8192 / H100_BW
    assert full.predicted_time_s == pytest.approx(528 * per_block)
    assert over.predicted_time_s == pytest.approx(132 * 5 * per_block)


def test_compute_bound_and_tensor_cores():
    w = Workload((128, 128), 1320, 1 << 20, 1 << 20, 1 << 20, 1 << 20, 0,
                 tensor_core_flops=10**12, tensor_core_dtype="bf16")
    e = estimate(w, "h100", num_warps=4, launch_overhead_s=1e-6)
    assert e.bound == "compute"
    assert e.predicted_time_s == pytest.approx(1e12 / 989.5e12 + 1e-6)


def test_occupancy_and_infeasible_launches():
    spec = device_spec("h100")
    assert resident_blocks_per_sm(spec, 4) == 16
    assert resident_blocks_per_sm(spec, 32) == 2
    assert resident_blocks_per_sm(spec, 1) == 32  # the 32-block limit, not 64 warps
    assert resident_blocks_per_sm(spec, 4, 100 * 1024) == 2  # 228 KB // 100 KB
    with pytest.raises(InfeasibleLaunch, match="exceed"):
        resident_blocks_per_sm(spec, 4, 300 * 1024)
    with pytest.raises(InfeasibleLaunch, match="power of two"):
        resident_blocks_per_sm(spec, 3)
    w = Workload((64,), 10, 100, 100, 100, 100, 0, shared_memory_bytes=100 * 1024)
    with pytest.raises(InfeasibleLaunch):  # 3 stages triple the shared memory
        estimate(w, "h100", num_stages=3)


@settings(max_examples=30, deadline=None)
@given(blocks=st.integers(1, 5000), warps=st.sampled_from([1, 2, 4, 8, 16]),
       device=st.sampled_from(sorted(DEVICES)))
def test_prediction_never_beats_the_roofline(blocks, warps, device):
    w = Workload((32,), blocks, blocks * 128, blocks * 128, blocks * 128, blocks * 128, blocks * 32)
    e = estimate(w, device, num_warps=warps, launch_overhead_s=0.0)
    spec = device_spec(device)
    roofline = max(w.modeled_bytes / spec.memory_bandwidth_bytes_per_s,
                   w.flops / spec.peak_flops("f32"))
    assert e.predicted_time_s >= roofline * (1 - 1e-12)
    assert 0 < e.bandwidth_fraction <= 1 + 1e-12
    assert e.waves == math.ceil(blocks / e.slots)
