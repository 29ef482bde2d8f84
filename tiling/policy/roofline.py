"""A compute roofline beside the memory one: how long elementwise work and memory traffic take
on a device, for decisions that trade recomputation against bytes.

The memory side is the device's DRAM bandwidth; the compute side is its CUDA-core FP32 peak
(``DeviceSpec.peak_flops``), read as instructions per second: the datasheet counts a fused
multiply-add as two flops, and an elementwise op of an HLO fusion is about one instruction per
element, except the expensive ones (transcendentals, division: a libdevice sequence around
the special-function unit, which runs at a quarter of the FMA rate).

>>> from tiling.policy.limits import DEFAULT_DEVICE
>>> instructions_per_element("add"), instructions_per_element("tanh")
(1, 8)
>>> instructions_per_element("broadcast"), instructions_per_element("convert")
(0, 1)
>>> round(compute_seconds(33.45e6, DEFAULT_DEVICE) * 1e6, 3)  # microseconds
1.0
>>> round(memory_seconds(3.35e6, DEFAULT_DEVICE) * 1e6, 3)
1.0
"""
from __future__ import annotations

from fusion.opcodes import traits
from tiling.policy.devices import DeviceSpec

#: Instructions per element of an expensive elementwise op (tanh, exp, rsqrt, divide, ...):
#: the SFU's quarter rate plus the range reduction and Newton steps around it.
EXPENSIVE_INSTRUCTIONS = 8
#: What one more kernel costs beyond its bytes: launch, ramp-up and the tail of the last
#: wave (a few microseconds on H100 even inside a CUDA graph).
KERNEL_LAUNCH_SECONDS = 2e-6


def instructions_per_element(opcode: str) -> int:
    """Instructions an op costs per element it computes: 0 for what only moves or names
    values (the template folds broadcasts, reshapes and transposes into its indices), 1 for
    an elementwise op (a conversion too: a cvt instruction), ``EXPENSIVE_INSTRUCTIONS`` for
    an expensive one."""
    t = traits(opcode)
    if not t.elementwise:
        return 0
    return EXPENSIVE_INSTRUCTIONS if t.expensive else 1


def compute_seconds(instructions: float, device: DeviceSpec) -> float:
    """Seconds ``instructions`` elementwise instructions take on all of ``device``'s CUDA
    cores (one instruction is one FMA: two of the datasheet's FP32 flops)."""
    return instructions / (device.peak_flops("f32") / 2)


def memory_seconds(num_bytes: float, device: DeviceSpec) -> float:
    """Seconds ``num_bytes`` take at ``device``'s DRAM bandwidth."""
    return num_bytes / device.memory_bandwidth_bytes_per_s
