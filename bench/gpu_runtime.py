"""GPU runtime of every fusion of the corpus: our kernel vs PyTorch eager vs torch.compile.

For each fusion that both we and ``bench/hlo_torch_reference.py`` can express: the median
time (``triton.testing.do_bench``, L2 flushed, p20/p80 kept in the CSV) of our generated
kernel, of the same computation as eager PyTorch ops, and of those ops under
``torch.compile``; GB/s over the compulsory bytes (inputs read once, outputs written once)
and the fraction of the device's peak bandwidth (``triton_backend.tuning.device_specs``).  Writes a
CSV, and a PNG bar chart when matplotlib is installed (optional; skipped with a note when
not).  Without a GPU it prints why it skips and exits 0.

    python bench/gpu_runtime.py [--csv gpu_runtime.csv] [--png gpu_runtime.png] [FILES...]
"""
from __future__ import annotations

import argparse
import csv
import math
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def skip_reason() -> str | None:
    """Why this benchmark cannot run here (None when it can)."""
    if os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "on", "yes"):
        return "TRITON_INTERPRET is set: kernels would run in the interpreter, not on a GPU"
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if not torch.cuda.is_available():
        return "no CUDA GPU is visible (torch.cuda.is_available() is False)"
    return None


def _bench(fn) -> tuple[float, float, float]:
    from triton.testing import do_bench

    median, p20, p80 = do_bench(fn, quantiles=[0.5, 0.2, 0.8])
    return median * 1e-3, p20 * 1e-3, p80 * 1e-3


def _bytes(shapes) -> int:
    from fusion.element_types import ELEMENT_TYPES
    from fusion.shape import ArrayShape

    return sum(math.prod(s.dims) * ELEMENT_TYPES[s.dtype].byte_size for s in shapes
               if isinstance(s, ArrayShape))


def measure_file(path: Path, peak_bw: float | None) -> list[dict]:
    import torch

    from fusion.errors import FusionCompilerError
    from fusion.parser import parse_hlo
    from fusion.shape import flatten_shape
    from hlo_torch_reference import torch_function
    from triton_backend.driver.compiled_fusion import compile_fusion

    module = parse_hlo(path.read_text())
    rows = []
    for _, instr in module.fusions():
        comp = module.computation(instr.attr("calls"))
        row = {"module": path.name, "fusion": instr.name}
        try:
            reference = torch_function(module, comp)
            compiled = compile_fusion(module, instr, target="cuda")
        except (KeyError, FusionCompilerError) as err:
            row["skipped"] = str(err)[:120]
            rows.append(row)
            continue
        inputs = [t.cuda() for t in compiled.module.example_inputs()]
        compulsory = _bytes([p.shape for p in comp.parameters]) + _bytes(flatten_shape(instr.shape))
        compiled_reference = torch.compile(reference)
        compiled_reference(*inputs)  # compile outside the timing
        for label, fn in (("ours", lambda: compiled(*inputs)), ("eager", lambda: reference(*inputs)),
                          ("torch_compile", lambda: compiled_reference(*inputs))):
            median, p20, p80 = _bench(fn)
            row[f"{label}_s"], row[f"{label}_p20_s"], row[f"{label}_p80_s"] = median, p20, p80
            row[f"{label}_gbps"] = compulsory / median / 1e9
            if peak_bw:
                row[f"{label}_peak_fraction"] = compulsory / median / peak_bw
        row["compulsory_bytes"] = compulsory
        rows.append(row)
    return rows


def write_plot(rows: list[dict], png: Path) -> str:
    try:
        import matplotlib
    except ImportError:
        return "matplotlib is not installed: no plot (pip install matplotlib, or the 'bench' extra)"
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [r for r in rows if "ours_s" in r]
    labels = [f"{r['module'].split('.')[0]}:{r['fusion']}" for r in done]
    fig, ax = plt.subplots(figsize=(max(6, len(done) * 0.5), 4))
    width = 0.27
    for k, key in enumerate(("ours", "eager", "torch_compile")):
        ax.bar([i + (k - 1) * width for i in range(len(done))],
               [r[f"{key}_gbps"] for r in done], width, label=key)
    ax.set_xticks(range(len(done)), labels, rotation=70, ha="right", fontsize=7)
    ax.set_ylabel("GB/s (compulsory bytes)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    return f"plot written to {png}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--csv", type=Path, default=Path("gpu_runtime.csv"))
    parser.add_argument("--png", type=Path, default=Path("gpu_runtime.png"))
    args = parser.parse_args(argv)
    reason = skip_reason()
    if reason is not None:
        print(f"gpu_runtime: skipped: {reason}")
        return 0
    import torch

    from compile_latency import default_files
    from triton_backend.tuning.device_specs import detect_device
    from triton_backend.driver.launch_mode import configure_launch_mode

    configure_launch_mode()
    spec = detect_device(torch)
    peak = spec.memory_bandwidth_bytes_per_s if spec else None
    print(f"device: {torch.cuda.get_device_name(0)}"
          + (f" (peak {peak / 1e12:.2f} TB/s, {spec.name})" if spec else " (not in the device table)"))
    rows = [r for p in (args.files or default_files()) for r in measure_file(p, peak)]
    fields = sorted({k for r in rows for k in r}, key=lambda k: (k not in ("module", "fusion"), k))
    with args.csv.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    print(f"{'module':<28}{'fusion':<32}{'ours':>10}{'eager':>10}{'compile':>10}{'GB/s':>9}{'%peak':>7}")
    for r in rows:
        if "skipped" in r:
            print(f"{r['module']:<28}{r['fusion'][:31]:<32}skipped: {r['skipped'][:60]}")
            continue
        frac = f"{100 * r['ours_peak_fraction']:.1f}" if "ours_peak_fraction" in r else "n/a"
        print(f"{r['module']:<28}{r['fusion'][:31]:<32}{r['ours_s'] * 1e6:>8.1f}us"
              f"{r['eager_s'] * 1e6:>8.1f}us{r['torch_compile_s'] * 1e6:>8.1f}us"
              f"{r['ours_gbps']:>9.1f}{frac:>7}")
    print(f"CSV written to {args.csv}")
    print(write_plot(rows, args.png))
    return 0


if __name__ == "__main__":
    sys.exit(main())
