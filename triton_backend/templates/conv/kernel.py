"""Render the kernel file of a convolution fusion: an implicit GEMM on ``tl.dot``.

Per group ``g`` (``feature_group_count`` or ``batch_group_count`` groups; ``program_id(1)``):

* M walks the output batch and output spatial positions (flattened, spatial fastest),
* N walks the group's output features,
* K walks the window taps and the group's input features (flattened, features fastest, so
  the lhs reads of one tap are contiguous in the usual feature-minor layouts).

The lhs tile ``[BLOCK_M, BLOCK_K]`` is gathered at input position
``(o * stride + tap * rhs_dilate - pad_low) / lhs_dilate`` (any dim order: the dimension
numbers give each operand dim its role) and zeroed where that position is padding, falls
between the dilated input's elements, or lies past K; the rhs tile ``[BLOCK_K, BLOCK_N]``
reads the kernel at the tap (reversed when ``rhs_reversal``).  Both operands are rendered by
:class:`ValueEmitter`, so an elementwise or data-movement prologue of the convolution is
computed in the K loop, and the epilogue emitter renders the fusion root at the output tile,
where reading the convolution yields the accumulator (bias, activation, batch-norm inference).
The numerics are the dot's (``dot_fusion.dot_numerics``): 16-bit and s8 operands go to the
tensor cores with an f32 (s32) accumulator.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from fusion.ir.convolution import Convolution
from fusion.ir.hlo_module import HloInstruction, HloModule
from fusion.text.printer import print_computation, print_instruction
from tiling.maps.affine_expr import AffineExpr
from triton_backend.lowering.emitter.identifiers import comment_block
from triton_backend.lowering.emitter.index_arithmetic import row_major_coordinates
from triton_backend.lowering.emitter.value_emitter import ValueEmitter
from triton_backend.templates.dot.gemm_kernel import (TL_DOT_OPERANDS, GemmKernel, gemm_prelude,
                                                      operand_tile)
from triton_backend.templates.dot.tiling import DotProblem, DotTiling


@dataclass(frozen=True)
class ConvSpec:
    """What the template needs to know about the fusion's convolution (``conv_fusion.conv_spec``)."""

    conv: HloInstruction
    attrs: Convolution
    lhs_dims: tuple[int, ...]
    rhs_dims: tuple[int, ...]
    out_dims: tuple[int, ...]
    operand_dtype: str
    acc_dtype: str
    input_precision: str | None
    result_rounding: str

    @property
    def groups(self) -> int:
        return self.attrs.feature_group_count * self.attrs.batch_group_count

    @property
    def out_batch(self) -> int:
        return self.out_dims[self.attrs.dims.out_batch]

    @property
    def out_spatial(self) -> tuple[int, ...]:
        return tuple(self.out_dims[d] for d in self.attrs.dims.out_spatial)

    @property
    def taps(self) -> tuple[int, ...]:
        return tuple(w.size for w in self.attrs.window.dims)

    @property
    def group_in(self) -> int:
        return self.rhs_dims[self.attrs.dims.rhs_input]

    @property
    def group_out(self) -> int:
        return self.out_dims[self.attrs.dims.out_feature] // self.groups

    @property
    def m_sizes(self) -> tuple[int, ...]:
        return (self.out_batch, *self.out_spatial)

    @property
    def k_sizes(self) -> tuple[int, ...]:
        return (*self.taps, self.group_in)

    def problem(self, operand_bytes: int, expensive_prologue: bool = False) -> DotProblem:
        """The GEMM it is: groups x (M x K) @ (K x N) (summed on the CUDA cores for operands
        ``tl.dot`` does not take, ``multiply_add`` bytes per product)."""
        multiply_add = 0 if self.operand_dtype in TL_DOT_OPERANDS else \
            max(4, self.conv.shape.element_type.byte_size)
        return DotProblem(self.groups, math.prod(self.m_sizes), self.group_out,
                          math.prod(self.k_sizes), operand_bytes, expensive_prologue,
                          multiply_add)


def _lhs_position_checks(em: ValueEmitter, spec: ConvSpec, out_sp, taps) -> tuple[list, list[str]]:
    """Per spatial dim, the lhs index read, and the checks that the position is an element."""
    dn, indices, checks = spec.attrs.dims, [], []
    for i, w in enumerate(spec.attrs.window.dims):
        n = spec.lhs_dims[dn.lhs_spatial[i]]
        q = out_sp[i] * w.stride + taps[i] * w.window_dilation - w.padding_low
        extent = (n - 1) * w.base_dilation + 1
        low, high = em.bounds(q)
        text = f"({em.index_text(q)})"
        if low < 0:
            checks.append(f"({text} >= 0)")
        if high >= extent:
            checks.append(f"({text} < {extent})")
        if w.base_dilation > 1:
            checks.append(f"({text} % {w.base_dilation} == 0)")
            q = q // w.base_dilation
        indices.append(q)
    return indices, checks


def _group_index(kernel: GemmKernel, em: ValueEmitter, groups: int) -> AffineExpr | int:
    # The group is a dim variable on a leading axis of one lane (bounded, never masked).
    return em.new_dim("group", 0, groups, kernel.pid_batch, groups - 1) if groups > 1 else 0


def _lhs_tile(kernel: GemmKernel, spec: ConvSpec) -> tuple[ValueEmitter, str]:
    """The lhs emitter and its tile: the input element of (output batch and position along
    M) x (tap and feature along K), zero where that is padding, a hole of lhs dilation or
    past K."""
    dn, attrs, lead = spec.attrs.dims, spec.attrs, int(spec.groups > 1)
    lhs = kernel.lhs_emitter(lead)
    g = _group_index(kernel, lhs, spec.groups)
    lm, lk = kernel.m_dim(lhs, lead), kernel.k_dim(lhs, lead + 1)
    b_out, *out_sp = row_major_coordinates(lm, spec.m_sizes)
    *taps, channel = row_major_coordinates(lk, spec.k_sizes)
    spatial, valid = _lhs_position_checks(lhs, spec, out_sp, taps)
    lhs_idx: list = [0] * len(spec.out_dims)
    lhs_idx[dn.lhs_batch] = b_out + g * spec.out_batch if attrs.batch_group_count > 1 else b_out
    lhs_idx[dn.lhs_feature] = (g * spec.group_in + channel if attrs.feature_group_count > 1
                               else channel)
    for i, e in enumerate(spatial):
        lhs_idx[dn.lhs_spatial[i]] = e
    if kernel.k_ragged:
        valid.append(f"({lhs.dims[lk.index].name} < {kernel.problem.k})")
    shape = (kernel.tiling.block_m, kernel.tiling.block_k)
    return lhs, operand_tile(lhs, spec.conv.operands[0], tuple(lhs_idx), shape, valid,
                             spec.operand_dtype, "convolution")


def _rhs_tile(kernel: GemmKernel, spec: ConvSpec) -> tuple[ValueEmitter, str]:
    """The rhs emitter and its tile: the kernel element of (tap and feature along K) x
    (output feature along N), the tap reversed when ``window_reversal`` says so."""
    dn, attrs, lead = spec.attrs.dims, spec.attrs, int(spec.groups > 1)
    rhs = kernel.rhs_emitter(lead)
    g = _group_index(kernel, rhs, spec.groups)
    rk, rn = kernel.k_dim(rhs, lead), kernel.n_dim(rhs, lead + 1)
    *taps, channel = row_major_coordinates(rk, spec.k_sizes)
    rhs_idx: list = [0] * len(spec.out_dims)
    for i, (t, w) in enumerate(zip(taps, attrs.window.dims)):
        rhs_idx[dn.rhs_spatial[i]] = (w.size - 1) - t if w.window_reversal else t
    rhs_idx[dn.rhs_input] = channel
    rhs_idx[dn.rhs_output] = g * spec.group_out + rn if spec.groups > 1 else rn
    rvalid = [f"({rhs.dims[rk.index].name} < {kernel.problem.k})"] if kernel.k_ragged else []
    shape = (kernel.tiling.block_k, kernel.tiling.block_n)
    return rhs, operand_tile(rhs, spec.conv.operands[1], tuple(rhs_idx), shape, rvalid,
                             spec.operand_dtype, "convolution")


def render_conv_kernel(module: HloModule, fusion_instr: HloInstruction, spec: ConvSpec,
                       tiling: DotTiling) -> tuple[str, tuple[int, ...]]:
    """The kernel file source for the convolution fusion ``fusion_instr``, and its grid."""
    dn, groups = spec.attrs.dims, spec.groups
    kernel = gemm_prelude(module, fusion_instr, tiling, spec.problem(4), spec.acc_dtype,
                          batch_id="pid_group", group_id="tile_group")
    lead = 1 if groups > 1 else 0
    lhs, a = _lhs_tile(kernel, spec)
    rhs, b = _rhs_tile(kernel, spec)
    loop = kernel.k_loop(lhs, rhs, a, b, spec.input_precision, spec.acc_dtype,
                         spec.operand_dtype)

    epi = kernel.epilogue_emitter(lead, spec.conv.name, "convolution")
    g = _group_index(kernel, epi, groups)
    em_, en_ = kernel.m_dim(epi, lead), kernel.n_dim(epi, lead + 1)
    b_out, *out_sp = row_major_coordinates(em_, spec.m_sizes)
    out_idx: list = [0] * len(spec.out_dims)
    out_idx[dn.out_batch] = b_out
    out_idx[dn.out_feature] = g * spec.group_out + en_ if groups > 1 else en_
    for i, e in enumerate(out_sp):
        out_idx[dn.out_spatial[i]] = e
    kernel.store_outputs(epi, lead, em_, en_, tuple(out_idx), spec.result_rounding,
                         spec.out_dims)

    problem, grid = kernel.problem, kernel.grid
    header = comment_block(
        f"Generated by triton_backend.templates.conv.kernel for convolution fusion "
        f"{fusion_instr.name}.\n{print_instruction(fusion_instr)}\n\n"
        f"{print_computation(kernel.computation)}\n\n"
        f"groups {groups}, M {list(spec.m_sizes)} -> {problem.m}, N {problem.n}, "
        f"K {list(spec.k_sizes)} -> {problem.k}\ntiling {tiling}, grid {grid}")
    return kernel.source(header, loop, epi), grid


__all__ = ["ConvSpec", "render_conv_kernel"]
