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
>>> compiled.kind, compiled.tile_sizes, compiled.grid
('loop', (3,), (1,))
>>> compiled.tiling_reason.split(":")[0]
'tile analysis'
"""
from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from fusion.emitter_kind import analyze_fusion
from fusion.errors import FusionCompilerError, UnsupportedOpError
from fusion.hlo_module import HloInstruction, HloModule
from fusion.printer import print_computation, print_instruction
from triton_backend.lowering.kernel_file import render_kernel_file
from triton_backend.lowering.kernel_plan import (
    DEFAULT_REDUCTION_CHUNK,
    MAX_PERSISTENT_REDUCTION,
)
from triton_backend.tuning.kernel_cache import KernelCache
from triton_backend.lowering.numerics_policy import pin_triton_environment

#: Emitter kinds whose fusions the index-expression emitter (``kernel_file``) emits.
SUPPORTED_KINDS = ("concatenate", "in_place_dynamic_update_slice", "input_slices", "loop",
                   "reduction", "transpose")

#: Fusions with a template of their own, recognized (in this order) before the emitter kind:
#: ``(kind, module, predicate(module, instr) -> bool, compiler(module, instr, *, tile_sizes,
#: target, cache) -> CompiledFusion)``.  A new template is one line here.
SPECIAL_FUSIONS = (
    ("dot", "triton_backend.driver.dot_fusion", "is_dot_fusion", "compile_dot_fusion"),
    ("sort", "triton_backend.driver.sort_fusion", "is_sort_fusion", "compile_sort_fusion"),
)

#: Emitter kinds with a template of their own: kind -> (module, compiler) as above.
KIND_COMPILERS = {
    "scatter": ("triton_backend.templates.scatter_template", "compile_scatter_fusion"),
}


@dataclass(frozen=True)
class CompiledFusion:
    """A compiled fusion: call it with one torch tensor per operand; returns a tuple of outputs.

    Operands and outputs in a tiled or word-packed layout (``T(...)``, ``E(n)``) are their
    PHYSICAL buffers, flat, padding included, as ``host_packing.pack_tensor`` makes them
    (``torch.uint32`` words when elements share 32-bit words, e.g. bf16 ``(8,128)(2,1)``);
    read outputs back with ``host_packing.unpack_tensor``.  Their padding is zero.

    ``tiling_reason`` says where ``tile_sizes`` came from (the tile analysis' choice and why,
    the fallback and why the analysis refused, or the caller's explicit sizes).
    """

    fusion_name: str
    kind: str
    kernel_path: Path
    source: str
    grid: tuple[int, ...]
    tile_sizes: tuple[int, ...]
    module: ModuleType = field(repr=False, compare=False)
    tiling_reason: str = ""
    reduction_chunk: int | None = None

    def __call__(self, *tensors, **launch_options):
        """Run on ``tensors``; ``launch_options`` (``num_warps``, ``num_stages``) override the
        kernel file's for this launch (the autotuner's sweep)."""
        runner = self.module
        if any(t.device.type == "cpu" for t in tensors) and not _is_interpreted(runner):
            runner = _interpreted_copy(self.kernel_path)
        return runner.run(*tensors, **launch_options)


def compile_fusion(module: HloModule, fusion_instr: HloInstruction | str, *,
                   tile_sizes: tuple[int, ...] | None = None, target: str | None = None,
                   cache: KernelCache | None = None,
                   reduction_chunk: int | None = None, num_warps: int | None = None,
                   num_stages: int | None = None) -> CompiledFusion:
    """Generate, cache and load the kernel for ``fusion_instr`` (the instruction or its name).

    Dot and sort fusions go to their templates (``SPECIAL_FUSIONS``), scatter fusions to
    theirs (``KIND_COMPILERS``).  Otherwise, without ``tile_sizes`` the tiling is the tile
    analysis' choice (``tiling.tiling_candidates.choose_tiling``: XLA's
    ``block_level_fusion_config`` when legal, else the ranked default); when the analysis
    refuses the fusion, ``default_tile_sizes``.  Explicit ``tile_sizes`` (and
    ``reduction_chunk``) are checked by ``tiling.tiling_legality`` and rejected with its
    reason.  Raises ``UnsupportedOpError`` naming the op and the reason when the fusion cannot
    be emitted (never a silent fallback).  ``target`` only keys the cache (e.g. ``"cuda:90"``).
    ``num_warps``/``num_stages`` (e.g. from a tuning database) are written into the kernel file;
    without them, XLA's ``block_level_fusion_config`` gives them when its tiling is the one
    used, else the kernel plan's rule (``kernel_plan.launch_options``).
    """
    instr = find_fusion(module, fusion_instr)
    for kind, module_name, predicate, compiler in SPECIAL_FUSIONS:
        owner = _optional_module(module_name)
        if owner is not None and hasattr(owner, predicate) and getattr(owner, predicate)(module, instr):
            return getattr(owner, compiler)(module, instr, tile_sizes=tile_sizes, target=target,
                                            cache=cache)
    analysis = emitter_analysis(module, instr)
    kind = analysis.kind.value
    if kind in KIND_COMPILERS:
        module_name, compiler = KIND_COMPILERS[kind]
        return getattr(importlib.import_module(module_name), compiler)(
            module, instr, tile_sizes=tile_sizes, target=target, cache=cache)
    if kind not in SUPPORTED_KINDS:
        raise UnsupportedOpError(f"fusion {instr.name}: {kind} fusions are not emitted by the "
                                 f"Triton backend ({analysis.reason})", where=instr.name)
    tiles, chunk, reason = choose_fusion_tiling(module, instr, tile_sizes, reduction_chunk)
    num_warps, num_stages = _launch_options(instr, tiles, num_warps, num_stages)
    rendered = render_kernel_file(module, instr, tiles, kind, reduction_chunk=chunk,
                                  num_warps=num_warps, num_stages=num_stages)
    plan = rendered.plan
    loaded, path = load_kernel(module, instr, rendered.source,
                               repr((plan.tile_sizes, plan.reduction_chunk)), target, cache)
    return CompiledFusion(instr.name, kind, path, rendered.source, plan.grid, plan.tile_sizes,
                          loaded, reason, plan.reduction_chunk if plan.reduce_axes else None)


def emitter_analysis(module: HloModule, instr: HloInstruction):
    """The fusion analysis that picks our template.

    A kCustom fusion carrying ``block_level_fusion_config`` is XLA's own block-level Triton
    path, i.e. what this backend does: its fused computation decides the emitter (loop,
    reduction, ...), and its tiling is honored by ``choose_fusion_tiling``.
    """
    from fusion.emitter_kind import EmitterKind, analyze_computation

    analysis = analyze_fusion(module, instr, ignore_constant_operands=True)
    if analysis.kind is EmitterKind.TRITON and instr.has_attr("calls"):
        analysis = analyze_computation(module.computation(instr.attr("calls")), module,
                                       ignore_constant_operands=True)
    return analysis


def _launch_options(instr: HloInstruction, tiles: tuple[int, ...] | None,
                    num_warps: int | None, num_stages: int | None) -> tuple[int | None, int | None]:
    """Explicit launch options, else XLA's from ``block_level_fusion_config`` when the tiling
    used is XLA's own (its warps were chosen for that tile), else ``None`` (the plan's rule)."""
    if num_warps is not None or num_stages is not None:
        return num_warps, num_stages
    from tiling.xla_tiling_config import xla_tiling_of

    xla = xla_tiling_of(instr)
    if xla is not None and tiles is not None and tuple(xla.tile_sizes) == tuple(tiles):
        return xla.num_warps, xla.num_stages
    return None, None


INTERPRETER_TILE_ELEMENTS = 1 << 16
"""Block size the default tiling aims for under the Triton interpreter: it pays milliseconds per
program, so the GPU's 1024-element blocks would make the seed's 12.6M-element GELU take minutes."""


def _target_tile_elements() -> int:
    from tiling.tiling_candidates import TARGET_TILE_ELEMENTS
    from triton_backend.driver.launch_mode import interpreting

    return INTERPRETER_TILE_ELEMENTS if interpreting() else TARGET_TILE_ELEMENTS


def choose_fusion_tiling(module: HloModule, instr: HloInstruction,
                         tile_sizes: tuple[int, ...] | None,
                         reduction_chunk: int | None) -> tuple[tuple[int, ...] | None, int | None, str]:
    """``(tile sizes or None for the default, reduction chunk, why)`` for a fusion."""
    from tiling.tiled_fusion import analyze_fusion_tiling
    from tiling.tiling_candidates import choose_tiling, report_for
    from tiling.tiling_legality import check_tiling, reduced_extent
    from tiling.xla_tiling_config import xla_tiling_of

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
            report = report_for(analysis, xla_tiling_of(instr), _target_tile_elements())
            candidate, why = choose_tiling(report)
            if candidate is not None:
                chunk = reduction_chunk if reduction_chunk is not None else candidate.reduction_chunk
                return candidate.tile_sizes or None, chunk, f"tile analysis: {why}"
            refusal = why
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
    chunk = reduction_chunk
    if chunk is None and reduced_extent(analysis) > MAX_PERSISTENT_REDUCTION:
        chunk = DEFAULT_REDUCTION_CHUNK
    problem = check_tiling(analysis, tile_sizes, chunk)
    if problem is not None and problem.startswith("root tile"):
        # A performance preference of the ranking, not a correctness rule: allowed on request.
        return tile_sizes or None, chunk, f"explicit tile sizes (legal; note: {problem})"
    if problem is not None:
        raise UnsupportedOpError(f"fusion {instr.name}: tile sizes {list(tile_sizes)}"
                                 + (f" with reduction chunk {chunk}" if chunk else "")
                                 + f" are illegal: {problem}", where=instr.name)
    return tile_sizes or None, chunk, "explicit tile sizes (legal)"


def _kernel_plan_problem(module: HloModule, instr: HloInstruction, tile_sizes: tuple[int, ...],
                         reduction_chunk: int | None) -> str | None:
    """Why the kernel plan for explicit tiles breaks Triton's or CUDA's limits (None: it fits).

    Used when the tile analysis refused the fusion, so no per-op tile is known: the bound is
    the plan's largest per-program tensor (output tile times reduction and window axes,
    padded to powers of two) and its grid.
    """
    from tiling.tiling_legality import MAX_GRID_X, MAX_TILE_NUMEL
    from triton_backend.lowering.kernel_file import iteration_space, output_shapes
    from triton_backend.lowering.kernel_plan import plan_kernel, program_elements

    computation = module.computation(instr.attr("calls"))
    space, _ = iteration_space(computation, instr, output_shapes(instr))
    plan = plan_kernel(computation, space, tile_sizes, reduction_chunk=reduction_chunk)
    elements = program_elements(computation, plan)
    if elements > MAX_TILE_NUMEL:
        return (f"one program holds {elements} elements (tiles padded to powers of two), more "
                f"than Triton's {MAX_TILE_NUMEL}")
    blocks = 1
    for n in plan.grid:
        blocks *= n
    if blocks > MAX_GRID_X:
        return f"{blocks} blocks exceed CUDA's grid x limit {MAX_GRID_X}"
    return None


def load_kernel(module: HloModule, instr: HloInstruction, source: str, tiling: str,
                target: str | None, cache: KernelCache | None) -> tuple[ModuleType, Path]:
    """Write (once) and import a generated kernel file; returns the module and its path."""
    pin_triton_environment()
    cache = cache or KernelCache()
    key = {"fusion": print_instruction(instr) + "\n" + print_computation(module.computation(instr.attr("calls"))),
           "tiling": tiling, "target": target or ""}
    return cache.load(source, key), cache.path_for(source, key)


def _optional_module(name: str) -> ModuleType | None:
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


def find_fusion(module: HloModule, fusion_instr: HloInstruction | str) -> HloInstruction:
    """The fusion instruction named ``fusion_instr`` (or ``fusion_instr`` itself); a located
    ``UnsupportedOpError`` when the module has none of that name."""
    if isinstance(fusion_instr, HloInstruction):
        return fusion_instr
    for _, instr in module.fusions():
        if instr.name == fusion_instr:
            return instr
    raise UnsupportedOpError(f"module {module.name} has no fusion named {fusion_instr!r}",
                             where=str(fusion_instr))


def _is_interpreted(kernel_module: ModuleType) -> bool:
    return type(kernel_module.KERNEL).__name__ == "InterpretedFunction"


_INTERPRETED: dict[Path, ModuleType] = {}


def _interpreted_copy(path: Path) -> ModuleType:
    """The kernel file imported again with ``@triton.jit`` in interpreter mode (CPU tensors).

    The interpreter cannot call JIT-compiled helpers, so the shared math helpers are also
    re-imported under the interpreter and rebound in the copy (pure memoization per path).
    """
    cached = _INTERPRETED.get(path)
    if cached is not None:
        return cached
    import triton

    from triton_backend.device_lib import elementwise_math
    previous = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        with triton.knobs.runtime.scope():
            triton.knobs.runtime.interpret = True
            math_copy = _import(Path(elementwise_math.__file__), "_interpreted_elementwise_math")
            kernel = _import(path, f"_interpreted_{path.stem}", {"xla_math": math_copy})
    finally:
        if previous is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = previous
    _INTERPRETED[path] = kernel
    return kernel


def _import(path: Path, name: str, rebind: dict | None = None) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    for key, value in (rebind or {}).items():
        setattr(module, key, value)
    return module
