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
from triton_backend.tuning.cost_model import Workload


def _bytes(shape) -> int:
    if not isinstance(shape, ArrayShape):
        return 0
    return math.prod(shape.dims) * ELEMENT_TYPES[shape.dtype].byte_size


def dot_workloads(module: HloModule, fusion_instr: HloInstruction,
                  arch: int = 90) -> list[tuple[DotTiling, Workload]]:
    """Every candidate tiling of the dot fusion on ``sm_<arch>`` (the default first) with
    its workload (module docstring)."""
    problem = dot_problem(module, fusion_instr)
    return [(tiling, dot_workload(module, fusion_instr, tiling))
            for tiling in candidate_tilings(problem, arch)]


def dot_workload(module: HloModule, fusion_instr: HloInstruction, tiling: DotTiling) -> Workload:
    """The workload of the dot fusion's kernel at ``tiling`` (module docstring)."""
    problem = dot_problem(module, fusion_instr)
    comp = module.computation(fusion_instr.attr("calls"))
    inputs = sum(_bytes(p.shape) for p in comp.parameters)
    outputs = sum(_bytes(s) for s in flatten_shape(fusion_instr.shape))
    operand_type = comp.instruction(dot_spec(module, fusion_instr).dot.operands[0]).shape.dtype
    lhs = problem.batch * problem.m * problem.k * problem.operand_bytes
    rhs = problem.batch * problem.k * problem.n * problem.operand_bytes
    tiles_m = math.ceil(problem.m / tiling.block_m)
    tiles_n = math.ceil(problem.n / tiling.block_n)
    partials = 0
    if tiling.split_k > 1:
        partials = 2 * 4 * (problem.batch * tiles_m * tiles_n * tiling.split_k
                            * tiling.block_m * tiling.block_n)
    return Workload(
        tiling.tile_sizes, math.prod(grid_size(tiling, problem)),
        inputs + lhs * (tiles_n - 1) + rhs * (tiles_m - 1), outputs + partials,
        inputs, outputs, 0, compute_dtype="f32", tensor_core_flops=dot_flops(problem),
        tensor_core_dtype={"f32": "tf32", "f64": "fp64"}.get(operand_type, operand_type),
        shared_memory_bytes=shared_memory_bytes(tiling, problem.operand_bytes)
        // tiling.num_stages)


__all__ = ["dot_workload", "dot_workloads"]
