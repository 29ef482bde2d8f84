"""The compile report as a person reads it (``report.txt``) and the two files ``compile``
writes (``report.json``, ``report.txt``): the same numbers as ``compile_report`` gathers.

>>> from triton_backend.reports.compile_report import FusionReport, ModuleReport
>>> r = FusionReport("f", "main", "loop", "elementwise", (1, 128), (4,), 2048, 1024, "f.py")
>>> render_text(ModuleReport("m", "unfused", (r,), None)).splitlines()[2]
'fusion f (computation main): loop emitter'
"""
from __future__ import annotations

import json
from pathlib import Path

from triton_backend.reports.compile_report import ModuleReport
from triton_backend.runtime.atomic_files import write_text_atomic


def _mb(n: int) -> str:
    return f"{n / 1e6:.3f} MB"


def _ratio(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}x"


def render_text(report: ModuleReport) -> str:
    """The readable report (``report.txt``): the same numbers as ``report.json``."""
    lines = [f"module {report.module}: {len(report.fusions)} kernel(s), {report.fusion_mode}"
             + (f", compiled for {report.target}" if report.target else "")
             + (f", modeled on {report.device}" if report.device else "")]
    lines += [f"  (gave up {fallback})" for fallback in report.fusion_fallbacks]
    lines.append("")
    for f in report.fusions:
        lines.append(f"fusion {f.name} (computation {f.computation}): {f.emitter_kind} emitter")
        lines.append(f"  why:      {f.reason}")
        if f.input_shapes or f.output_shapes:
            lines.append(f"  inputs:   {', '.join(f.input_shapes) or 'none'}")
            lines.append(f"  outputs:  {', '.join(f.output_shapes)}")
        warps = "" if f.num_warps is None else f"   num_warps: {f.num_warps}"
        lines.append(f"  tiling:   {list(f.tile_sizes)}   grid: {list(f.grid)} ({f.programs} programs)"
                     + warps)
        if f.attention_form is not None:
            why = f" ({f.attention_form_reason})" if f.attention_form_reason else ""
            lines.append(f"  attention: {f.attention_form}{why}; key/value blocks visited: "
                         f"{100 * f.kv_blocks_visited_fraction:.1f}%")
        for scan in f.tile_scans:
            lines.append(f"  scan:     {scan}")
        lines.append(f"  bytes:    {f.bytes_read} read + {f.bytes_written} written = "
                     f"{f.compulsory_bytes} compulsory")
        m = f.model
        if m is not None:
            ratio = m.modeled_bytes / f.compulsory_bytes if f.compulsory_bytes else 1.0
            lines.append(f"  model:    {m.modeled_bytes} bytes modeled ({ratio:.2f}x compulsory); "
                         f"{m.device}: {m.predicted_time_s * 1e6:.2f} us predicted, "
                         f"{100 * m.hbm_roofline_fraction:.1f}% of the HBM roofline, {m.bound}-bound")
            if m.predicted_tflops is not None:
                peak = "" if m.tensor_core_peak_fraction is None else \
                    f" ({100 * m.tensor_core_peak_fraction:.1f}% of the tensor-core peak)"
                lines.append(f"            dots: {m.dot_flops / 1e9:.3g} GFLOP, "
                             f"{m.predicted_tflops:.1f} TFLOP/s predicted{peak}")
            if m.note:
                lines.append(f"            ({m.note})")
        lines.append(f"  kernel:   {f.kernel_file}")
        t = f.target
        if t is not None:
            vec = ", ".join(f"{k} x{v}" for k, v in t.vectorized_global_accesses.items()) or "none"
            lines.append(f"  sm_{t.arch}:    {t.registers} registers, spills {t.spill_store_bytes} B "
                         f"stored / {t.spill_load_bytes} B loaded, {t.shared_bytes} B shared memory")
            lines.append(f"            vector accesses: {vec}; {t.ptx_file}, {t.cubin_file}")
            if t.ptx_features.get("wgmma") or t.ptx_features.get("mma"):
                loop = t.main_loop or {}
                # An unrolled loop's fields are its span over all its steps, not one step.
                per = "unrolled, over all its steps" if loop.get("unrolled") else "per iteration"
                lines.append(f"            tensor cores: {t.ptx_features}; main loop: "
                             f"{loop.get('instructions', '?')} instructions {per}")
        lines.append("")
    for c in report.library_calls:
        lines.append(f"library call {c.name} (computation {c.computation}): {c.routine} "
                     f"({c.target}) via {c.torch_call} on the host")
        lines.append(f"  inputs:   {', '.join(c.input_shapes) or 'none'}")
        lines.append(f"  outputs:  {', '.join(c.output_shapes)}")
        if c.reason:
            lines.append(f"  why:      {c.reason}")
        lines.append("")
    lines.append(f"module inputs:  {', '.join(report.input_shapes) or 'none'} "
                 f"({report.input_bytes} bytes)")
    lines.append(f"module outputs: {', '.join(report.output_shapes) or 'none'} "
                 f"({report.output_bytes} bytes)")
    lines.append(f"compulsory bytes (module inputs + outputs): {report.compulsory_bytes} "
                 f"({_mb(report.compulsory_bytes)})")
    lines.append(f"total bytes moved by kernels: {report.kernel_bytes} "
                 f"({_ratio(report.kernel_bytes_ratio)} compulsory)")
    if report.device is not None:
        lines.append(f"modeled bytes, summed over kernels: {report.modeled_bytes} "
                     f"({_ratio(report.modeled_bytes_ratio)} compulsory)")
        if report.predicted_time_s:
            lines.append(f"predicted on {report.device}: {report.predicted_time_s * 1e6:.2f} us, "
                         f"{100 * report.hbm_roofline_fraction:.1f}% of the HBM roofline")
    if report.target:
        regs = max((f.target.registers for f in report.fusions if f.target), default=0)
        spills = sum(f.target.spills for f in report.fusions if f.target)
        lines.append(f"{report.target}: at most {regs} registers per thread, {spills} B spilled")
    return "\n".join(lines) + "\n"


def write_report(report: ModuleReport, out_dir: Path) -> tuple[Path, Path]:
    """Write ``report.json`` and ``report.txt`` to ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, text_path = out_dir / "report.json", out_dir / "report.txt"
    write_text_atomic(json_path, json.dumps(report.to_json(), indent=2) + "\n")
    write_text_atomic(text_path, render_text(report))
    return json_path, text_path


__all__ = ["render_text", "write_report"]
