"""What ``fusion-compile compile`` reports about a compiled module, per launched fusion.

Per fusion: its emitter kind and why, the tiling, the launch grid, the bytes it reads and
writes, and its kernel file; with a target (``sm_80``, ``sm_90``) also the PTX and cubin files
and the registers, spills and shared memory ``ptxas`` reports (``triton_backend.reports.ptx_report``,
no GPU needed).

Compiling for a target needs ``@triton.jit`` kernels that are ``JITFunction``s, which a process
running the Triton interpreter does not have; so the kernel files are compiled in one child
process started without ``TRITON_INTERPRET`` (``python -m triton_backend.reports.compile_report``).

>>> r = FusionReport("f", "main", "loop", "elementwise", (1, 128), (4,), 2048, 1024, "f.py")
>>> render_text(ModuleReport("m", "unfused", (r,), None)).splitlines()[2]
'fusion f (computation main): loop emitter'
"""
from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from fusion.errors import FusionCompilerError
from fusion.shape import flatten_shape

_CHILD_MARKER = "COMPILE-REPORT-JSON "


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

    @property
    def programs(self) -> int:
        return math.prod(self.grid)


@dataclass(frozen=True)
class ModuleReport:
    """The whole module: its fusions in launch order, and the target if one was compiled for."""

    module: str
    fusion_mode: str
    fusions: tuple[FusionReport, ...]
    target: str | None
    fusion_fallbacks: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "module": self.module, "fusion_mode": self.fusion_mode,
            "fusion_fallbacks": list(self.fusion_fallbacks), "target": self.target,
            "fusions": [dict(asdict(f), programs=f.programs,
                             target=None if f.target is None else
                             dict(asdict(f.target), spills=f.target.spills))
                        for f in self.fusions],
            "total_bytes_moved": sum(f.bytes_read + f.bytes_written for f in self.fusions),
        }


def kernel_file_name(fusion_name: str, taken: set[str]) -> str:
    """A file stem for a fusion's kernel, safe on every file system, unique in ``taken``.

    >>> kernel_file_name("fused/add.1", set())
    'fused_add.1'
    """
    base = re.sub(r"[^A-Za-z0-9_.-]", "_", fusion_name) or "fusion"
    stem, n = base, 1
    while stem in taken:
        stem, n = f"{base}_{n}", n + 1
    taken.add(stem)
    return stem


def _array_bytes(shape) -> int:
    return sum(s.element_type.byte_size * s.num_elements for s in flatten_shape(shape))


def build_report(compiled) -> ModuleReport:
    """The report of a ``CompiledModule`` (kernel files named after their fusions)."""
    from fusion.emitter_kind import analyze_fusion  # noqa: PLC0415
    from triton_backend.driver.module_runner import host_computations  # noqa: PLC0415

    module = compiled.module
    taken: set[str] = set()
    fusions = []
    for comp_name in host_computations(module):
        comp = module.computation(comp_name)
        for instr in comp.instructions:
            if instr.opcode != "fusion":
                continue
            kernel = compiled.fusions[instr.name]
            analysis = analyze_fusion(module, instr, ignore_constant_operands=True)
            read = sum(_array_bytes(comp.instruction(o).shape) for o in dict.fromkeys(instr.operands))
            fusions.append(FusionReport(
                instr.name, comp_name, kernel.kind, analysis.reason, tuple(kernel.tile_sizes),
                tuple(kernel.grid), read, _array_bytes(instr.shape),
                kernel_file_name(instr.name, taken) + ".py"))
    return ModuleReport(module.name, compiled.fusion_mode, tuple(fusions), None,
                        tuple(compiled.fusion_fallbacks))


def write_kernels(compiled, report: ModuleReport, out_dir: Path) -> None:
    """Copy each fusion's kernel file from the cache to ``out_dir/<kernel_file>``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for fusion in report.fusions:
        shutil.copyfile(compiled.fusions[fusion.name].kernel_path, out_dir / fusion.kernel_file)


def compile_for_target(report: ModuleReport, out_dir: Path, arch: int) -> ModuleReport:
    """Compile the kernel files in ``out_dir`` for ``sm_<arch>``: PTX and cubin next to them."""
    request = {"arch": arch, "kernels": [str(out_dir / f.kernel_file) for f in report.fusions]}
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "0"
    result = subprocess.run([sys.executable, "-m", "triton_backend.reports.compile_report", json.dumps(request)],
                            capture_output=True, text=True, env=env, check=False)
    lines = [ln for ln in result.stdout.splitlines() if ln.startswith(_CHILD_MARKER)]
    if result.returncode != 0 or not lines:
        raise FusionCompilerError(
            f"compiling the kernels for sm_{arch} failed:\n{result.stderr.strip()[-4000:]}",
            where=f"sm_{arch}")
    found = json.loads(lines[-1][len(_CHILD_MARKER):])
    fusions = tuple(replace(f, target=TargetResources(**r)) for f, r in zip(report.fusions, found))
    return replace(report, fusions=fusions, target=f"sm_{arch}")


def render_text(report: ModuleReport) -> str:
    """The readable report (``report.txt``)."""
    lines = [f"module {report.module}: {len(report.fusions)} kernel(s), {report.fusion_mode}"
             + (f", compiled for {report.target}" if report.target else "")]
    lines += [f"  (gave up {fallback})" for fallback in report.fusion_fallbacks]
    lines.append("")
    for f in report.fusions:
        lines.append(f"fusion {f.name} (computation {f.computation}): {f.emitter_kind} emitter")
        lines.append(f"  why:      {f.reason}")
        lines.append(f"  tiling:   {list(f.tile_sizes)}   grid: {list(f.grid)} ({f.programs} programs)")
        lines.append(f"  bytes:    {f.bytes_read} read + {f.bytes_written} written = "
                     f"{f.bytes_read + f.bytes_written}")
        lines.append(f"  kernel:   {f.kernel_file}")
        t = f.target
        if t is not None:
            vec = ", ".join(f"{k} x{v}" for k, v in t.vectorized_global_accesses.items()) or "none"
            lines.append(f"  sm_{t.arch}:    {t.registers} registers, spills {t.spill_store_bytes} B "
                         f"stored / {t.spill_load_bytes} B loaded, {t.shared_bytes} B shared memory")
            lines.append(f"            vector accesses: {vec}; {t.ptx_file}, {t.cubin_file}")
        lines.append("")
    total = sum(f.bytes_read + f.bytes_written for f in report.fusions)
    lines.append(f"total bytes moved by kernels: {total}")
    return "\n".join(lines) + "\n"


def write_report(report: ModuleReport, out_dir: Path) -> tuple[Path, Path]:
    """Write ``report.json`` and ``report.txt`` to ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, text_path = out_dir / "report.json", out_dir / "report.txt"
    json_path.write_text(json.dumps(report.to_json(), indent=2) + "\n")
    text_path.write_text(render_text(report))
    return json_path, text_path


# --- the child process -------------------------------------------------------------------

_TRITON_TYPES = {
    "bfloat16": "bf16", "bool": "i1", "float16": "fp16", "float32": "fp32", "float64": "fp64",
    "float8_e4m3fn": "fp8e4nv", "float8_e4m3fnuz": "fp8e4b8", "float8_e5m2": "fp8e5",
    "float8_e5m2fnuz": "fp8e5b16", "int16": "i16", "int32": "i32", "int64": "i64", "int8": "i8",
    "uint16": "u16", "uint32": "u32", "uint64": "u64", "uint8": "u8",
}


def kernel_signature(kernel_module) -> dict[str, str]:
    """Triton's signature of a generated kernel: every argument is a buffer pointer, in the
    order inputs, constants, outputs (the generated ``run`` passes them so)."""
    specs = (*kernel_module.INPUT_SPECS, *kernel_module.CONSTANT_SPECS, *kernel_module.OUTPUT_SPECS)
    names = list(kernel_module.KERNEL.arg_names)
    if len(names) != len(specs):
        raise ValueError(f"kernel takes {len(names)} arguments but the file has {len(specs)} buffer specs")
    return {n: "*" + _TRITON_TYPES[str(spec[1]).removeprefix("torch.")] for n, spec in zip(names, specs)}


def _child(request: dict) -> list[dict]:
    import importlib.util  # noqa: PLC0415

    from triton_backend.reports.ptx_report import compile_for_target as compile_kernel  # noqa: PLC0415

    arch = int(request["arch"])
    out = []
    for n, path_text in enumerate(request["kernels"]):
        path = Path(path_text)
        spec = importlib.util.spec_from_file_location(f"_compile_report_kernel_{n}", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
        signature = kernel_signature(module)
        r = compile_kernel(module.KERNEL, signature, {}, aligned=list(signature), arch=arch,
                           num_warps=getattr(module, "NUM_WARPS", 4),
                           num_stages=getattr(module, "NUM_STAGES", 3))
        ptx_path, cubin_path = path.with_suffix(f".sm_{arch}.ptx"), path.with_suffix(f".sm_{arch}.cubin")
        ptx_path.write_text(r.ptx)
        cubin_path.write_bytes(r.cubin)
        out.append({"arch": arch, "registers": r.registers,
                    "spill_store_bytes": r.spill_store_bytes, "spill_load_bytes": r.spill_load_bytes,
                    "shared_bytes": r.shared_bytes, "ptx_file": ptx_path.name,
                    "cubin_file": cubin_path.name,
                    "vectorized_global_accesses": dict(r.vectorized_global_accesses)})
    return out


if __name__ == "__main__":
    print(_CHILD_MARKER + json.dumps(_child(json.loads(sys.argv[1]))))


__all__ = ["FusionReport", "ModuleReport", "TargetResources", "build_report", "compile_for_target",
           "kernel_file_name", "kernel_signature", "render_text", "write_kernels", "write_report"]
