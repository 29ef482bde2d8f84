"""The dot template's autotuning candidates, as the cost model sees them.

A dot fusion is tuned over the template's own tilings (``templates.dot.tiling.
candidate_tilings``: blocks, stages and split-K), not over the output tilings of the tile
analysis: its tile sizes are ``(BM, BN, BK)`` or ``(BM, BN, BK, SPLIT_K)``, which is how
the tuning database stores them and ``compile_fusion`` reads them back.

The workload of a tiling: every program reads its rows of the lhs and its columns of the rhs
for its K slice, so the lhs is read once per N tile and the rhs once per M tile; the other
inputs and the outputs once.  Split-K adds its partial tiles (f32, one per slice of every
tile), written once and read once, counted as written.

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... f {
...   a = bf16[512,1024] parameter(0)
...   b = bf16[1024,1024] parameter(1)
...   ROOT d = bf16[512,1024] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
... }
... ENTRY e {
...   x = bf16[512,1024] parameter(0)
...   y = bf16[1024,1024] parameter(1)
...   ROOT r = bf16[512,1024] fusion(x, y), kind=kCustom, calls=f
... }''')
>>> found = dot_workloads(m, m.entry.root, arch=90)
>>> tiling, workload = found[0]
>>> tiling.tile_sizes, workload.num_blocks
((64, 128, 64, 2), 128)
"""
from __future__ import annotations

import math

from fusion.ir.element_types import ELEMENT_TYPES
from fusion.ir.hlo_module import HloInstruction, HloModule
from fusion.ir.shape import ArrayShape, flatten_shape
from triton_backend.templates.dot.driver import dot_problem, dot_spec
from triton_backend.templates.dot.tiling import (DotTiling, candidate_tilings, dot_flops,
                                                 grid_size, shared_memory_bytes)
from fusion.transforms.dot_algorithm import DOT_ALGORITHM_PRECISIONS
from triton_backend.runtime.device_specs import DeviceSpec, device_spec
from triton_backend.tuning.cost_model import InfeasibleLaunch, Workload, resident_blocks_per_sm


def _bytes(shape) -> int:
    if not isinstance(shape, ArrayShape):
        return 0
    return math.prod(shape.dims) * ELEMENT_TYPES[shape.dtype].byte_size


#: Fraction of the tensor-core peak a dot kernel's tiles reach, by the smaller and the larger
#: of ``BLOCK_M`` and ``BLOCK_N`` and ``BLOCK_K``: measured on an H200 (Triton 3.6,
#: ``bench/tile_sweep.py``) at 4096^3 bf16, where neither memory nor waves limit: 128x256x64
#: 695 TFLOP/s and 128x128x64 664-680 (of 989), 128x128x32 571, 64x256x32 605, 64x128x64
#: 484, 64x128x32 427, 128x64x32 386.  Smaller tiles were not measured.
def tensor_core_efficiency(tiling: DotTiling) -> float:
    """The table above (module comment).

    >>> tensor_core_efficiency(DotTiling(128, 128, 64)), tensor_core_efficiency(DotTiling(64, 128, 32))
    (0.7, 0.43)
    """
    low, high = sorted((tiling.block_m, tiling.block_n))
    if low >= 128:
        return 0.70 if tiling.block_k >= 64 else 0.60
    if low >= 64:
        return 0.61 if high >= 256 else 0.49 if tiling.block_k >= 64 else 0.43
    return 0.30 if low >= 32 else 0.20


#: The tensor-core products each f32 product costs under a split ``input_precision`` (bf16
#: parts for the bf16 ones, TF32 parts for ``tf32x3``), and the tensor-core type of the parts.
SPLIT_PRODUCTS = {"bf16x3": (3, "bf16"), "bf16x6": (6, "bf16"), "tf32x3": (3, "tf32")}

#: Fraction of the FMA units' peak an exact f32 dot reaches: the GPT-2 f32 block's
#: [512,768] x [768,2304] dots ran at about 20 TFLOP/s of an H200's 67 (Triton 3.6).
FMA_DOT_EFFICIENCY = 0.3

#: What each wave of a dot's programs adds beyond its throughput (pipeline fill, epilogue):
#: with it the model's median prediction over the 112 measured dot candidates of
#: ``bench/tile_sweep.py`` (H200) is their measured time (0.22x-1.36x each).
DOT_WAVE_LATENCY_S = 2e-6

#: Programs of one M-group in the dot template's program order (``GROUP_M``).
_GROUP_M = 8


def dot_workloads(module: HloModule, fusion_instr: HloInstruction, arch: int = 90,
                  spec: DeviceSpec | None = None) -> list[tuple[DotTiling, Workload]]:
    """Every candidate tiling of the dot fusion on ``sm_<arch>`` (the default first) with
    its workload (module docstring) on ``spec`` (default: the arch's device)."""
    problem = dot_problem(module, fusion_instr)
    return [(tiling, dot_workload(module, fusion_instr, tiling, spec))
            for tiling in candidate_tilings(problem, arch)]


def dot_workload(module: HloModule, fusion_instr: HloInstruction, tiling: DotTiling,
                 spec: DeviceSpec | None = None) -> Workload:
    """The workload of the dot fusion's kernel at ``tiling`` (module docstring) on ``spec``
    (default: an H100), whose SMs and shared memory say how many programs run at once."""
    problem = dot_problem(module, fusion_instr)
    comp = module.computation(fusion_instr.attr("calls"))
    inputs = sum(_bytes(p.shape) for p in comp.parameters)
    outputs = sum(_bytes(s) for s in flatten_shape(fusion_instr.shape))
    dot = dot_spec(module, fusion_instr).dot
    operand_type = comp.instruction(dot.operands[0]).shape.dtype
    lhs = problem.batch * problem.m * problem.k * problem.operand_bytes
    rhs = problem.batch * problem.k * problem.n * problem.operand_bytes
    tiles_m = math.ceil(problem.m / tiling.block_m)
    tiles_n = math.ceil(problem.n / tiling.block_n)
    partials = 0
    if tiling.split_k > 1:
        partials = 2 * 4 * (problem.batch * tiles_m * tiles_n * tiling.split_k
                            * tiling.block_m * tiling.block_n)
    precision = DOT_ALGORITHM_PRECISIONS.get(dot.attr("algorithm", None), "ieee")
    reads = inputs + lhs * (tiles_n - 1) + rhs * (tiles_m - 1)
    programs = math.prod(grid_size(tiling, problem))
    if tiling.split_k == 1:
        reads = min(reads, inputs - lhs - rhs + max(
            lhs + rhs, _wave_reads(problem, tiling, programs, spec or device_spec("h100"))))
    flops, tensor_flops = 0, dot_flops(problem)
    tensor_core_dtype = {"f32": "tf32", "f64": "fp64"}.get(operand_type, operand_type)
    if problem.multiply_add or operand_type in ("f32", "f64") and precision == "ieee":
        # Exact f32 (and f64) products run on the FMA units, at a measured fraction of them;
        # so do the integer products a kernel sums itself (not measured).
        flops, tensor_flops = round(tensor_flops / FMA_DOT_EFFICIENCY), 0
    elif operand_type == "f32" and precision in SPLIT_PRODUCTS:
        products, tensor_core_dtype = SPLIT_PRODUCTS[precision]
        tensor_flops *= products
    return Workload(
        tiling.tile_sizes, programs, reads, outputs + partials,
        inputs, outputs, flops, compute_dtype="f64" if operand_type == "f64" else "f32",
        tensor_core_flops=tensor_flops,
        tensor_core_dtype=tensor_core_dtype,
        shared_memory_bytes=shared_memory_bytes(tiling, problem.operand_bytes)
        // tiling.num_stages,
        tensor_core_efficiency=tensor_core_efficiency(tiling) if problem.operand_bytes <= 2
        else 1.0, wave_latency_s=DOT_WAVE_LATENCY_S, pipelined_loads=True,
        dot_flops=dot_flops(problem))


def _wave_reads(problem, tiling: DotTiling, programs: int, spec: DeviceSpec) -> int:
    """Operand bytes read from DRAM when the programs running at once (a wave) share their
    tiles through L2: in the template's grouped order a wave covers ``GROUP_M`` rows of
    tiles and as many columns as its programs fill, each tile's operand panel read once."""
    try:
        per_sm = resident_blocks_per_sm(spec, tiling.num_warps,
                                        shared_memory_bytes(tiling, problem.operand_bytes))
    except InfeasibleLaunch:
        per_sm = 1
    concurrent = min(programs, spec.sm_count * per_sm)
    waves = math.ceil(programs / concurrent)
    tiles_m = math.ceil(problem.m / tiling.block_m)
    tiles_n = math.ceil(problem.n / tiling.block_n)
    rows = min(_GROUP_M, tiles_m)
    columns = min(tiles_n, math.ceil(concurrent / rows))
    return waves * (rows * tiling.block_m + columns * tiling.block_n) * problem.k \
        * problem.operand_bytes


__all__ = ["dot_workload", "dot_workloads"]
