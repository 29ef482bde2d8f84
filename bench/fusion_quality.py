"""Fusion quality on realistic unfused JAX programs: kernels, bytes moved, registers, spills.

For each ``bench/programs/NAME.hlo`` (written by ``bench/programs/generate.py``: softmax,
log-softmax, layernorm, RMSNorm, cross-entropy, GELU, SwiGLU, matmul+bias+GELU, attention
(causal, unmasked, grouped-query with a sliding window) and a GPT-2 block, as
``jax.jit(f).lower(...).as_text(dialect="hlo")`` gives them,
unfused), the module is compiled with ``triton_backend.compile_hlo(text, target="sm_90")`` and
reported by ``triton_backend.reports.compile_report`` (what ``fusion-compile compile --target
sm_90`` writes):

* ``kernels``: kernels we launch; ``xla_cpu``: kernels of XLA:CPU's optimized module for the
  same program (``bench/programs/xla_cpu_kernels.json``, recorded by the generator);
* ``moved/comp``: the bytes the kernels read and write (each kernel's distinct inputs and its
  outputs, once each: intermediates count twice) over the module's compulsory bytes (its own
  inputs and outputs, once each);
* ``model/comp``: the cost model's modeled DRAM bytes, summed over kernels (every block
  re-reads the tiles it needs, caches ignored) over the same compulsory bytes;
* ``regs``/``spills``: the most registers per thread of any kernel and the spilled bytes of
  all kernels (stores + loads), from ``ptxas -v`` on the PTX for sm_90 (no GPU needed);
* ``pred us``/``%roof``: the cost model's predicted time on ``--device`` (h100) and the
  module's compulsory bytes at peak bandwidth over that time.

Hand-written Triton kernels (``bench/handwritten_kernels.py``: the tutorials' softmax and
layernorm, a matmul with a fused bias+GELU epilogue) are compiled the same way and shown as
extra rows: memory moved = compulsory by construction.

Writes a CSV, and a PNG when matplotlib is installed (optional: the ``bench`` extra).  Compile
only: no kernel runs, so it needs no GPU and takes a few minutes on 2 cores.

    python bench/fusion_quality.py [--only NAME ...] [--csv F] [--png F] [--no-ptx]
                                   [--no-handwritten] [--device h100] [--keep DIR] [FILES...]
"""
from __future__ import annotations

import argparse
import csv
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PROGRAMS = HERE / "programs"
sys.path.insert(0, str(HERE))
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

ARCH = 90

FIELDS = ("program", "kind", "kernels", "xla_cpu_kernels", "compulsory_bytes", "kernel_bytes",
          "moved_over_compulsory", "modeled_bytes", "modeled_over_compulsory", "max_registers",
          "spills", "predicted_us", "hbm_roofline_pct", "fusion_mode", "compile_s", "error")


def program_files(only: list[str] | None = None, directory: Path = PROGRAMS) -> list[Path]:
    files = sorted(directory.glob("*.hlo"))
    if only:
        files = [f for f in files if f.stem in only]
        missing = set(only) - {f.stem for f in files}
        if missing:
            raise SystemExit(f"fusion_quality: no program named {', '.join(sorted(missing))} "
                             f"in {directory}")
    return files


def xla_cpu_counts(directory: Path = PROGRAMS) -> dict[str, int]:
    path = directory / "xla_cpu_kernels.json"
    if not path.exists():
        return {}
    return {k: v for k, v in json.loads(path.read_text()).items() if not k.startswith("_")}


def compile_program(path: Path, out_dir: Path, device: str):
    """``(ModuleReport, seconds)`` of one program: compiled, reported, kernel files written."""
    import triton_backend
    from triton_backend.reports.compile_report import build_report, write_kernels

    start = time.perf_counter()
    compiled = triton_backend.compile_hlo(path.read_text(), target=f"sm_{ARCH}")
    report = build_report(compiled, device=device)
    write_kernels(compiled, report, out_dir)
    return report, time.perf_counter() - start


def add_target(reports: dict[str, tuple], dirs: dict[str, Path]) -> dict[str, str]:
    """Compile every program's kernel files for sm_90, all in one child process (one per
    program if that fails, to say which); returns program -> error for the failed ones."""
    from triton_backend.reports.compile_report import compile_kernel_files, with_target

    names = list(reports)
    paths = [dirs[n] / f.kernel_file for n in names for f in reports[n][0].fusions]
    errors: dict[str, str] = {}
    try:
        found = compile_kernel_files(paths, ARCH, loops=False)
    except Exception:  # noqa: BLE001 - retried per program below
        found = None
    if found is not None:
        at = 0
        for n in names:
            report, seconds = reports[n]
            k = len(report.fusions)
            reports[n] = (with_target(report, found[at:at + k], ARCH), seconds)
            at += k
        return errors
    for n in names:
        report, seconds = reports[n]
        try:
            one = compile_kernel_files([dirs[n] / f.kernel_file for f in report.fusions], ARCH,
                                       loops=False)
            reports[n] = (with_target(report, one, ARCH), seconds)
        except Exception as err:  # noqa: BLE001 - one program's failure is a row, not a crash
            errors[n] = f"sm_{ARCH}: {str(err).strip().splitlines()[-1][:200]}"
    return errors


def program_row(name: str, report, seconds: float, xla: int | None) -> dict:
    with_target = report.target is not None
    return {
        "program": name, "kind": "ours", "kernels": len(report.fusions),
        "xla_cpu_kernels": xla, "compulsory_bytes": report.compulsory_bytes,
        "kernel_bytes": report.kernel_bytes,
        "moved_over_compulsory": report.kernel_bytes_ratio,
        "modeled_bytes": report.modeled_bytes,
        "modeled_over_compulsory": report.modeled_bytes_ratio,
        "max_registers": max((f.target.registers for f in report.fusions if f.target), default=None)
        if with_target else None,
        "spills": sum(f.target.spills for f in report.fusions if f.target) if with_target else None,
        "predicted_us": None if report.predicted_time_s is None else report.predicted_time_s * 1e6,
        "hbm_roofline_pct": None if report.hbm_roofline_fraction is None
        else 100 * report.hbm_roofline_fraction,
        "fusion_mode": report.fusion_mode, "compile_s": seconds,
    }


def handwritten_rows(device: str) -> list[dict]:
    from handwritten_kernels import compile_in_child, cases
    from triton_backend.tuning.cost_model import Workload, estimate
    from triton_backend.runtime.device_specs import device_spec

    spec = device_spec(device)
    by_name = {c.name: c for c in cases()}
    rows = []
    try:
        compiled = compile_in_child(ARCH)
    except RuntimeError as err:
        return [{"program": "hand-written Triton", "kind": "handwritten",
                 "error": str(err).strip().splitlines()[-1][:200]}]
    for r in compiled:
        case = by_name[r["name"]]
        blocks = 1
        for g in case.grid:
            blocks *= g
        # The cost model on the kernel as written: each byte moved once (by construction).
        dot_flops = 2 * case.extra["m"] * case.extra["n"] * case.extra["k"] if case.extra else 0
        workload = Workload(tuple(case.grid), blocks, case.input_bytes, case.output_bytes,
                            case.input_bytes, case.output_bytes, 0,
                            tensor_core_flops=dot_flops, tensor_core_dtype="bf16")
        cost = estimate(workload, spec, num_warps=case.num_warps)
        rows.append({
            "program": r["name"], "kind": "handwritten", "kernels": 1,
            "xla_cpu_kernels": None, "compulsory_bytes": case.compulsory_bytes,
            "kernel_bytes": case.compulsory_bytes, "moved_over_compulsory": 1.0,
            "modeled_bytes": case.compulsory_bytes, "modeled_over_compulsory": 1.0,
            "max_registers": r.get("registers"), "spills": r.get("spills"),
            "predicted_us": cost.predicted_time_s * 1e6,
            "hbm_roofline_pct": 100 * cost.bandwidth_fraction, "error": r.get("error"),
        })
    return rows


def _fmt(value, spec: str = "", missing: str = "-") -> str:
    if value is None or value == "":
        return missing
    return format(value, spec)


def render_table(rows: list[dict]) -> str:
    header = (f"{'program':<50}{'kernels':>8}{'xla_cpu':>8}{'moved/comp':>11}{'model/comp':>11}"
              f"{'regs':>6}{'spills':>8}{'pred us':>9}{'%roof':>7}")
    lines = [header, "-" * len(header)]
    for r in rows:
        name = r["program"] if r.get("kind") != "handwritten" else f"  {r['program']}"
        if r.get("error") and r.get("kernels") is None:
            lines.append(f"{name[:49]:<50}error: {r['error'][:90]}")
            continue
        lines.append(
            f"{name[:49]:<50}{_fmt(r.get('kernels'), 'd'):>8}{_fmt(r.get('xla_cpu_kernels'), 'd'):>8}"
            f"{_fmt(r.get('moved_over_compulsory'), '.2f'):>10}x{_fmt(r.get('modeled_over_compulsory'), '.2f'):>10}x"
            f"{_fmt(r.get('max_registers'), 'd'):>6}{_fmt(r.get('spills'), 'd'):>8}"
            f"{_fmt(r.get('predicted_us'), '.1f'):>9}{_fmt(r.get('hbm_roofline_pct'), '.1f'):>7}"
            + (f"  ({r['error'][:60]})" if r.get("error") else ""))
    return "\n".join(lines)


def write_csv(rows: list[dict], path: Path) -> None:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)


def write_plot(rows: list[dict], png: Path) -> str:
    try:
        import matplotlib
    except ImportError:
        return "matplotlib is not installed: no plot (pip install matplotlib, or the 'bench' extra)"
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    done = [r for r in rows if r.get("moved_over_compulsory") is not None]
    labels = [("* " if r["kind"] == "handwritten" else "") + r["program"] for r in done]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(max(8, 0.45 * len(done)), 8), sharex=True)
    x = list(range(len(done)))
    width = 0.4
    top.bar([i - width / 2 for i in x], [r["moved_over_compulsory"] for r in done], width,
            label="kernel I/O / compulsory")
    top.bar([i + width / 2 for i in x], [r["modeled_over_compulsory"] for r in done], width,
            label="modeled DRAM / compulsory")
    top.axhline(1.0, color="black", linewidth=0.8)
    top.set_yscale("log")
    top.set_ylabel("bytes / compulsory")
    top.legend(fontsize=8)
    bottom.bar([i - width / 2 for i in x], [r["kernels"] or 0 for r in done], width, label="ours")
    bottom.bar([i + width / 2 for i in x], [r.get("xla_cpu_kernels") or 0 for r in done], width,
               label="XLA:CPU")
    bottom.set_ylabel("kernels")
    bottom.legend(fontsize=8)
    bottom.set_xticks(x, labels, rotation=75, ha="right", fontsize=7)
    fig.suptitle("fusion quality (sm_90 compile; * = hand-written Triton)")
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return f"plot written to {png}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, help="HLO files (default: bench/programs)")
    parser.add_argument("--only", action="append", help="only the program of this name")
    parser.add_argument("--csv", type=Path, default=Path("fusion_quality.csv"))
    parser.add_argument("--png", type=Path, default=Path("fusion_quality.png"))
    parser.add_argument("--device", default="h100", help="device of the cost model's prediction")
    parser.add_argument("--no-ptx", action="store_true", help="skip the sm_90 compile")
    parser.add_argument("--no-handwritten", action="store_true",
                        help="leave out the hand-written Triton kernels")
    parser.add_argument("--keep", type=Path, help="keep the kernel files, PTX and cubin here")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    files = args.files or program_files(args.only)
    counts = xla_cpu_counts()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="fusion_quality_"))
    reports: dict[str, tuple] = {}
    dirs: dict[str, Path] = {}
    failures: dict[str, str] = {}
    for path in files:
        name = path.stem
        dirs[name] = work / name
        try:
            reports[name] = compile_program(path, dirs[name], args.device)
        except Exception as err:  # noqa: BLE001 - a program that fails is a row, not a crash
            failures[name] = f"{type(err).__name__}: {str(err).strip().splitlines()[0][:200]}"
        print(f"compiled {name} ({time.perf_counter() - start:.0f}s)", file=sys.stderr)
    errors = {} if args.no_ptx or not reports else add_target(reports, dirs)

    rows = []
    for path in files:
        name = path.stem
        if name in failures:
            rows.append({"program": name, "kind": "ours", "xla_cpu_kernels": counts.get(name),
                         "error": failures[name]})
            continue
        report, seconds = reports[name]
        row = program_row(name, report, seconds, counts.get(name))
        row["error"] = errors.get(name)
        rows.append(row)
        (dirs[name] / "report.json").write_text(json.dumps(report.to_json(), indent=2) + "\n")
    if not args.no_handwritten and not args.no_ptx:
        rows += handwritten_rows(args.device)
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)

    print(render_table(rows))
    write_csv(rows, args.csv)
    print(f"CSV written to {args.csv}")
    print(write_plot(rows, args.png))
    if args.keep:
        print(f"kernel files, PTX, cubin and report.json per program under {work}")
    print(f"done in {time.perf_counter() - start:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
