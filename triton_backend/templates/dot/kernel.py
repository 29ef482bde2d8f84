"""Render the kernel file of a dot fusion: prologue reads, a K loop of ``tl.dot``, an epilogue.

One program computes a ``BLOCK_M x BLOCK_N`` tile of one batch element (``program_id(1)``, or
folded into ``program_id(0)`` when the batch exceeds grid y's 65535 blocks),
with grouped ordering of the tiles (``GROUP_M`` rows of tiles share the rhs columns in L2).
Three :class:`ValueEmitter` instances of the codegen engineer's emitter share identifiers and
buffers:

* the lhs emitter (axes ``[BLOCK_M, BLOCK_K]``) and the rhs emitter (``[BLOCK_K, BLOCK_N]``)
  render the dot's operands, prologue included (convert, broadcast, transpose, bitcast,
  dequantizing multiplies ...), inside the K loop, at indices computed from the dot's
  dimension numbers (batch dims from the batch program id, free dims from M/N, contracting
  dims from K: any layout or dim order, never an assumed row-major ``M x K``);
* the epilogue emitter (``[BLOCK_M, BLOCK_N]``) renders the fusion root at the output tile;
  reading the dot there yields the accumulator (rounded to the dot's type).

Lanes past K are zeroed before ``tl.dot``; lanes past M or N are masked at the store.  The
program ids, K loop, stores and file, which the convolution template shares, are rendered by
``gemm_kernel``; this module places the dot's operands and output in them.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from fusion.ir.hlo_module import HloInstruction, HloModule
from fusion.text.printer import print_computation, print_instruction
from tiling.maps.affine_expr import AffineExpr, DimExpr
from triton_backend.lowering.emitter.identifiers import comment_block
from triton_backend.lowering.emitter.index_arithmetic import row_major_coordinates
from triton_backend.lowering.emitter.value_emitter import ValueEmitter
from triton_backend.templates.dot.gemm_kernel import GemmKernel, gemm_prelude, operand_tile
from triton_backend.templates.dot.tiling import DotProblem, DotTiling


@dataclass(frozen=True)
class DotSpec:
    """What the template needs to know about the fusion's dot (see ``dot_fusion.dot_spec``)."""

    dot: HloInstruction
    batch_sizes: tuple[int, ...]
    m_sizes: tuple[int, ...]
    n_sizes: tuple[int, ...]
    k_sizes: tuple[int, ...]
    lhs_dims: tuple[tuple[str, int], ...]   # per lhs operand dim: ("b"|"m"|"k", position)
    rhs_dims: tuple[tuple[str, int], ...]
    operand_dtype: str      # tl dtype text the operands are multiplied in
    acc_dtype: str          # tl dtype of the accumulator
    input_precision: str | None
    result_rounding: str    # template turning the accumulator into the dot's register value


def _operand_indices(roles, batch, m_or_n, k) -> tuple[AffineExpr, ...]:
    table = {"b": batch, "m": m_or_n, "k": k}
    return tuple(table[role][pos] for role, pos in roles)


def _batch_indices(em: ValueEmitter, spec: DotSpec, pid_batch: str) -> list[AffineExpr]:
    # The batch element is a dim variable on a leading axis of one lane, so the emitter
    # knows its bounds (no masks) and the operand tiles are reshaped to 2-D for tl.dot.
    if not spec.batch_sizes:
        return []
    batch_extent = math.prod(spec.batch_sizes)
    flat = em.new_dim("batch", 0, batch_extent, pid_batch, batch_extent - 1)
    return row_major_coordinates(flat, spec.batch_sizes)


def _k_valid(kernel: GemmKernel, em: ValueEmitter, k_dim: DimExpr) -> list[str]:
    """The check that a lane is inside K, when the last K tile has lanes past it."""
    return [f"{em.dims[k_dim.index].name} < {kernel.problem.k}"] if kernel.k_ragged else []


def render_dot_kernel(module: HloModule, fusion_instr: HloInstruction, spec: DotSpec,
                      tiling: DotTiling) -> tuple[str, tuple[int, ...]]:
    """The kernel file source for the dot fusion ``fusion_instr``, and its launch grid."""
    kernel = gemm_prelude(module, fusion_instr, tiling, _problem(spec), spec.acc_dtype,
                          batch_id="pid_batch", group_id="group")
    bm, bn, bk = tiling.block_m, tiling.block_n, tiling.block_k
    lead = 1 if spec.batch_sizes else 0

    lhs = kernel.lhs_emitter(lead)
    lhs_b = _batch_indices(lhs, spec, kernel.pid_batch)
    lm, lk = kernel.m_dim(lhs, lead), kernel.k_dim(lhs, lead + 1)
    lhs_indices = _operand_indices(spec.lhs_dims, lhs_b, row_major_coordinates(lm, spec.m_sizes),
                                   row_major_coordinates(lk, spec.k_sizes))
    a = operand_tile(lhs, spec.dot.operands[0], lhs_indices, (bm, bk), _k_valid(kernel, lhs, lk),
                     spec.operand_dtype, "dot")

    rhs = kernel.rhs_emitter(lead)
    rhs_b = _batch_indices(rhs, spec, kernel.pid_batch)
    rk, rn = kernel.k_dim(rhs, lead), kernel.n_dim(rhs, lead + 1)
    rhs_indices = _operand_indices(spec.rhs_dims, rhs_b, row_major_coordinates(rn, spec.n_sizes),
                                   row_major_coordinates(rk, spec.k_sizes))
    b = operand_tile(rhs, spec.dot.operands[1], rhs_indices, (bk, bn), _k_valid(kernel, rhs, rk),
                     spec.operand_dtype, "dot")
    loop = kernel.k_loop(lhs, rhs, a, b, spec.input_precision, spec.acc_dtype,
                         spec.operand_dtype)

    epi = kernel.epilogue_emitter(lead, spec.dot.name, "dot")
    epi_b = _batch_indices(epi, spec, kernel.pid_batch)
    em_, en_ = kernel.m_dim(epi, lead), kernel.n_dim(epi, lead + 1)
    out_indices = (tuple(epi_b) + tuple(row_major_coordinates(em_, spec.m_sizes))
                   + tuple(row_major_coordinates(en_, spec.n_sizes)))
    kernel.store_outputs(epi, lead, em_, en_, out_indices, spec.result_rounding,
                         spec.dot.shape.dims)

    problem, grid = kernel.problem, kernel.grid
    header = comment_block(
        f"Generated by triton_backend.templates.dot.kernel for dot fusion {fusion_instr.name}.\n"
        f"{print_instruction(fusion_instr)}\n\n{print_computation(kernel.computation)}\n\n"
        f"batch {list(spec.batch_sizes)} -> {problem.batch}, M {list(spec.m_sizes)} -> "
        f"{problem.m}, N {list(spec.n_sizes)} -> {problem.n}, K {list(spec.k_sizes)} -> "
        f"{problem.k}\ntiling {tiling}, grid {grid}")
    return kernel.source(header, loop, epi), grid


def _problem(spec: DotSpec):
    return DotProblem(math.prod(spec.batch_sizes), math.prod(spec.m_sizes),
                      math.prod(spec.n_sizes), math.prod(spec.k_sizes), 4)
