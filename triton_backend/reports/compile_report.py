"""What ``fusion-compile compile`` reports about a compiled module, per launched fusion.

Per fusion: its emitter kind and why, the tiling, the launch grid and ``num_warps``, its input
and output HLO shapes, its compulsory bytes (each distinct operand read once, each output
written once: ``bytes_read + bytes_written``), and its kernel file; with a device (``h100`` by
default, ``triton_backend.runtime.device_specs``) the cost model's view of the tiling it was
compiled with (``kernel_model.KernelModel``: modeled DRAM bytes, every block re-reading what it needs,
the predicted time and the fraction of the HBM roofline it reaches); with a target
(``sm_80``, ``sm_90``) also the PTX and cubin files and the registers, spills and shared memory
``ptxas`` reports (``triton_backend.reports.ptx_report``, no GPU needed).

Per module: the kernel count, the compulsory bytes of the module's own inputs and outputs
(ENTRY parameters and results, each once), the bytes the kernels move (their compulsory bytes
summed: what fusion decides) and the modeled bytes summed over kernels, each over the module's
compulsory bytes.

Compiling for a target needs ``@triton.jit`` kernels that are ``JITFunction``s, which a process
running the Triton interpreter does not have; so the kernel files are compiled in one child
process started without ``TRITON_INTERPRET`` (``python -m triton_backend.reports.compile_report``).

The readable form and the files are ``report_text``'s.

>>> r = FusionReport("f", "main", "loop", "elementwise", (1, 128), (4,), 2048, 1024, "f.py")
>>> m = ModuleReport("m", "unfused", (r,), None, input_bytes=1024, output_bytes=1024)
>>> m.compulsory_bytes, m.kernel_bytes, m.kernel_bytes_ratio
(2048, 3072, 1.5)
"""
from __future__ import annotations

import math
import re
import sys
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from fusion.ir.shape import flatten_shape
from triton_backend.templates.attention.driver import attention_form, attention_pattern
from triton_backend.templates.attention.backward_driver import score_space, visited_fraction
from triton_backend.templates.dot.library_call import LibraryDot
from triton_backend.templates.sort.library_call import LibrarySort
from triton_backend.driver.op_coverage import library_call_sites
from triton_backend.host.library_calls import TORCH_ROUTINES
from triton_backend.reports import compile_child, ptx_report, sass_loops
from triton_backend.runtime.atomic_files import write_bytes_atomic, write_text_atomic
from triton_backend.runtime.device_specs import device_spec
from triton_backend.runtime.kernel_loading import TemplateKind
from fusion.analysis.emitter_kind import analyze_fusion
from triton_backend.reports.kernel_model import KernelModel, array_bytes, kernel_model


@dataclass(frozen=True)
class TargetResources:
    """What compiling one kernel for ``sm_<arch>`` gave."""

    arch: int
    registers: int
    spill_store_bytes: int
    spill_load_bytes: int
    shared_bytes: int
    ptx_file: str
    cubin_file: str
    vectorized_global_accesses: dict[str, int]
    #: ``wgmma``/``mma``/``cp.async``/``tma`` counts in the PTX (``sass_loops.count_ptx_features``).
    ptx_features: dict[str, int] = field(default_factory=dict)
    #: The main loop from the SASS: instructions per iteration, tensor-core ops, async copies.
    main_loop: dict[str, int] | None = None

    @property
    def spills(self) -> int:
        return self.spill_store_bytes + self.spill_load_bytes


@dataclass(frozen=True)
class FusionReport:
    """One launched fusion."""

    name: str
    computation: str
    emitter_kind: str
    reason: str
    tile_sizes: tuple[int, ...]
    grid: tuple[int, ...]
    bytes_read: int
    bytes_written: int
    kernel_file: str
    target: TargetResources | None = None
    input_shapes: tuple[str, ...] = ()
    output_shapes: tuple[str, ...] = ()
    num_warps: int | None = None
    num_stages: int | None = None
    model: KernelModel | None = None
    #: Attention kernels: ``one-pass`` (online softmax) or ``multi-pass``, and why not one-pass.
    attention_form: str | None = None
    attention_form_reason: str = ""
    #: Attention kernels: the mean fraction of key/value blocks a program visits.
    kv_blocks_visited_fraction: float | None = None
    #: Scans computed along the tile (``tiling.policy.tile_scans``), one text each.
    tile_scans: tuple[str, ...] = ()

    @property
    def programs(self) -> int:
        return math.prod(self.grid)

    @property
    def compulsory_bytes(self) -> int:
        """Each distinct input read once, each output written once."""
        return self.bytes_read + self.bytes_written

    @property
    def modeled_bytes(self) -> int:
        """The cost model's bytes, or the compulsory bytes without a model."""
        return self.model.modeled_bytes if self.model is not None else self.compulsory_bytes


@dataclass(frozen=True)
class LibraryCallReport:
    """An op run as a library call on the host, between kernels (no kernel of ours)."""

    name: str
    computation: str
    opcode: str
    routine: str
    target: str
    torch_call: str
    input_shapes: tuple[str, ...] = ()
    output_shapes: tuple[str, ...] = ()
    #: Why it is a library call rather than a kernel (a plain dot fusion: the
    #: ``dot_library`` rule of ``templates.dot.library_call``); empty for host ops.
    reason: str = ""


@dataclass(frozen=True)
class ModuleReport:
    """The whole module: its fusions in launch order, and the target if one was compiled for."""

    module: str
    fusion_mode: str
    fusions: tuple[FusionReport, ...]
    target: str | None
    fusion_fallbacks: tuple[str, ...] = ()
    #: Bytes of the ENTRY parameters and of the ENTRY result (flattened), each counted once.
    input_bytes: int = 0
    output_bytes: int = 0
    input_shapes: tuple[str, ...] = ()
    output_shapes: tuple[str, ...] = ()
    #: The device of the kernels' ``model`` (None: not modeled).
    device: str | None = None
    #: FFTs, linear algebra and top-k run by torch on the host (``host.library_calls``), and
    #: plain dot fusions run as ``torch.einsum`` (``templates.dot.library_call``).
    library_calls: tuple[LibraryCallReport, ...] = ()

    @property
    def compulsory_bytes(self) -> int:
        """The module's own inputs and outputs, each once: what any implementation moves."""
        return self.input_bytes + self.output_bytes

    @property
    def kernel_bytes(self) -> int:
        """Every kernel's compulsory bytes, summed (intermediates written and read back)."""
        return sum(f.compulsory_bytes for f in self.fusions)

    @property
    def modeled_bytes(self) -> int:
        """The cost model's bytes summed over kernels (compulsory for an unmodeled kernel)."""
        return sum(f.modeled_bytes for f in self.fusions)

    @property
    def kernel_bytes_ratio(self) -> float | None:
        return self.kernel_bytes / self.compulsory_bytes if self.compulsory_bytes else None

    @property
    def modeled_bytes_ratio(self) -> float | None:
        return self.modeled_bytes / self.compulsory_bytes if self.compulsory_bytes else None

    @property
    def predicted_time_s(self) -> float | None:
        """Kernels' predicted times summed (None unless every kernel is modeled)."""
        if self.device is None or any(f.model is None for f in self.fusions):
            return None
        return sum(f.model.predicted_time_s for f in self.fusions)

    @property
    def hbm_roofline_fraction(self) -> float | None:
        """The module's compulsory bytes at peak bandwidth over its predicted time."""
        total = self.predicted_time_s
        if not total:
            return None
        bandwidth = device_spec(self.device).memory_bandwidth_bytes_per_s
        return self.compulsory_bytes / bandwidth / total

    def to_json(self) -> dict[str, Any]:
        return {
            "module": self.module, "fusion_mode": self.fusion_mode,
            "fusion_fallbacks": list(self.fusion_fallbacks), "target": self.target,
            "device": self.device,
            "fusions": [_fusion_json(f) for f in self.fusions],
            "library_calls": [asdict(c) for c in self.library_calls],
            "total_bytes_moved": self.kernel_bytes,
            "summary": {
                "kernels": len(self.fusions),
                "library_calls": len(self.library_calls),
                "input_shapes": list(self.input_shapes), "output_shapes": list(self.output_shapes),
                "input_bytes": self.input_bytes, "output_bytes": self.output_bytes,
                "compulsory_bytes": self.compulsory_bytes,
                "kernel_bytes": self.kernel_bytes, "kernel_bytes_ratio": self.kernel_bytes_ratio,
                "modeled_bytes": self.modeled_bytes,
                "modeled_bytes_ratio": self.modeled_bytes_ratio,
                "predicted_time_s": self.predicted_time_s,
                "hbm_roofline_fraction": self.hbm_roofline_fraction,
                "max_registers": max((f.target.registers for f in self.fusions if f.target),
                                     default=None),
                "spills": sum(f.target.spills for f in self.fusions if f.target)
                if self.target else None,
            },
        }


def _fusion_json(f: FusionReport) -> dict[str, Any]:
    out = dict(asdict(f), programs=f.programs, compulsory_bytes=f.compulsory_bytes,
               modeled_bytes=f.modeled_bytes,
               target=None if f.target is None else dict(asdict(f.target), spills=f.target.spills),
               model=None if f.model is None else
               dict(asdict(f.model), hbm_roofline_fraction=f.model.hbm_roofline_fraction,
                    predicted_tflops=f.model.predicted_tflops,
                    tensor_core_peak_fraction=f.model.tensor_core_peak_fraction))
    out["registers"] = None if f.target is None else f.target.registers
    out["spills"] = None if f.target is None else f.target.spills
    return out


def kernel_file_name(fusion_name: str, taken: set[str]) -> str:
    """A file stem for a fusion's kernel, unique in ``taken``: ``kernel_`` and the name with
    every character but ``[A-Za-z0-9_]`` replaced, so a valid module name on every file
    system that can never shadow a package (XLA names fusions ``fusion``, ``fusion.1``: as
    ``fusion.py`` that hid this project's own ``fusion`` package from a script next to it).

    >>> kernel_file_name("fused/add.1", set()), kernel_file_name("fusion", set())
    ('kernel_fused_add_1', 'kernel_fusion')
    """
    base = "kernel_" + re.sub(r"[^A-Za-z0-9_]", "_", fusion_name)
    stem, n = base, 1
    while stem in taken:
        stem, n = f"{base}_{n}", n + 1
    taken.add(stem)
    return stem


def _shape_texts(shapes) -> tuple[str, ...]:
    return tuple(str(s) for s in shapes)


DEFAULT_DEVICE = "h100"


def build_report(compiled, device: str | None = DEFAULT_DEVICE) -> ModuleReport:
    """The report of a ``CompiledModule`` (kernel files named after their fusions); with a
    ``device`` (a ``device_specs`` name) every kernel gets the cost model's ``model``."""
    from triton_backend.driver.module_runner import host_computations  # noqa: PLC0415

    module = compiled.module
    spec = None
    if device is not None:
        spec = device_spec(device)
    taken: set[str] = set()
    fusions, dots = [], []
    for comp_name in host_computations(module):
        comp = module.computation(comp_name)
        for instr in comp.instructions:
            if instr.opcode != "fusion" or instr.name not in compiled.fusions:
                continue
            kernel = compiled.fusions[instr.name]
            if type(kernel) in _LIBRARY_KERNELS:
                dots.append(_library_kernel_report(comp, instr, kernel, compiled.device))
                continue
            analysis = analyze_fusion(module, instr, ignore_constant_operands=True)
            operands = [comp.instruction(o).shape for o in dict.fromkeys(instr.operands)]
            read = sum(array_bytes(s) for s in operands)
            num_warps = getattr(kernel.module, "NUM_WARPS", None)
            num_stages = getattr(kernel.module, "NUM_STAGES", None)
            fusions.append(FusionReport(
                instr.name, comp_name, kernel.kind.value, analysis.reason, tuple(kernel.tile_sizes),
                tuple(kernel.grid), read, array_bytes(instr.shape),
                kernel_file_name(instr.name, taken) + ".py",
                input_shapes=_shape_texts(operands),
                output_shapes=_shape_texts(flatten_shape(instr.shape)),
                num_warps=num_warps, num_stages=num_stages,
                model=None if spec is None else kernel_model(module, instr, kernel, spec,
                                                            num_warps or 4, num_stages or 1),
                tile_scans=_tile_scan_texts(kernel),
                **_attention_fields(module, instr, kernel)))
    calls = tuple(
        LibraryCallReport(site.instruction.name, site.computation.name, site.instruction.opcode,
                          site.routine, site.target, TORCH_ROUTINES[site.routine],
                          _shape_texts(site.computation.instruction(o).shape
                                       for o in site.instruction.operands),
                          _shape_texts(flatten_shape(site.instruction.shape)))
        for site in library_call_sites(module)) + tuple(dots)
    entry = module.entry
    inputs = [p.shape for p in entry.parameters]
    outputs = flatten_shape(entry.root.shape)
    return ModuleReport(module.name, compiled.fusion_mode, tuple(fusions), None,
                        tuple(compiled.fusion_fallbacks),
                        input_bytes=sum(array_bytes(s) for s in inputs),
                        output_bytes=sum(array_bytes(s) for s in outputs),
                        input_shapes=_shape_texts(inputs), output_shapes=_shape_texts(outputs),
                        device=None if spec is None else spec.key, library_calls=calls)


#: A fusion run as a library call: its op, routine, and what runs it on a GPU and on a CPU.
_LIBRARY_KERNELS = {
    LibraryDot: ("dot", "gemm", "cuBLAS", "torch CPU matmul"),
    LibrarySort: ("sort", "sort", "CUB radix sort", "torch CPU sort"),
}


def _library_kernel_report(comp, instr, kernel, device) -> LibraryCallReport:
    """A fusion run as a library call (a plain dot as ``torch.einsum``, a sort longer than
    one tile as ``torch.sort``), no kernel of ours."""
    opcode, routine, on_gpu, on_cpu = _LIBRARY_KERNELS[type(kernel)]
    target = on_gpu if getattr(device, "type", None) == "cuda" else on_cpu
    return LibraryCallReport(
        instr.name, comp.name, opcode, routine, target, kernel.torch_call,
        _shape_texts(comp.instruction(o).shape for o in instr.operands),
        _shape_texts(flatten_shape(instr.shape)), kernel.reason)


def write_kernels(compiled, report: ModuleReport, out_dir: Path) -> None:
    """Copy each fusion's kernel file from the cache to ``out_dir/<kernel_file>``, each whole
    or not at all (a full disk leaves no empty or truncated kernel file behind)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for fusion in report.fusions:
        source = Path(compiled.fusions[fusion.name].kernel_path).read_bytes()
        write_bytes_atomic(out_dir / fusion.kernel_file, source)


def compile_kernel_files(paths, arch: int, *, loops: bool = True) -> list[dict]:
    """Compile generated kernel files for ``sm_<arch>`` in a child process without
    ``TRITON_INTERPRET`` (``compile_child``: one kept for the process's later requests):
    writes ``<stem>.sm_<arch>.ptx`` and ``.cubin`` next to each, and returns, per file, the
    fields of :class:`TargetResources`.

    ``loops=False`` leaves ``main_loop`` out: disassembling a cubin (``cuobjdump``) costs a
    third of a second per kernel whatever its size, more than compiling a small one.
    """
    # Absolute: the child keeps the working directory it started in.
    paths = [str(Path(p).resolve()) for p in paths]
    if not paths:
        return []
    return compile_child.ask("triton_backend.reports.compile_report",
                             {"arch": arch, "kernels": paths, "loops": loops}, f"sm_{arch}")


def compile_for_target(report: ModuleReport, out_dir: Path, arch: int, *,
                       loops: bool = True) -> ModuleReport:
    """Compile the kernel files in ``out_dir`` for ``sm_<arch>``: PTX and cubin next to them
    (``loops``: as in :func:`compile_kernel_files`)."""
    found = compile_kernel_files([out_dir / f.kernel_file for f in report.fusions], arch,
                                 loops=loops)
    return with_target(report, found, arch)


def with_target(report: ModuleReport, found: list[dict], arch: int) -> ModuleReport:
    """``report`` with each fusion's :class:`TargetResources` (``compile_kernel_files``' dicts,
    in the fusions' order)."""
    fusions = tuple(replace(f, target=TargetResources(**r)) for f, r in zip(report.fusions, found))
    return replace(report, fusions=fusions, target=f"sm_{arch}")


def _tile_scan_texts(kernel) -> tuple[str, ...]:
    """What the kernel file's ``TILE_SCANS`` says, one line per scan."""
    forms = {"whole": "one pass over the tile's lanes",
             "carried": "tile by tile, each folding in the window next to it"}
    return tuple(f"{name} along dim {dim}, {forms[form]}"
                 for name, dim, form in getattr(kernel.module, "TILE_SCANS", ()))


def _attention_fields(module, instr, kernel) -> dict[str, Any]:
    """The attention form and the key/value blocks visited, for an attention kernel (and for
    an attention backward kernel, its kind and what it writes)."""
    if kernel.kind is TemplateKind.ATTENTION_BACKWARD:
        space = score_space(module, instr)
        contracted = "keys"
        if space.kind == "key":  # with a query-head group, summed per kv head in one program
            contracted = f"queries of {math.prod(space.group)} query heads" if space.group \
                else "queries"
        writes = (f"output dots {', '.join(space.output_dots)} contracting the {contracted}"
                  if space.output_dots else f"row statistics {', '.join(space.reduces)}")
        return {"attention_form": f"backward {space.kind}",
                "attention_form_reason": f"{writes}; score dots {', '.join(space.score_dots)} "
                                         "recomputed per block",
                "kv_blocks_visited_fraction": visited_fraction(module, instr,
                                                               tuple(kernel.tile_sizes[:2]))}
    if kernel.kind is not TemplateKind.ATTENTION:
        return {}
    form = attention_form(module, instr)
    block_m, block_n = kernel.tile_sizes[:2]
    return {"attention_form": form.name, "attention_form_reason": form.reason,
            "kv_blocks_visited_fraction":
                form.visited_fraction(attention_pattern(module, instr), block_m, block_n)}


# --- the child process -------------------------------------------------------------------

_TRITON_TYPES = {
    "bfloat16": "bf16", "bool": "i1", "float16": "fp16", "float32": "fp32", "float64": "fp64",
    "float8_e4m3fn": "fp8e4nv", "float8_e4m3fnuz": "fp8e4b8", "float8_e5m2": "fp8e5",
    "float8_e5m2fnuz": "fp8e5b16", "int16": "i16", "int32": "i32", "int64": "i64", "int8": "i8",
    "uint16": "u16", "uint32": "u32", "uint64": "u64", "uint8": "u8",
}


def kernel_signature(kernel_module) -> dict[str, str]:
    """Triton's signature of a generated kernel: every argument is a buffer pointer, in the
    order inputs, constants, outputs, scratch buffers (the generated ``run`` passes them so)."""
    specs = (*kernel_module.INPUT_SPECS, *kernel_module.CONSTANT_SPECS, *kernel_module.OUTPUT_SPECS,
             *getattr(kernel_module, "SCRATCH_SPECS", ()))
    names = list(kernel_module.KERNEL.arg_names)
    if len(names) != len(specs):
        raise ValueError(f"kernel takes {len(names)} arguments but the file has {len(specs)} buffer specs")
    return {n: "*" + _TRITON_TYPES[str(spec[1]).removeprefix("torch.")] for n, spec in zip(names, specs)}


def _loop_fields(sass: str) -> dict[str, int] | None:
    """The main loop; ``unrolled``: the compiler unrolled it completely, and the fields are
    its span over all its steps (``sass_loops.unrolled_loop``: the kernel's prologue and
    epilogue left out)."""
    instructions = sass_loops.parse_sass(sass)
    loop = sass_loops.main_loop(instructions)
    if loop is None or not loop.tensor_core:
        unrolled = sass_loops.unrolled_loop(instructions)
        if unrolled is not None:
            return dict(asdict(unrolled), unrolled=1)
    return None if loop is None else asdict(loop)


def _child(request: dict) -> list[dict]:
    import importlib.util  # noqa: PLC0415
    import linecache  # noqa: PLC0415

    arch = int(request["arch"])
    loops = bool(request.get("loops", True))
    out = []
    for n, path_text in enumerate(request["kernels"]):
        path = Path(path_text)
        # The child serves many requests: a file at a path seen before is read again
        # (Triton reads a kernel's source through linecache), and its module name freed.
        linecache.cache.pop(str(path), None)
        spec = importlib.util.spec_from_file_location(f"_compile_report_kernel_{n}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        try:
            spec.loader.exec_module(module)
            signature = kernel_signature(module)
            r = ptx_report.compile_for_target(module.KERNEL, signature, {},
                                              aligned=list(signature), arch=arch,
                                              num_warps=getattr(module, "NUM_WARPS", 4),
                                              num_stages=getattr(module, "NUM_STAGES", 3))
        finally:
            sys.modules.pop(spec.name, None)
        ptx_path, cubin_path = path.with_suffix(f".sm_{arch}.ptx"), path.with_suffix(f".sm_{arch}.cubin")
        write_text_atomic(ptx_path, r.ptx)
        write_bytes_atomic(cubin_path, r.cubin)
        out.append({"arch": arch, "registers": r.registers,
                    "spill_store_bytes": r.spill_store_bytes, "spill_load_bytes": r.spill_load_bytes,
                    "shared_bytes": r.shared_bytes, "ptx_file": ptx_path.name,
                    "cubin_file": cubin_path.name,
                    "vectorized_global_accesses": dict(r.vectorized_global_accesses),
                    "ptx_features": sass_loops.count_ptx_features(r.ptx),
                    "main_loop": _loop_fields(sass_loops.disassemble(r.cubin)) if loops else None})
    return out


if __name__ == "__main__":
    compile_child.serve(_child)


__all__ = ["DEFAULT_DEVICE", "FusionReport", "ModuleReport", "TargetResources",
           "build_report", "compile_for_target", "compile_kernel_files", "kernel_file_name",
           "kernel_signature", "with_target", "write_kernels"]
