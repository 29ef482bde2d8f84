"""``compile_fusion``: one HLO fusion -> a generated Triton kernel file, callable on torch tensors.

>>> import fusion, torch
>>> m = fusion.parse_hlo('''HloModule m
... f {
...   p = f32[3] parameter(0)
...   ROOT n = f32[3] negate(p)
... }
... ENTRY e {
...   x = f32[3] parameter(0)
...   ROOT r = f32[3] fusion(x), kind=kLoop, calls=f
... }''')
>>> compiled = compile_fusion(m, "r")
>>> compiled(torch.tensor([1.0, -2.0, 0.5]))[0].tolist()
[-1.0, 2.0, -0.5]
>>> compiled.kind.value, compiled.tile_sizes, compiled.grid
('loop', (3,), (1,))
>>> compiled.tiling_reason.split(":")[0]
'tile analysis'
"""
from __future__ import annotations

import math
from dataclasses import replace

from fusion.transforms.complex_expansion import expand_complex_fusion, involves_complex
from fusion.analysis.emitter_kind import analyze_fusion
from fusion.errors import FusionCompilerError, UnsupportedOpError
from fusion.ir.hlo_module import HloInstruction, HloModule
from triton_backend.templates.attention.driver import compile_attention_fusion, is_attention_fusion
from triton_backend.templates.attention.backward_driver import (compile_score_fusion,
                                                                is_score_space_fusion)
from triton_backend.runtime.complex_fusion import ComplexPairFusion
from triton_backend.templates.conv.driver import compile_conv_fusion, is_conv_fusion
from triton_backend.templates.dot.driver import compile_dot_fusion, is_dot_fusion
from triton_backend.templates.dot.library_call import LibraryDot, plain_dot_sizes
from triton_backend.runtime.launch_mode import runs_on_interpreter
from triton_backend.runtime.kernel_loading import (  # re-exported: callers import them from here
    CompiledFusion,
    LibraryCall,
    TemplateKind,
    find_fusion,
    load_kernel,
)
from triton_backend.templates.sort.driver import compile_sort_fusion, is_sort_fusion
from triton_backend.templates.sort.kernel import SortOrder
from tiling.policy.choice import check_requested_tiling, choose_tiling
from tiling.policy.limits import (
    DEFAULT_DEVICE,
    MAX_GRID_X,
    MAX_TILE_NUMEL,
    TARGET_TILE_ELEMENTS,
    grid_limit_problem,
)
from tiling.policy.verdict import Illegal, IllegalKind
from tiling.symbolic.tiled_fusion import analyze_fusion_tiling
from tiling.policy.xla_tiling_config import xla_tiling_of
from triton_backend.lowering.kernel_file import iteration_space, output_shapes, render_kernel_file
from triton_backend.lowering.kernel_plan import (
    INTERPRETER_TILE_ELEMENTS,
    plan_kernel,
    program_elements,
)
from triton_backend.templates.ragged_dot.kernel import (
    compile_ragged_dot_fusion,
    is_ragged_dot_fusion,
)
from triton_backend.templates.scatter.kernel import compile_scatter_fusion
from triton_backend.templates.select_and_scatter.kernel import (
    compile_select_and_scatter_fusion,
    is_select_and_scatter_fusion,
)
from triton_backend.runtime.kernel_cache import KernelCache
from triton_backend.runtime.module_plan import LibraryPlan, PlanError
from fusion.analysis.emitter_kind import EmitterKind, analyze_computation, has_backend_kind

#: Emitter kinds whose fusions the index-expression emitter (``kernel_file``) emits.
SUPPORTED_KINDS: frozenset[EmitterKind] = frozenset({
    EmitterKind.CONCATENATE, EmitterKind.IN_PLACE_DYNAMIC_UPDATE_SLICE, EmitterKind.INPUT_SLICES,
    EmitterKind.LOOP, EmitterKind.REDUCTION, EmitterKind.TRANSPOSE})

#: Fusions with a template of their own, recognized (in this order) before the emitter kind:
#: ``(kind, predicate(module, instr) -> bool, compiler(module, instr, *, tile_sizes,
#: target, cache) -> CompiledFusion)``.  A new template is one line here.
SPECIAL_FUSIONS = (
    (TemplateKind.ATTENTION, is_attention_fusion, compile_attention_fusion),
    (TemplateKind.CONVOLUTION, is_conv_fusion, compile_conv_fusion),
    (TemplateKind.DOT, is_dot_fusion, compile_dot_fusion),
    (TemplateKind.RAGGED_DOT, is_ragged_dot_fusion, compile_ragged_dot_fusion),
    (TemplateKind.SELECT_AND_SCATTER, is_select_and_scatter_fusion,
     compile_select_and_scatter_fusion),
    (TemplateKind.SORT, is_sort_fusion, compile_sort_fusion),
    (TemplateKind.ATTENTION_BACKWARD, is_score_space_fusion, compile_score_fusion),
)

#: Emitter kinds with a template of their own: kind -> compiler, as above.
KIND_COMPILERS = {
    EmitterKind.SCATTER: compile_scatter_fusion,
}


def compile_fusion(module: HloModule, fusion_instr: HloInstruction | str, *,
                   tile_sizes: tuple[int, ...] | None = None, target: str | None = None,
                   cache: KernelCache | None = None,
                   reduction_chunk: int | None = None, num_warps: int | None = None,
                   num_stages: int | None = None) -> CompiledFusion:
    """Generate, cache and load the kernel for ``fusion_instr`` (the instruction or its name).

    Attention, dot and sort fusions go to their templates (``SPECIAL_FUSIONS``), scatter
    fusions to theirs (``KIND_COMPILERS``).  Otherwise, without ``tile_sizes`` the tiling is
    the tile analysis' choice (``tiling.policy.choice.choose_tiling``: XLA's
    ``block_level_fusion_config`` when legal, else the ranked default); when the analysis
    refuses the fusion, the kernel planner's fallback (``choose_tiling`` without an analysis).
    Explicit ``tile_sizes`` (and ``reduction_chunk``) are checked by ``tiling.policy.legality``
    and rejected with its reason.  Raises ``UnsupportedOpError`` naming the op and the reason
    when the fusion cannot be emitted (never a silent fallback).  ``target`` only keys the cache (e.g. ``"cuda:90"``).
    ``num_warps``/``num_stages`` (e.g. from a tuning database) are written into the kernel file;
    without them, XLA's ``block_level_fusion_config`` gives them when its tiling is the one
    used, else the kernel plan's rule (``kernel_plan.launch_options``).
    """
    instr = find_fusion(module, fusion_instr)
    if involves_complex(module, instr):
        # Complex values as pairs of floats: compile the expansion, split/join on the host.
        expansion = expand_complex_fusion(module, instr)
        inner = compile_fusion(expansion.module, expansion.fusion, tile_sizes=tile_sizes,
                               target=target, cache=cache, reduction_chunk=reduction_chunk,
                               num_warps=num_warps, num_stages=num_stages)
        return ComplexPairFusion.of(inner, expansion.operands, expansion.outputs)
    for _, predicate, compiler in SPECIAL_FUSIONS:
        if predicate(module, instr):
            return compiler(module, instr, tile_sizes=tile_sizes, target=target, cache=cache)
    analysis = emitter_analysis(module, instr)
    kind = analysis.kind
    if kind in KIND_COMPILERS:
        return KIND_COMPILERS[kind](module, instr, tile_sizes=tile_sizes, target=target,
                                    cache=cache)
    if kind not in SUPPORTED_KINDS:
        raise UnsupportedOpError(f"fusion {instr.name}: {kind.value} fusions are not emitted by "
                                 f"the Triton backend ({analysis.reason})", where=instr.name)
    tiles, chunk, reason = choose_fusion_tiling(module, instr, tile_sizes, reduction_chunk, target)
    num_warps, num_stages = _launch_options(instr, tiles, num_warps, num_stages)
    rendered = render_kernel_file(module, instr, tiles, kind, reduction_chunk=chunk,
                                  num_warps=num_warps, num_stages=num_stages,
                                  interpreter=runs_on_interpreter(target))
    plan = rendered.plan
    _check_grid(instr, plan)
    loaded, path = load_kernel(module, instr, rendered.source,
                               repr((plan.tile_sizes, plan.reduction_chunk)), target, cache)
    return CompiledFusion(instr.name, kind, path, rendered.source, plan.grid, plan.tile_sizes,
                          loaded, reason, plan.reduction_chunk if plan.reduce_axes else None)


def remade_library_call(module: HloModule, plan: LibraryPlan) -> LibraryCall:
    """The library call a module plan names, made again from ``module`` (the module that
    runs) without code generation; ``PlanError`` when that fusion is not the call.

    A plain dot's reason comes from the plan (the ``dot_library`` option chose it, and the
    plan's key holds the option); a sort is a library call by its row length, in the order
    the plan recorded for its comparator."""
    instr = find_fusion(module, plan.name)
    decisions = dict(plan.decisions)
    call = None
    if plan.kind == TemplateKind.DOT.value and plain_dot_sizes(module, instr) is not None:
        call = LibraryDot.of(module, instr, plan.reason)
    elif plan.kind == TemplateKind.SORT.value and is_sort_fusion(module, instr):
        call = compile_sort_fusion(module, instr, order=SortOrder(**decisions))
    if not isinstance(call, LibraryCall) or call.reason != plan.reason \
            or call.plan_decisions() != decisions:
        raise PlanError(f"fusion {plan.name} is not the {plan.kind} library call it names")
    return call


def _check_grid(instr: HloInstruction, plan) -> None:
    """Refuse, before any kernel file is written, a grid CUDA cannot launch (the interpreter
    would loop over it for ages): one program per output tile, all on grid x."""
    problem = grid_limit_problem(plan.grid)
    if problem is not None:
        raise UnsupportedOpError(
            f"fusion {instr.name}: {problem} (one program per tile of "
            f"{list(plan.tile_sizes)} over {list(plan.output_dims)}; a program holds at most "
            f"{MAX_TILE_NUMEL} elements)", where=instr.name)


def emitter_analysis(module: HloModule, instr: HloInstruction):
    """The fusion analysis that picks our template.

    A kCustom fusion carrying ``block_level_fusion_config`` is XLA's own block-level Triton
    path, i.e. what this backend does: its fused computation decides the emitter (loop,
    reduction, ...), and its tiling is honored by ``choose_fusion_tiling``.  So does a bare
    ``kind=kCustom`` fusion, whose backend config names no kind: XLA runs its body as any
    other fusion (XLA:GPU would look for a custom emitter; there is none to look for here).
    """
    analysis = analyze_fusion(module, instr, ignore_constant_operands=True)
    bare = analysis.kind is EmitterKind.CUSTOM and not has_backend_kind(instr)
    if (analysis.kind is EmitterKind.TRITON or bare) and instr.has_attr("calls"):
        analysis = analyze_computation(module.computation(instr.attr("calls")), module,
                                       ignore_constant_operands=True)
    return analysis


def _launch_options(instr: HloInstruction, tiles: tuple[int, ...] | None,
                    num_warps: int | None, num_stages: int | None) -> tuple[int | None, int | None]:
    """Explicit launch options, else XLA's from ``block_level_fusion_config`` when the tiling
    used is XLA's own (its warps were chosen for that tile), else ``None`` (the plan's rule)."""
    if num_warps is not None or num_stages is not None:
        return num_warps, num_stages
    xla = xla_tiling_of(instr)
    if xla is not None and tiles is not None and tuple(xla.tile_sizes) == tuple(tiles):
        return xla.num_warps, xla.num_stages
    return None, None


#: The device the ranking aims at for the interpreter: the H100's numbers but one "SM", since
#: the interpreter runs programs one after another (the GPU's goal of a block per SM shrank
#: a 999-row reduction to 250 programs of 4 rows, each paying the interpreter's per-program cost).
INTERPRETER_DEVICE = replace(DEFAULT_DEVICE, key="interpreter", name="Triton interpreter",
                             sm_count=1)


def target_tile_elements(target: str | None = None) -> int:
    """The block size the default tiling aims for: a GPU's when a GPU ``target`` is named or a
    GPU runs the kernels; the interpreter's only when the kernel will run under the
    interpreter (``runs_on_interpreter``)."""
    return INTERPRETER_TILE_ELEMENTS if runs_on_interpreter(target) else TARGET_TILE_ELEMENTS


def choose_fusion_tiling(module: HloModule, instr: HloInstruction,
                         tile_sizes: tuple[int, ...] | None,
                         reduction_chunk: int | None, target: str | None = None
                         ) -> tuple[tuple[int, ...] | None, int | None, str]:
    """``(tile sizes or None for the default, reduction chunk, why)`` for a fusion; the
    default is chosen for ``target`` (see ``target_tile_elements``)."""
    analysis, refusal = None, ""
    try:
        analysis = analyze_fusion_tiling(module, instr)
        if analysis.not_tileable():
            node, why = analysis.not_tileable()[0]
            analysis, refusal = None, f"{node.name}: {why.reason}"
    except FusionCompilerError as err:
        refusal = err.message
    if tile_sizes is None:
        if analysis is not None:
            interpreter = runs_on_interpreter(target)
            choice = choose_tiling(analysis, xla=xla_tiling_of(instr),
                                   target_elements=target_tile_elements(target),
                                   device=INTERPRETER_DEVICE if interpreter else DEFAULT_DEVICE)
            if choice.found:
                chunk = reduction_chunk if reduction_chunk is not None else choice.reduction_chunk
                return choice.tile_sizes or None, chunk, f"tile analysis: {choice.reason}"
            refusal = choice.reason
        return None, reduction_chunk, f"default tile sizes (the tile analysis refused: {refusal})"
    tile_sizes = tuple(int(t) for t in tile_sizes)
    if analysis is None:
        problem = _kernel_plan_problem(module, instr, tile_sizes, reduction_chunk)
        if problem is not None:
            raise UnsupportedOpError(f"fusion {instr.name}: tile sizes {list(tile_sizes)} are "
                                     f"illegal: {problem}", where=instr.name)
        why = f"explicit tile sizes (checked against Triton's limits only: the tile analysis " \
              f"refused: {refusal})"
        return tile_sizes or None, reduction_chunk, why
    chunk, problem = check_requested_tiling(analysis, tile_sizes, reduction_chunk)
    if problem is not None and problem.is_preference:
        # A performance preference of the ranking, not a correctness rule: allowed on request.
        return tile_sizes or None, chunk, f"explicit tile sizes (legal; note: {problem})"
    if problem is not None:
        raise UnsupportedOpError(f"fusion {instr.name}: tile sizes {list(tile_sizes)}"
                                 + (f" with reduction chunk {chunk}" if chunk else "")
                                 + f" are illegal: {problem}", where=instr.name)
    return tile_sizes or None, chunk, "explicit tile sizes (legal)"


def _kernel_plan_problem(module: HloModule, instr: HloInstruction, tile_sizes: tuple[int, ...],
                         reduction_chunk: int | None) -> Illegal | None:
    """Why the kernel plan for explicit tiles breaks Triton's or CUDA's limits (None: it fits).

    Used when the tile analysis refused the fusion, so no per-op tile is known: the bound is
    the plan's largest per-program tensor (output tile times reduction and window axes,
    padded to powers of two) and its grid.
    """
    computation = module.computation(instr.attr("calls"))
    space, _ = iteration_space(computation, instr, output_shapes(instr))
    plan = plan_kernel(computation, space, tile_sizes, reduction_chunk=reduction_chunk,
                       module=module)
    elements = program_elements(computation, plan)
    if elements > MAX_TILE_NUMEL:
        return Illegal(IllegalKind.TILE_TOO_LARGE,
                       f"one program holds {elements} elements (tiles padded to powers of two),"
                       f" more than Triton's {MAX_TILE_NUMEL}")
    blocks = math.prod(plan.grid)
    if blocks > MAX_GRID_X:
        return Illegal(IllegalKind.GRID_TOO_LARGE,
                       f"{blocks} blocks exceed CUDA's grid x limit {MAX_GRID_X}")
    return None
