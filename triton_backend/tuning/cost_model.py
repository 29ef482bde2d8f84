"""A roofline cost model for one tiling of a fusion on a named GPU.

Inputs (a :class:`Workload`): the block count, the bytes the kernel moves *as tiled* (every
block re-reads what it needs, so a broadcast operand shared by many blocks is read many
times), the compulsory bytes (each input byte read once, each output byte written once), and
the flops.  The prediction:

* ``memory_time = modeled_bytes / peak_bandwidth``;
* ``compute_time = flops / peak(CUDA cores, compute dtype) + tensor_flops / peak(tensor cores)``
  (fusions compute 16-bit floats in fp32 registers, see ``numerics_policy``);
* **wave quantization**: blocks are spread over the SMs, so the busiest SM runs
  ``ceil(blocks / SMs)`` of them while the average is ``blocks / SMs``;
  ``wave_efficiency = blocks / (SMs * ceil(blocks / SMs))``: a grid of 133 blocks on 132 SMs
  takes as long as 264 blocks, and a grid smaller than the machine leaves SMs idle.  The
  classic ``waves = ceil(blocks / slots)`` with ``slots = SMs * resident blocks per SM``
  (limited by the 64 warps and 32 blocks an SM holds and by shared memory) is reported too;
* **latency hiding** (Little's law, coarsely): an SM streams at its share of the bandwidth only
  with enough loads in flight; below :data:`WARPS_TO_SATURATE` resident warps (times the
  pipeline stages of a workload with ``pipelined_loads``, a dot's K loop) the memory time is
  scaled by ``WARPS_TO_SATURATE / resident_warps``;
* ``predicted = max(max(memory_time / latency_hiding, compute_time) / wave_efficiency,
  critical_path) + launch`` (a workload's ``critical_path_s``: its dependent steps, 0 unless
  given);
* ``bandwidth_fraction = compulsory_bytes / predicted / peak_bandwidth``: the fraction of the
  memory roofline the kernel reaches on the bytes the computation must move.

It ignores caches (an L2 hit is counted as an HBM read: re-reads are an upper bound) except
in a dot's workload, whose grouped programs share their operand tiles through L2 within a
wave (``dot_candidates``); and register pressure: it ranks tilings, it does not replace a
measurement.

>>> w = Workload(tile_sizes=(1024,), num_blocks=1024, bytes_read=4 << 20, bytes_written=4 << 20,
...              compulsory_bytes_read=4 << 20, compulsory_bytes_written=4 << 20, flops=1 << 20)
>>> e = estimate(w, "h100", num_warps=4, launch_overhead_s=0.0)
>>> e.slots, e.waves, round(e.wave_efficiency, 4), e.latency_hiding
(2112, 1, 0.9697, 1.0)
>>> round(e.predicted_time_s * 1e6, 3), e.bound
(2.582, 'memory')
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from triton_backend.runtime.device_specs import DeviceSpec, device_spec

#: Resident warps per SM from which a streaming kernel keeps enough loads in flight to reach
#: its share of the bandwidth (about half the 64-warp occupancy, the usual rule of thumb).
WARPS_TO_SATURATE = 32

#: Host-side launch cost added to every prediction (a typical CUDA launch; ranks ties by it).
DEFAULT_LAUNCH_OVERHEAD_S = 3e-6


@dataclass(frozen=True)
class Workload:
    """What one tiling of a fusion does, in device-independent numbers.

    ``bytes_read``/``bytes_written`` are the modeled traffic (sum over blocks of each block's
    tiles, re-reads included); the ``compulsory_*`` ones are the operands' and outputs' sizes.
    ``shared_memory_bytes`` is per block (0 when unknown or unused).
    ``tensor_core_efficiency``: the fraction of the tensor-core peak the kernel's tiles reach
    (a dot's measured table, ``dot_candidates``); ``wave_latency_s``: time each wave of
    blocks adds beyond its throughput (pipeline fill and epilogue); ``pipelined_loads``: its
    loop's loads are software-pipelined over ``num_stages`` buffers (the dot template's);
    ``critical_path_s``: the least time the kernel takes whatever its throughput, its
    programs' dependent steps one after another (an attention kernel's, ``attention_workload``);
    ``dot_flops``: its dots' FLOPs as the HLO counts them (two per multiply-add), whichever
    units run them (``flops`` and ``tensor_core_flops`` are what those units are charged).
    """

    tile_sizes: tuple[int, ...]
    num_blocks: int
    bytes_read: int
    bytes_written: int
    compulsory_bytes_read: int
    compulsory_bytes_written: int
    flops: int
    compute_dtype: str = "f32"
    tensor_core_flops: int = 0
    tensor_core_dtype: str = "bf16"
    shared_memory_bytes: int = 0
    tensor_core_efficiency: float = 1.0
    wave_latency_s: float = 0.0
    pipelined_loads: bool = False
    critical_path_s: float = 0.0
    dot_flops: int = 0

    @property
    def modeled_bytes(self) -> int:
        return self.bytes_read + self.bytes_written

    @property
    def compulsory_bytes(self) -> int:
        return self.compulsory_bytes_read + self.compulsory_bytes_written

    @property
    def traffic_ratio(self) -> float:
        """Modeled over compulsory bytes (1.0: no byte moved twice)."""
        return self.modeled_bytes / self.compulsory_bytes if self.compulsory_bytes else 1.0


@dataclass(frozen=True)
class CostEstimate:
    """The prediction for one (workload, device, launch configuration)."""

    device: str
    workload: Workload
    num_warps: int
    num_stages: int
    blocks_per_sm: int
    slots: int
    waves: int
    wave_efficiency: float
    latency_hiding: float
    memory_time_s: float
    compute_time_s: float
    launch_overhead_s: float
    predicted_time_s: float
    peak_bandwidth_bytes_per_s: float

    @property
    def bound(self) -> str:
        """``memory``, ``compute`` or ``latency`` (the workload's critical path)."""
        memory = self.memory_time_s / self.latency_hiding
        throughput = max(memory, self.compute_time_s) / self.wave_efficiency
        if self.workload.critical_path_s > throughput:
            return "latency"
        return "memory" if memory >= self.compute_time_s else "compute"

    @property
    def modeled_bytes(self) -> int:
        return self.workload.modeled_bytes

    @property
    def compulsory_bytes(self) -> int:
        return self.workload.compulsory_bytes

    @property
    def effective_bandwidth_bytes_per_s(self) -> float:
        """Compulsory bytes over predicted time (what a benchmark would report as GB/s)."""
        return self.compulsory_bytes / self.predicted_time_s

    @property
    def bandwidth_fraction(self) -> float:
        """Fraction of the device's peak memory bandwidth reached on the compulsory bytes."""
        return self.effective_bandwidth_bytes_per_s / self.peak_bandwidth_bytes_per_s


class InfeasibleLaunch(ValueError):
    """The launch configuration cannot run on the device (too much shared memory, bad warps)."""


def resident_blocks_per_sm(spec: DeviceSpec, num_warps: int, shared_memory_bytes: int = 0) -> int:
    """How many blocks of ``num_warps`` warps one SM holds at once.

    >>> spec = device_spec("a100-40gb")
    >>> resident_blocks_per_sm(spec, 4), resident_blocks_per_sm(spec, 8, 48 * 1024)
    (16, 3)
    """
    if num_warps < 1 or num_warps > spec.max_warps_per_sm or num_warps & (num_warps - 1):
        raise InfeasibleLaunch(f"num_warps={num_warps} must be a power of two in "
                               f"[1, {spec.max_warps_per_sm}] on {spec.name}")
    if shared_memory_bytes > spec.shared_memory_per_block_bytes:
        raise InfeasibleLaunch(
            f"{shared_memory_bytes} bytes of shared memory per block exceed {spec.name}'s "
            f"{spec.shared_memory_per_block_bytes}")
    limits = [spec.max_blocks_per_sm, spec.max_warps_per_sm // num_warps]
    if shared_memory_bytes > 0:
        limits.append(spec.shared_memory_per_sm_bytes // shared_memory_bytes)
    return max(1, min(limits))


def estimate(workload: Workload, device: str | DeviceSpec, *, num_warps: int = 4,
             num_stages: int = 1,
             launch_overhead_s: float = DEFAULT_LAUNCH_OVERHEAD_S) -> CostEstimate:
    """Predicted time of ``workload`` on ``device`` (see the module docstring for the model).

    ``num_stages`` multiplies the per-block shared memory (Triton's software pipelining keeps
    one buffer per stage), which can lower occupancy.
    """
    spec = device if isinstance(device, DeviceSpec) else device_spec(device)
    if workload.num_blocks < 1:
        raise ValueError(f"a workload needs at least one block, got {workload.num_blocks}")
    if num_stages < 1:
        raise InfeasibleLaunch(f"num_stages={num_stages} must be at least 1")
    smem = workload.shared_memory_bytes * num_stages
    per_sm = resident_blocks_per_sm(spec, num_warps, smem)
    slots = spec.sm_count * per_sm
    blocks = workload.num_blocks
    waves = math.ceil(blocks / slots)
    busiest_sm = math.ceil(blocks / spec.sm_count)
    efficiency = blocks / (spec.sm_count * busiest_sm)
    resident_warps = min(per_sm, busiest_sm) * num_warps
    # Each pipeline stage of a pipelined K loop keeps one more load per warp in flight: a
    # GEMM of one 8-warp program per SM at 4 stages streams as 32 warps would.
    in_flight = resident_warps * (num_stages if workload.pipelined_loads else 1)
    hiding = min(1.0, in_flight / WARPS_TO_SATURATE)
    bandwidth = spec.memory_bandwidth_bytes_per_s
    memory_time = workload.modeled_bytes / bandwidth
    compute_time = workload.flops / spec.peak_flops(_cuda_core_dtype(workload.compute_dtype))
    if workload.tensor_core_flops:
        compute_time += workload.tensor_core_flops / (spec.peak_flops(
            workload.tensor_core_dtype, tensor_cores=True) * workload.tensor_core_efficiency)
    predicted = max(max(memory_time / hiding, compute_time) / efficiency,
                    workload.critical_path_s) + launch_overhead_s \
        + workload.wave_latency_s * waves
    return CostEstimate(spec.key, workload, num_warps, num_stages, per_sm, slots, waves,
                        efficiency, hiding, memory_time, compute_time, launch_overhead_s, predicted,
                        bandwidth)


def _cuda_core_dtype(dtype: str) -> str:
    # 16-bit floats are computed in fp32 registers (numerics policy); integers and predicates
    # run on the fp32-rate integer/ALU pipes, which the fp32 figure stands in for.
    return "f64" if dtype == "f64" else "f32"


def rank(estimates: Sequence[CostEstimate]) -> list[CostEstimate]:
    """Fastest predicted first; ties broken by fewer modeled bytes, then fewer warps (one block of
    1 warp per SM hides no latency, so 8 warps win here).

    >>> w = Workload((64,), 64, 256, 256, 256, 256, 0)
    >>> [e.num_warps for e in rank([estimate(w, "h100", num_warps=8), estimate(w, "h100", num_warps=1)])]
    [8, 1]
    """
    return sorted(estimates, key=lambda e: (e.predicted_time_s, e.modeled_bytes, e.num_warps,
                                            e.num_stages, e.workload.tile_sizes))
