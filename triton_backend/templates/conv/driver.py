"""Convolution fusions lowered to implicit-GEMM ``tl.dot`` kernels (``templates/conv_template``).

A *convolution fusion* is a ``fusion`` whose computation holds exactly one ``convolution`` and
no dot; its operands may be computed by elementwise and data-movement prologues and its root
may be an elementwise epilogue (bias, activation, batch-norm in inference).  1-D, 2-D and 3-D
convolutions in any dimension order, with strides, padding, lhs and rhs dilation, window
reversal, ``feature_group_count`` and ``batch_group_count`` (the forms JAX's forward and
backward passes emit) are emitted.  The numerics are the dot's (``dot_fusion.dot_numerics``).

>>> import fusion
>>> m = fusion.parse_hlo('''HloModule m
... f {
...   x = f32[2,8,8,4] parameter(0)
...   w = f32[3,3,4,8] parameter(1)
...   ROOT c = f32[2,4,4,8] convolution(x, w), window={size=3x3 stride=2x2 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
... }
... ENTRY e {
...   x = f32[2,8,8,4] parameter(0)
...   w = f32[3,3,4,8] parameter(1)
...   ROOT r = f32[2,4,4,8] fusion(x, w), kind=kOutput, calls=f
... }''')
>>> is_conv_fusion(m, m.entry.root)
True
>>> p = conv_problem(m, m.entry.root)
>>> (p.batch, p.m, p.n, p.k)
(1, 32, 8, 36)
"""
from __future__ import annotations

from dataclasses import replace

from fusion.ir.convolution import conv_dims
from fusion.errors import FusionCompilerError, UnsupportedOpError
from fusion.ir.hlo_module import HloInstruction, HloModule
from fusion.opcodes import traits
from fusion.ir.shape import ArrayShape
from triton_backend.templates.dot.driver import dot_numerics, target_arch
from triton_backend.runtime.kernel_loading import (CompiledFusion, TemplateKind, find_fusion,
                                                   fused_ops, hero_count, load_kernel,
                                                   refuse_other_loops)
from triton_backend.templates.conv.kernel import ConvSpec, render_conv_kernel
from triton_backend.templates.dot.tiling import DotProblem, tiling_from
from triton_backend.runtime.kernel_cache import KernelCache

def is_conv_fusion(module: HloModule, fusion_instr: HloInstruction | str) -> bool:
    """True when ``fusion_instr`` is a fusion whose computation holds exactly one convolution."""
    return hero_count(module, fusion_instr, "convolution") == 1


def conv_spec(module: HloModule, fusion_instr: HloInstruction | str) -> ConvSpec:
    """The convolution's attributes, shapes and numerics; ``UnsupportedOpError`` (or the
    verifier's error for malformed attributes) when the template cannot emit the fusion."""
    fusion_instr = find_fusion(module, fusion_instr)
    convs = fused_ops(module, fusion_instr, "convolution")
    if len(convs) != 1:
        raise UnsupportedOpError(f"fusion {fusion_instr.name} holds {len(convs)} convolutions; "
                                 "a convolution fusion holds exactly one", where=fusion_instr.name)
    conv = convs[0]
    comp = module.computation(fusion_instr.attr("calls"))
    refuse_other_loops(comp, conv)
    lhs, rhs = (comp.instruction(o).shape for o in conv.operands)
    out = conv.shape
    if not all(isinstance(s, ArrayShape) for s in (lhs, rhs, out)):
        raise UnsupportedOpError("convolution with tuple-shaped operands", where=conv.name)
    attrs = conv_dims(conv)
    # Integer operands other than s8 x s8 are multiplied and summed on the CUDA cores, as
    # a dot's are (``GemmKernel.k_loop``; ``DotProblem.multiply_add`` sizes the tiles).
    operand, acc, precision, rounding = dot_numerics(conv, lhs.dtype, rhs.dtype, out.dtype)
    return ConvSpec(conv, attrs, lhs.dims, rhs.dims, out.dims, operand, acc, precision, rounding)


def _expensive_prologue(module: HloModule, fusion_instr: HloInstruction,
                        conv: HloInstruction) -> bool:
    comp = module.computation(fusion_instr.attr("calls"))
    stack, seen = list(conv.operands), set()
    while stack:
        name = stack.pop()
        if name not in seen:
            seen.add(name)
            instr = comp.instruction(name)
            if traits(instr.opcode).expensive:
                return True
            stack.extend(instr.operands)
    return False


def conv_problem(module: HloModule, fusion_instr: HloInstruction | str) -> DotProblem:
    """The implicit GEMM's sizes: groups x (M x K) @ (K x N), for tiling and costs."""
    fusion_instr = find_fusion(module, fusion_instr)
    spec = conv_spec(module, fusion_instr)
    comp = module.computation(fusion_instr.attr("calls"))
    width = max(comp.instruction(o).shape.element_type.bits // 8 for o in spec.conv.operands)
    return spec.problem(width, _expensive_prologue(module, fusion_instr, spec.conv))


def compile_conv_fusion(module: HloModule, fusion_instr: HloInstruction | str, *,
                        tile_sizes=None, target: str | None = None,
                        cache: KernelCache | None = None) -> CompiledFusion:
    """Generate, cache and load the implicit-GEMM kernel of a convolution fusion.

    ``tile_sizes`` as for a dot fusion (``(block_m, block_n, block_k)``, a mapping or a
    ``DotTiling``); returns a ``CompiledFusion`` of kind ``"convolution"``.
    """
    fusion_instr = find_fusion(module, fusion_instr)
    try:
        spec = conv_spec(module, fusion_instr)
    except UnsupportedOpError:
        raise
    except FusionCompilerError as err:  # malformed attributes: say it as the template's refusal
        raise UnsupportedOpError(err.message, where=fusion_instr.name) from err
    tiling = tiling_from(tile_sizes, conv_problem(module, fusion_instr), target_arch(target))
    if tiling.split_k != 1:  # split-K is built and tested for dots only, not yet here
        if tile_sizes is not None:
            raise UnsupportedOpError(f"split_k={tiling.split_k}: convolution kernels do not "
                                     "split K", where=fusion_instr.name)
        tiling = replace(tiling, split_k=1)
    source, grid = render_conv_kernel(module, fusion_instr, spec, tiling)
    loaded, path = load_kernel(module, fusion_instr, source, repr(tiling), target, cache)
    return CompiledFusion(fusion_instr.name, TemplateKind.CONVOLUTION, path, source, grid,
                          tiling.tile_sizes, loaded)


__all__ = ["compile_conv_fusion", "conv_problem", "conv_spec", "is_conv_fusion"]
