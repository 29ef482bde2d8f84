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
('loop', (4,), (1,))
"""
from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from fusion.emitter_kind import analyze_fusion
from fusion.errors import UnsupportedOpError
from fusion.hlo_module import HloInstruction, HloModule
from fusion.printer import print_computation, print_instruction
from triton_backend.codegen.kernel_file import render_kernel_file
from triton_backend.kernel_cache import KernelCache
from triton_backend.numerics_policy import pin_triton_environment

#: Emitter kinds whose fusions this backend emits (everything is an index-expression kernel).
SUPPORTED_KINDS = ("concatenate", "in_place_dynamic_update_slice", "input_slices", "loop",
                   "reduction", "transpose")


@dataclass(frozen=True)
class CompiledFusion:
    """A compiled fusion: call it with one torch tensor per operand; returns a tuple of outputs."""

    fusion_name: str
    kind: str
    kernel_path: Path
    source: str
    grid: tuple[int, ...]
    tile_sizes: tuple[int, ...]
    module: ModuleType = field(repr=False, compare=False)

    def __call__(self, *tensors):
        runner = self.module
        if any(t.device.type == "cpu" for t in tensors) and not _is_interpreted(runner):
            runner = _interpreted_copy(self.kernel_path)
        return runner.run(*tensors)


def compile_fusion(module: HloModule, fusion_instr: HloInstruction | str, *,
                   tile_sizes: tuple[int, ...] | None = None, target: str | None = None,
                   cache: KernelCache | None = None) -> CompiledFusion:
    """Generate, cache and load the kernel for ``fusion_instr`` (the instruction or its name).

    Raises ``UnsupportedOpError`` naming the op and the reason when the fusion cannot be
    emitted (never a silent fallback).  ``target`` only keys the cache (e.g. ``"cuda:90"``).
    """
    instr = _find_fusion(module, fusion_instr)
    analysis = analyze_fusion(module, instr, ignore_constant_operands=True)
    kind = analysis.kind.value
    if kind not in SUPPORTED_KINDS:
        raise UnsupportedOpError(f"fusion {instr.name}: {kind} fusions are not emitted by the "
                                 f"Triton backend ({analysis.reason})", where=instr.name)
    rendered = render_kernel_file(module, instr, tile_sizes, kind)
    pin_triton_environment()
    cache = cache or KernelCache()
    key = {"fusion": print_instruction(instr) + "\n" + print_computation(module.computation(instr.attr("calls"))),
           "tiling": repr(rendered.plan.tile_sizes), "target": target or ""}
    loaded = cache.load(rendered.source, key)
    return CompiledFusion(instr.name, kind, cache.path_for(rendered.source, key), rendered.source,
                          rendered.plan.grid, rendered.plan.tile_sizes, loaded)


def _find_fusion(module: HloModule, fusion_instr: HloInstruction | str) -> HloInstruction:
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

    from triton_backend import elementwise_math
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
