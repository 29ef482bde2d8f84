"""A compiled fusion (``CompiledFusion``) and loading its kernel file, shared by the index-expression
emitter's ``compile_fusion`` and the dot, sort and scatter templates (which ``compile_fusion``
imports, so this lives below all of them).
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from types import ModuleType
from typing import Union

from fusion.analysis.emitter_kind import EmitterKind
from fusion.errors import UnsupportedOpError
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.opcodes import traits
from fusion.text.printer import print_computation, print_instruction
from tiling.policy.limits import grid_limit_problem
from triton_backend.runtime.launch_mode import INTERPRETER_LOCK, interpreted_launch_lock
from triton_backend.lowering.numerics_policy import pin_triton_environment
from triton_backend.runtime.kernel_cache import KernelCache, import_checked_text
from triton_backend.runtime.cache_files import render_entry


class TemplateKind(str, Enum):
    """The fusions compiled by a template of their own rather than by an emitter kind's
    kernel (a scatter fusion's template is its emitter kind's, ``EmitterKind.SCATTER``)."""

    ATTENTION = "attention"
    ATTENTION_BACKWARD = "attention_backward"
    CONVOLUTION = "convolution"
    DOT = "dot"
    RAGGED_DOT = "ragged_dot"
    SELECT_AND_SCATTER = "select_and_scatter"
    SORT = "sort"


class LibraryCall:
    """A fusion run by one library call on the host rather than by a kernel file (a plain dot
    as ``torch.matmul``, a long sort as ``torch.sort``), called like a ``CompiledFusion``.

    Its frozen dataclasses hold ``fusion_name``, ``kind`` and ``reason`` (why the library runs
    it); the module plan stores those and :meth:`plan_decisions`, and makes the call again from
    the module (it has no kernel file to check).  It has no kernel module, so nothing of it is
    imported at a launch.
    """

    module = None

    def plan_decisions(self) -> dict[str, str | bool | int | None]:
        """What the call was decided from beyond the module, which making it again would
        otherwise analyse anew (JSON scalars by name); none by default."""
        return {}


#: What made a kernel: the emitter kind of an index-expression kernel, or a template.
KernelKind = Union[EmitterKind, TemplateKind]


def kernel_kind(value: str) -> KernelKind:
    """The kernel kind spelled ``value`` (a record read back from JSON).

    >>> kernel_kind("loop"), kernel_kind("dot")
    (<EmitterKind.LOOP: 'loop'>, <TemplateKind.DOT: 'dot'>)
    """
    try:
        return TemplateKind(value)
    except ValueError:
        return EmitterKind(value)


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
    kind: KernelKind
    kernel_path: Path
    source: str
    grid: tuple[int, ...]
    tile_sizes: tuple[int, ...]
    module: ModuleType = field(repr=False, compare=False)
    tiling_reason: str = ""
    reduction_chunk: int | None = None

    def __post_init__(self) -> None:
        # Every template builds its record here: none may hand over a grid no device launches.
        problem = grid_limit_problem(self.grid)
        if problem is not None:
            raise UnsupportedOpError(f"fusion {self.fusion_name}: {problem}",
                                     where=self.fusion_name)

    def __call__(self, *tensors, **launch_options):
        """Run on ``tensors``; ``launch_options`` (``num_warps``, ``num_stages``) override the
        kernel file's for this launch (the autotuner's sweep).  Safe from several threads:
        interpreted launches run one at a time (``INTERPRETER_LOCK``)."""
        on_cpu = any(t.device.type == "cpu" for t in tensors)
        prepared = self.__dict__.get("_launchers")
        launcher = prepared.get(on_cpu) if prepared is not None else None
        if launcher is None:
            launcher = self._launcher(on_cpu)
        run, guard = launcher
        if guard is None:
            return run(*tensors, **launch_options)
        with guard:
            return run(*tensors, **launch_options)

    def prepared_launch(self, device, *, locked: bool = True, contiguous_inputs: bool = False):
        """``launch(*tensors) -> outputs`` for a compiled module's steps on ``device`` (tensors of
        the operands' dtypes and shapes, already there): the kernel file's ``prepare`` (launch
        options, constants, allocations and permutations decided once), or its ``run`` for a
        file written before ``prepare`` existed; under the interpreter's lock when it needs it
        and ``locked`` (else the caller holds :meth:`launch_lock`).  ``contiguous_inputs``
        promises contiguous tensors, which are then passed as they are.
        """
        on_cpu = device.type == "cpu"
        run, guard = self._launcher(on_cpu)
        prepare = getattr(self.__dict__["_runners"][on_cpu], "prepare", None)
        launch = prepare(device, contiguous_inputs=contiguous_inputs) if prepare is not None else run
        if guard is None or not locked:
            return launch

        def locked_launch(*tensors):
            with guard:
                return launch(*tensors)

        return locked_launch

    def launch_parts(self, device):
        """What a compiled module's generated host code needs to launch this kernel itself on
        ``device`` (the kernel file's ``launch_parts``: the kernel, its constants, its outputs'
        allocators, its launch options), or None when the launch must go through
        :meth:`prepared_launch` (permutes, in-place outputs, a file written before
        ``launch_parts`` existed).  The caller holds :meth:`launch_lock` around the kernel."""
        on_cpu = device.type == "cpu"
        self._launcher(on_cpu)
        parts = getattr(self.__dict__["_runners"][on_cpu], "launch_parts", None)
        return parts(device) if parts is not None else None

    def launch_lock(self, device):
        """The lock a launch on ``device`` must hold (the interpreter's), or None."""
        return self._launcher(device.type == "cpu")[1]

    def _launcher(self, on_cpu: bool):
        """The kernel file's ``run`` for tensors on the CPU (the interpreter's copy) or on a
        GPU, and the lock it needs, decided once per record: reading them through a lazily
        imported module on every call cost more than the rest of a launch."""
        runner = self.module
        if on_cpu and not _is_interpreted(runner):
            runner = _interpreted_copy(self.kernel_path, self.source)
        launcher = (runner.run, interpreted_launch_lock() if _is_interpreted(runner) else None)
        self.__dict__.setdefault("_launchers", {})[on_cpu] = launcher
        self.__dict__.setdefault("_runners", {})[on_cpu] = runner
        return launcher


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


def fused_ops(module: HloModule, fusion_instr: HloInstruction, opcode: str) -> list[HloInstruction]:
    """The instructions of ``opcode`` in the computation ``fusion_instr`` fuses ([] when it is not
    a fusion of this module): how a template recognises its hero (one dot, one convolution)."""
    called = fusion_instr.attr("calls", None)
    if fusion_instr.opcode != "fusion" or not isinstance(called, str) \
            or not module.has_computation(called):
        return []
    return [i for i in module.computation(called) if i.opcode == opcode]


def refuse_other_loops(computation: HloComputation, hero: HloInstruction) -> None:
    """``UnsupportedOpError`` at the first op of ``computation`` other than ``hero`` (a dot or
    a convolution) with a loop or template of its own (the ``own_loop`` trait): a contraction
    template renders everything else at an index of the hero's tile."""
    for instr in computation:
        if traits(instr.opcode).own_loop and instr.name != hero.name:
            raise UnsupportedOpError(f"{instr.opcode} {instr.name} cannot be fused with "
                                     f"{hero.opcode} {hero.name} (only elementwise/data-movement "
                                     "prologues and elementwise epilogues are)", where=instr.name)


def hero_count(module: HloModule, fusion_instr: HloInstruction | str, opcode: str) -> int:
    """How many ``opcode`` instructions the fusion named ``fusion_instr`` holds (0 when the module
    has no such fusion)."""
    try:
        return len(fused_ops(module, find_fusion(module, fusion_instr), opcode))
    except UnsupportedOpError:
        return 0


def _is_interpreted(kernel_module: ModuleType) -> bool:
    return type(kernel_module.KERNEL).__name__ == "InterpretedFunction"


_INTERPRETED: dict[Path, ModuleType] = {}

#: The package of the ``@triton.jit`` helpers kernel files import.
DEVICE_LIB = "triton_backend.device_lib"


def _interpreted_copy(path: Path, source: str) -> ModuleType:
    """The kernel imported again with ``@triton.jit`` in interpreter mode (CPU tensors), from
    its checked text (``render_entry(source)``, what the cache verified), never from the file.

    The interpreter cannot call JIT-compiled helpers, so the copy imports the device-library
    modules (``xla_math``, ``sorting_network``, ...) imported again under the interpreter
    (:func:`_interpreted_device_lib`; pure memoization per path).  Under
    ``INTERPRETER_LOCK``: the switch to interpreter mode is process-wide.
    """
    with INTERPRETER_LOCK:
        cached = _INTERPRETED.get(path)
        if cached is not None:
            return cached
        import triton

        previous = os.environ.get("TRITON_INTERPRET")
        os.environ["TRITON_INTERPRET"] = "1"
        try:
            with triton.knobs.runtime.scope():
                triton.knobs.runtime.interpret = True
                helpers = _interpreted_device_lib()
                with _device_lib_as(helpers):
                    kernel = import_checked_text(path, render_entry(source),
                                                 f"_interpreted_{path.stem}")
        finally:
            if previous is None:
                os.environ.pop("TRITON_INTERPRET", None)
            else:
                os.environ["TRITON_INTERPRET"] = previous
        _INTERPRETED[path] = kernel
        return kernel


_DEVICE_LIB_COPY: dict[str, ModuleType] = {}


def _interpreted_device_lib() -> dict[str, ModuleType]:
    """Every module of :data:`DEVICE_LIB` imported again while the interpreter is on (once per
    process), by module name: apart from the process's own, so that helpers importing each
    other (``elementwise_math`` takes ``float8``'s functions by name) bind the copies."""
    if not _DEVICE_LIB_COPY:
        with _device_lib_as(_DEVICE_LIB_COPY):
            package = importlib.import_module(DEVICE_LIB)
            for info in pkgutil.iter_modules(package.__path__):
                importlib.import_module(f"{DEVICE_LIB}.{info.name}")
    return _DEVICE_LIB_COPY


@contextmanager
def _device_lib_as(modules: dict[str, ModuleType]):
    """``sys.modules`` holding ``modules`` as :data:`DEVICE_LIB` and its modules for the
    block (and whatever the block imports of it added to ``modules``); the process's own
    afterwards, also as the attribute of the package's parent."""
    ours = lambda name: name == DEVICE_LIB or name.startswith(DEVICE_LIB + ".")  # noqa: E731
    saved = {name: m for name, m in sys.modules.items() if ours(name)}
    for name in saved:
        del sys.modules[name]
    sys.modules.update(modules)
    try:
        yield modules
    finally:
        for name in [name for name in sys.modules if ours(name)]:
            modules[name] = sys.modules.pop(name)
        sys.modules.update(saved)
        parent, _, child = DEVICE_LIB.rpartition(".")
        if DEVICE_LIB in saved:
            setattr(sys.modules[parent], child, saved[DEVICE_LIB])
