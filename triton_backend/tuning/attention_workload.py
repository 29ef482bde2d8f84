"""The workload of an attention kernel (forward and backward), as the cost model sees it.

An attention program owns a block of rows (``BLOCK_M`` queries, or a backward ``key``
kernel's keys) and walks the blocks of the other side its mask lets it see (its *steps*).
Each step runs the kernel's dots on ``BLOCK_M x BLOCK_N`` scores over the padded head dim:
``2 * BM * BN * BD`` tensor-core FLOPs per dot (two per step for the one-pass forward, one per
reduction more for the multi-pass form, at most; a backward kernel's are the
``DOTS_PER_BLOCK`` its renderer counted in its file, each of its loops walking the same
blocks).  Its DRAM bytes are its inputs and outputs once: the key and value blocks every
query block of a head reads again come from L2 (a head's keys and values are a few MB, and
its query blocks run side by side), and the loads are pipelined over the kernel's stages.

Measured (``bench/tile_sweep.py``, an H200, Triton 3.6) the kernels run at about a third of
the tensor-core peak where the machine is full, and small problems (``[4,8,512,64]``, a few
steps per program) take longer than their FLOPs: each step is a dependent chain (loads, a dot,
the softmax, a dot), about :data:`STEP_LATENCY_S` plus its FLOPs at half an SM's tensor-core
rate.  So a kernel takes at least its *critical path*: the steps its SMs run one after
another (the rounds of resident programs times the mean steps, or the longest program's
steps) times that step time (``Workload.critical_path_s``).  An 8-warp program's tiles take
most of an SM's registers (one resident program), a 4-warp one's half (two).  With these
constants the model's median over the 36 measured forward configurations is their measured
time, each within 0.56x-1.8x (``tests/triton_backend/test_attention_cost_model.py``).  No
backward configuration was timed: a backward kernel's estimate counts its dots only, and on
an H200 those kernels took 2.5-5x longer (their score-space arithmetic, an exact division
per score among it, is not counted).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from fusion.ir.element_types import ELEMENT_TYPES
from fusion.ir.hlo_module import HloInstruction, HloModule
from fusion.ir.shape import ArrayShape, flatten_shape
from triton_backend.runtime.device_specs import DeviceSpec
from triton_backend.runtime.kernel_loading import TemplateKind
from triton_backend.templates.attention.backward_driver import score_space, visited_fraction
from triton_backend.templates.attention.driver import attention_form, attention_pattern
from triton_backend.templates.attention.tiling import block_d_for
from triton_backend.tuning.cost_model import Workload

#: Fraction of the tensor-core peak an attention kernel's dots reach on a full machine
#: (H200: 0.26-0.35 at ``[4,16,2048,128]`` over the block sizes tried).
TENSOR_CORE_EFFICIENCY = 0.35

#: Fraction of the FMA units' peak exact f32 attention reaches (H200: causal f32
#: ``[4,8,512,64]`` at 204 us, 1.2 GFLOP of visited blocks, 67 TFLOP/s of FMA).
FMA_EFFICIENCY = 0.09

#: The fixed part of one step's time (module docstring), and the fraction of one SM's
#: tensor-core rate a single step's dots reach.
STEP_LATENCY_S = 1.3e-6
STEP_TENSOR_CORE_EFFICIENCY = 0.5


def _bytes(shape) -> int:
    return sum(math.prod(s.dims) * ELEMENT_TYPES[s.dtype].byte_size
               for s in flatten_shape(shape) if isinstance(s, ArrayShape))


def attention_workload(module: HloModule, fusion_instr: HloInstruction, kernel,
                       spec: DeviceSpec, num_warps: int = 4) -> Workload:
    """The workload of ``kernel`` (the ``CompiledFusion`` of attention or attention-backward
    fusion ``fusion_instr``) at ``num_warps`` on ``spec`` (module docstring)."""
    comp = module.computation(fusion_instr.attr("calls"))
    block_m, block_n = (int(t) for t in kernel.tile_sizes[:2])
    if kernel.kind is TemplateKind.ATTENTION:
        steps = _forward_steps(module, fusion_instr, block_m, block_n)
    else:
        steps = _backward_steps(module, fusion_instr, kernel, block_m, block_n)
    step_flops = steps.dots * 2 * block_m * block_n * steps.block_d
    total_flops = round(steps.programs * steps.mean * step_flops)
    inputs = sum(_bytes(p.shape) for p in comp.parameters)
    outputs = _bytes(fusion_instr.shape)
    exact = ELEMENT_TYPES[steps.operand].byte_size >= 4  # exact f32 runs on the FMA units
    rate = spec.peak_flops("f32") * FMA_EFFICIENCY if exact else \
        spec.peak_flops(steps.operand, tensor_cores=True) * STEP_TENSOR_CORE_EFFICIENCY
    step_time = STEP_LATENCY_S + step_flops / (rate / spec.sm_count)
    rounds = math.ceil(steps.programs / (spec.sm_count * (1 if num_warps >= 8 else 2)))
    return Workload(
        (block_m, block_n), steps.programs, inputs, outputs, inputs, outputs,
        round(total_flops / FMA_EFFICIENCY) if exact else 0,
        tensor_core_flops=0 if exact else total_flops, tensor_core_dtype=steps.operand,
        tensor_core_efficiency=TENSOR_CORE_EFFICIENCY, pipelined_loads=True,
        dot_flops=total_flops, critical_path_s=max(rounds * steps.mean, steps.longest) * step_time)


@dataclass(frozen=True)
class _Steps:
    """A kernel's programs and their steps: how many (mean, longest), the dots of one, the
    padded head dim and the dots' operand type."""

    programs: int
    mean: float
    longest: int
    dots: int
    block_d: int
    operand: str


def _forward_steps(module, fusion_instr, block_m: int, block_n: int) -> _Steps:
    comp = module.computation(fusion_instr.attr("calls"))
    pattern = attention_pattern(module, fusion_instr)
    form = attention_form(module, fusion_instr)
    steps = []
    for q0 in range(0, pattern.queries, block_m):
        first, end = (0, pattern.keys) if form.band is None else \
            form.band.key_range(q0, block_m, pattern.keys)
        steps.append(max(0, -(-end // block_n) - first // block_n))
    steps = steps or [0]  # no query rows: one idle program
    return _Steps(math.prod(pattern.batch) * len(steps), sum(steps) / len(steps), max(steps),
                  2 if form.online is not None else 2 + len(pattern.reduces),
                  block_d_for(pattern.head_dim, pattern.value_dim),
                  comp.instruction(comp.instruction(pattern.dot1).operands[0]).shape.dtype)


def _backward_steps(module, fusion_instr, kernel, block_m: int, block_n: int) -> _Steps:
    comp = module.computation(fusion_instr.attr("calls"))
    space = score_space(module, fusion_instr)
    key_kind = space.kind == "key"
    rows, streamed = (space.keys, space.queries) if key_kind else (space.queries, space.keys)
    own, walk = (block_n, block_m) if key_kind else (block_m, block_n)
    # a key kernel's programs are per kv head and walk its query-head group's queries
    group = math.prod(space.group) if key_kind and space.group else 1
    blocks = -(-streamed // walk) * group
    fraction = visited_fraction(module, fusion_instr, (block_m, block_n))
    head = max(space.head_dims)
    return _Steps(math.prod(space.kv_batch if key_kind else space.batch) * -(-rows // own),
                  fraction * blocks, blocks,
                  kernel.module.DOTS_PER_BLOCK, block_d_for(head, head),
                  comp.instruction(comp.instruction(space.score_dots[0]).operands[0]).shape.dtype)


__all__ = ["attention_workload"]
