"""Score-space fusions (the attention backward's kernels, ``tiling.fusion_pass.score_space``)
lowered to one kernel each (``attention.backward_kernel``).

A *score-space fusion* is a fusion whose computation ``analyze_score_space`` accepts with an
output dot or a reduction of the scores: the row statistics, ``dQ``, or ``dK`` with ``dV``
(the fusion pass makes them: ``tiling.fusion_pass.attention_backward``).  Forward attention
fusions go to the attention template first (``compiled_fusion.SPECIAL_FUSIONS``' order).

>>> import fusion
>>> m = fusion.parse_hlo('''HloModule m
... f {
...   q = f32[2,16,8] parameter(0)
...   k = f32[2,16,8] parameter(1)
...   g = f32[2,16,8] parameter(2)
...   s = f32[2,16,16] dot(q, k), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={2}
...   e = f32[2,16,16] exponential(s)
...   ROOT o = f32[2,16,8] dot(e, g), lhs_batch_dims={0}, lhs_contracting_dims={1}, rhs_batch_dims={0}, rhs_contracting_dims={1}
... }
... ENTRY e {
...   x = f32[2,16,8] parameter(0)
...   y = f32[2,16,8] parameter(1)
...   z = f32[2,16,8] parameter(2)
...   ROOT r = f32[2,16,8] fusion(x, y, z), kind=kCustom, calls=f
... }''')
>>> is_score_space_fusion(m, "r"), score_space(m, "r").kind
(True, 'key')
"""
from __future__ import annotations

from fusion.errors import UnsupportedOpError
from fusion.ir.hlo_module import HloInstruction, HloModule
from tiling.fusion_pass.attention_pattern import NotAttention
from tiling.fusion_pass.attention_mask import KeyBand
from tiling.fusion_pass.score_band import output_band, reduction_band
from tiling.fusion_pass.score_space import ScoreSpace, analyze_score_space
from triton_backend.runtime.kernel_cache import KernelCache
from triton_backend.runtime.kernel_loading import (CompiledFusion, TemplateKind, find_fusion,
                                                   load_kernel)
from triton_backend.runtime.launch_mode import runs_on_interpreter
from triton_backend.templates.attention.backward_kernel import render_score_kernel
from triton_backend.templates.attention.kernel import DotNumerics
from triton_backend.templates.attention.tiling import (AttentionTiling, default_tiling,
                                                       interpreter_tiling, register_tiling,
                                                       tiling_from)
from triton_backend.templates.attention.driver import computed_operands, fused_computation
from triton_backend.templates.dot.driver import dot_numerics, target_arch


def is_score_space_fusion(module: HloModule, fusion_instr: HloInstruction | str) -> bool:
    """True when ``fusion_instr`` is a score-space fusion (see the module docstring)."""
    try:
        comp = fused_computation(module, find_fusion(module, fusion_instr))
    except UnsupportedOpError:
        return False
    if comp is None or not any(i.opcode == "dot" for i in comp.instructions):
        return False
    try:
        space = analyze_score_space(comp)
    except NotAttention:
        return False
    return bool(space.output_dots or space.reduces)


def score_space(module: HloModule, fusion_instr: HloInstruction | str) -> ScoreSpace:
    """The fusion's score space; ``UnsupportedOpError`` with the reason otherwise."""
    fusion_instr = find_fusion(module, fusion_instr)
    comp = fused_computation(module, fusion_instr)
    if comp is None:
        raise UnsupportedOpError(f"{fusion_instr.name} is no fusion", where=fusion_instr.name)
    try:
        return analyze_score_space(comp)
    except NotAttention as why:
        raise UnsupportedOpError(f"fusion {fusion_instr.name} is not a score-space kernel: "
                                 f"{why}", where=fusion_instr.name) from None


def score_tiling(space: ScoreSpace, operand_bytes: int, tile_sizes=None,
                 target: str | None = None, computed: bool = False) -> AttentionTiling:
    """The blocks of a score-space kernel, ``(block_m, block_n)`` over (queries, keys).

    Defaults, from the registers ``ptxas`` reports for the bench backward programs (no
    spills on sm_80 and sm_90): exact f32 dots run on the FMA units with their operands in
    registers, so ``32 x 32`` at 8 warps; bf16/f16 ``rows`` kernels, whose loops are the
    forward's (scores and their reductions, no output dot), take the forward's default
    (``computed``: the score dots read operands computed in the kernel); the others take
    the register-sized forward blocks (``tiling.register_tiling``), and
    the ``key`` kernel, which holds one accumulator per output dot besides its key-side
    tiles, 8 warps (on sm_80, whose ``mma.sync`` fragments hold more per thread, 32 streamed
    keys).  ``tile_sizes`` here are (rows, streamed): a ``key`` kernel's are (keys,
    queries)."""
    head = max(space.head_dims)
    key_kind = space.kind == "key"
    rows, streamed = (space.keys, space.queries) if key_kind else (space.queries, space.keys)
    arch = target_arch(target)
    if tile_sizes is None and runs_on_interpreter(target):
        tile_sizes = interpreter_tiling(rows, streamed, head, head, operand_bytes)
    elif tile_sizes is None:
        base = register_tiling(rows, streamed, head, head, operand_bytes, arch)
        if operand_bytes >= 4:
            tile_sizes = AttentionTiling(min(base.block_m, 32), min(base.block_n, 32),
                                         base.block_d, 8, 1)
        elif key_kind:
            tile_sizes = AttentionTiling(min(base.block_m, 32 if arch < 90 else 64),
                                         base.block_n, base.block_d, 8, base.num_stages)
        elif space.kind == "rows":  # the forward's loop shape: the forward's blocks
            tile_sizes = default_tiling(rows, streamed, head, head, operand_bytes, arch,
                                        computed)
        else:
            tile_sizes = base
    tiling = tiling_from(tile_sizes, rows, streamed, head, head, operand_bytes, arch)
    if not key_kind:
        return tiling
    return AttentionTiling(tiling.block_n, tiling.block_m, tiling.block_d, tiling.num_warps,
                           tiling.num_stages)


def compile_score_fusion(module: HloModule, fusion_instr: HloInstruction | str, *,
                         tile_sizes=None, target: str | None = None,
                         cache: KernelCache | None = None) -> CompiledFusion:
    """Generate, cache and load the kernel of a score-space fusion.  ``tile_sizes``: None
    (the default tiling), ``(block_m, block_n)`` (queries, keys) or an ``AttentionTiling``."""
    fusion_instr = find_fusion(module, fusion_instr)
    space = score_space(module, fusion_instr)
    comp = module.computation(fusion_instr.attr("calls"))
    dots = [comp.instruction(n) for n in (*space.score_dots, *space.output_dots)]
    operand_bytes = max(comp.instruction(o).shape.element_type.bits // 8
                        for d in dots for o in d.operands)
    if isinstance(tile_sizes, (tuple, list)) and space.kind == "key":
        tile_sizes = (tile_sizes[1], tile_sizes[0])
    elif isinstance(tile_sizes, AttentionTiling) and space.kind == "key":
        tile_sizes = AttentionTiling(tile_sizes.block_n, tile_sizes.block_m, tile_sizes.block_d,
                                     tile_sizes.num_warps, tile_sizes.num_stages)
    tiling = score_tiling(space, operand_bytes, tile_sizes, target,
                          computed_operands(comp, space.score_dots))
    numerics = {}
    for dot in dots:
        lhs, rhs = (comp.instruction(o).shape.dtype for o in dot.operands)
        numerics[dot.name] = DotNumerics(*dot_numerics(dot, lhs, rhs, dot.shape.dtype))
    band = output_band(module, comp, space)
    source, grid = render_score_kernel(module, fusion_instr, space, tiling, numerics,
                                       interpreter=runs_on_interpreter(target), band=band,
                                       reduce_band=reduction_band(module, comp, space))
    loaded, path = load_kernel(module, fusion_instr, source, repr(tiling), target, cache)
    return CompiledFusion(fusion_instr.name, TemplateKind.ATTENTION_BACKWARD, path, source,
                          grid, tiling.tile_sizes, loaded)


def visited_fraction(module: HloModule, fusion_instr: HloInstruction | str,
                     tile_sizes: tuple[int, int]) -> float:
    """The mean fraction of the streamed blocks a program of the score-space kernel visits
    at ``tile_sizes`` (``(block_m, block_n)``: queries, keys): those of its output dots' band,
    or for a ``rows`` kernel (no output dots), of its row statistics' band."""
    fusion_instr = find_fusion(module, fusion_instr)
    space = score_space(module, fusion_instr)
    comp = module.computation(fusion_instr.attr("calls"))
    band = reduction_band(module, comp, space) if space.kind == "rows" \
        else output_band(module, comp, space)
    if band is None:
        return 1.0
    block_m, block_n = tile_sizes
    if space.kind == "query":
        return band.visited_fraction(space.queries, space.keys, block_m, block_n)
    keys_view = KeyBand(None if band.high is None else -band.high,
                        None if band.low is None else -band.low)
    return keys_view.visited_fraction(space.keys, space.queries, block_n, block_m)


__all__ = ["compile_score_fusion", "visited_fraction", "is_score_space_fusion", "score_space", "score_tiling"]
