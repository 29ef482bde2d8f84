"""Attention fusions lowered to one flash-attention-style kernel (``attention_template``).

An *attention fusion* is a fusion whose computation ``tiling.fusion_pass.attention_pattern`` recognizes:
two dots, the first one's scores normalized by reductions over its key dim, the second one
contracting that key dim (the fusion pass makes them: ``tiling.fusion_pass.attention``).  Each dot
multiplies as a dot fusion would (``dot_fusion.dot_numerics``: f32 exact, bf16/f16 operands
with fp32 accumulation).

>>> import fusion
>>> m = fusion.parse_hlo('''HloModule m
... add { a = f32[] parameter(0)
...   b = f32[] parameter(1)
...   ROOT s = f32[] add(a, b) }
... f {
...   q = f32[16,8] parameter(0)
...   k = f32[16,8] parameter(1)
...   v = f32[16,8] parameter(2)
...   s = f32[16,16] dot(q, k), lhs_contracting_dims={1}, rhs_contracting_dims={1}
...   e = f32[16,16] exponential(s)
...   z = f32[] constant(0)
...   l = f32[16] reduce(e, z), dimensions={1}, to_apply=add
...   lb = f32[16,16] broadcast(l), dimensions={0}
...   p = f32[16,16] divide(e, lb)
...   ROOT o = f32[16,8] dot(p, v), lhs_contracting_dims={1}, rhs_contracting_dims={0}
... }
... ENTRY e {
...   x = f32[16,8] parameter(0)
...   y = f32[16,8] parameter(1)
...   w = f32[16,8] parameter(2)
...   ROOT r = f32[16,8] fusion(x, y, w), kind=kCustom, calls=f
... }''')
>>> is_attention_fusion(m, "r"), attention_pattern(m, "r").reduces
(True, ('l',))
"""
from __future__ import annotations

from dataclasses import dataclass

from fusion.errors import UnsupportedOpError
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.ir.shape import ArrayShape
from fusion.opcodes import traits
from tiling.fusion_pass.attention_pattern import AttentionPattern, NotAttention, analyze_attention
from tiling.fusion_pass.attention_mask import KeyBand, key_band
from tiling.fusion_pass.online_softmax import OnlineSoftmax, online_softmax, why_not_online
from triton_backend.runtime.kernel_loading import (CompiledFusion, TemplateKind, find_fusion,
                                                   load_kernel)
from triton_backend.runtime.launch_mode import runs_on_interpreter
from triton_backend.templates.dot.driver import dot_numerics, prologue_has, target_arch
from triton_backend.templates.attention.kernel import DotNumerics, render_attention_kernel
from triton_backend.templates.attention.tiling import interpreter_tiling, tiling_from
from triton_backend.runtime.kernel_cache import KernelCache


def fused_computation(module: HloModule, fusion_instr: HloInstruction):
    """The computation ``fusion_instr`` calls, or None when it is not a fusion calling one of
    ``module``'s computations."""
    called = fusion_instr.attr("calls", None)
    if fusion_instr.opcode != "fusion" or not isinstance(called, str) \
            or not module.has_computation(called):
        return None
    return module.computation(called)


def is_attention_fusion(module: HloModule, fusion_instr: HloInstruction | str) -> bool:
    """True when ``fusion_instr`` is a fusion whose computation is attention."""
    try:
        comp = fused_computation(module, find_fusion(module, fusion_instr))
    except UnsupportedOpError:
        return False
    if comp is None or sum(i.opcode == "dot" for i in comp.instructions) != 2:
        return False  # the common case, decided without the analysis
    try:
        analyze_attention(comp)
    except NotAttention:
        return False
    return True


def attention_pattern(module: HloModule, fusion_instr: HloInstruction | str) -> AttentionPattern:
    """The fusion's attention pattern; ``UnsupportedOpError`` with the reason otherwise."""
    fusion_instr = find_fusion(module, fusion_instr)
    comp = fused_computation(module, fusion_instr)
    if comp is None:
        raise UnsupportedOpError(f"{fusion_instr.name} is no fusion", where=fusion_instr.name)
    try:
        return analyze_attention(comp)
    except NotAttention as why:
        raise UnsupportedOpError(f"fusion {fusion_instr.name} is not attention: {why}",
                                 where=fusion_instr.name) from None


@dataclass(frozen=True)
class AttentionForm:
    """How the attention kernel computes its normalization: ``one-pass`` (online softmax, and
    only the key blocks the mask's ``band`` leaves visible) or ``multi-pass`` (one loop over the
    keys per reduction, then one for the output; ``reason`` says why)."""

    online: OnlineSoftmax | None
    band: KeyBand | None
    reason: str

    @property
    def name(self) -> str:
        return "one-pass" if self.online is not None else "multi-pass"

    def visited_fraction(self, pattern: AttentionPattern, block_m: int, block_n: int) -> float:
        """The mean fraction of the key blocks a program of ``block_m`` query rows visits."""
        if self.band is None:
            return 1.0
        return self.band.visited_fraction(pattern.queries, pattern.keys, block_m, block_n)


def attention_form(module: HloModule, fusion_instr: HloInstruction | str) -> AttentionForm:
    """The form of the attention fusion's kernel, and why (see :class:`AttentionForm`)."""
    fusion_instr = find_fusion(module, fusion_instr)
    pattern = attention_pattern(module, fusion_instr)
    comp = module.computation(fusion_instr.attr("calls"))
    online = online_softmax(module, comp, pattern)
    if online is None:
        return AttentionForm(None, None, why_not_online(module, comp, pattern))
    band = key_band(module, comp, pattern, online.max_reduce)
    return AttentionForm(online, band, "")


def _numerics(module: HloModule, fusion_instr: HloInstruction, name: str) -> DotNumerics:
    comp = module.computation(fusion_instr.attr("calls"))
    dot = comp.instruction(name)
    lhs, rhs = (comp.instruction(o).shape.dtype for o in dot.operands)
    return DotNumerics(*dot_numerics(dot, lhs, rhs, dot.shape.dtype))


def computed_operands(comp: HloComputation, dots) -> bool:
    """Whether one of the score ``dots`` (names) reads an operand computed in the kernel
    (more live registers per key block than loads: ``tiling.default_tiling`` keeps smaller
    tiles for it): one reached through anything but a given value, a conversion, a copy, a
    broadcast, a reshape or a transpose (RoPE's multiplies and adds are)."""
    def computes(instr) -> bool:
        op = traits(instr.opcode)
        return not (op.given_value or op.flop_free or op.keeps_constant or op.physical_transpose)

    return any(prologue_has(comp, comp.instruction(dot), computes) for dot in dots)


def lean_scores(comp: HloComputation, pattern: AttentionPattern, form: AttentionForm) -> bool:
    """Whether a kernel's live state per key block is the scores alone (``tiling.
    default_tiling`` gives such kernels wider blocks): one-pass, a mask band open on at
    least one side (none, causal), and masked scores that read nothing per (query, key)
    point but the first dot (iotas and scalars besides: no bias or mask array loaded per
    block).
    """
    if form.online is None or (form.band is not None and form.band.low is not None
                               and form.band.high is not None):
        return False
    def loaded_per_point(instr) -> bool:
        return traits(instr.opcode).given_value and isinstance(instr.shape, ArrayShape) \
            and bool(instr.shape.dims)

    # the max's operand is the masked scores: what it reads besides the first dot
    top = comp.instruction(form.online.max_reduce)
    return not prologue_has(comp, top, loaded_per_point, stop_at=frozenset({pattern.dot1}))


def dot_operand_bytes(comp: HloComputation, pattern: AttentionPattern) -> int:
    """The widest element of the two dots' operands, in bytes: 4 for exact f32 dots, which
    run on the FMA units and take their own tilings (``attention.tiling.register_tiling``)."""
    return max(comp.instruction(o).shape.element_type.bits // 8
               for name in (pattern.dot1, pattern.dot2) for o in comp.instruction(name).operands)


def compile_attention_fusion(module: HloModule, fusion_instr: HloInstruction | str, *,
                             tile_sizes=None, target: str | None = None,
                             cache: KernelCache | None = None) -> CompiledFusion:
    """Generate, cache and load the attention kernel of an attention fusion.

    ``tile_sizes``: None (the default tiling), ``(block_m, block_n)`` or an
    ``AttentionTiling``.  Returns a ``CompiledFusion`` of kind ``"attention"``.
    """
    fusion_instr = find_fusion(module, fusion_instr)
    pattern = attention_pattern(module, fusion_instr)
    comp = module.computation(fusion_instr.attr("calls"))
    operand_bytes = dot_operand_bytes(comp, pattern)
    if tile_sizes is None and runs_on_interpreter(target):
        tile_sizes = interpreter_tiling(pattern.queries, pattern.keys, pattern.head_dim,
                                        pattern.value_dim, operand_bytes)
    form = attention_form(module, fusion_instr)
    tiling = tiling_from(tile_sizes, pattern.queries, pattern.keys, pattern.head_dim,
                         pattern.value_dim, operand_bytes, target_arch(target),
                         computed_operands=computed_operands(comp, (pattern.dot1,)),
                         lean_scores=lean_scores(comp, pattern, form))
    numerics = (_numerics(module, fusion_instr, pattern.dot1),
                _numerics(module, fusion_instr, pattern.dot2))
    source, grid = render_attention_kernel(module, fusion_instr, pattern, tiling, numerics,
                                           interpreter=runs_on_interpreter(target),
                                           online=form.online, band=form.band)
    loaded, path = load_kernel(module, fusion_instr, source, repr(tiling), target, cache)
    return CompiledFusion(fusion_instr.name, TemplateKind.ATTENTION, path, source, grid, tiling.tile_sizes,
                          loaded)


__all__ = ["AttentionForm", "attention_form", "attention_pattern", "compile_attention_fusion",
           "dot_operand_bytes", "is_attention_fusion", "lean_scores"]
