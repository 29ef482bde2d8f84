"""A compiled fusion (``CompiledFusion``) and loading its kernel file, shared by the index-expression
emitter's ``compile_fusion`` and the dot, sort and scatter templates (which ``compile_fusion``
imports, so this lives below all of them).
"""
from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from fusion.errors import UnsupportedOpError
from fusion.hlo_module import HloInstruction, HloModule
from fusion.printer import print_computation, print_instruction
from triton_backend.lowering.numerics_policy import pin_triton_environment
from triton_backend.tuning.kernel_cache import KernelCache


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


def load_kernel(module: HloModule, instr: HloInstruction, source: str, tiling: str,
                target: str | None, cache: KernelCache | None) -> tuple[ModuleType, Path]:
    """Write (once) and import a generated kernel file; returns the module and its path."""
    pin_triton_environment()
    cache = cache or KernelCache()
    key = {"fusion": print_instruction(instr) + "\n" + print_computation(module.computation(instr.attr("calls"))),
           "tiling": tiling, "target": target or ""}
    return cache.load(source, key), cache.path_for(source, key)


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
