"""Every corpus program run on the GPU and checked against the reference evaluator.

Runs ``fusion-compile --json run FILE --check`` for each ``tests/data/hlo/*.hlo`` (the XLA
dumps, fused and unfused), ``examples/*.hlo``, the bench
programs of ``GPU_FORM_PROGRAMS`` and ``bench/programs/coverage/*.hlo``, one child process per file and several at a
time (Triton's compile of each kernel is CPU work; the launches are small), and prints one
line per file as it finishes: kernels, compile and run seconds, and whether every output is
within its element type's tolerance of the evaluator's.  The rows go to a CSV as they come, so
a run cut short still leaves what it measured.

Without a GPU it prints why it skips and exits 0, unless ``--interpreter`` asks for the same
check under the Triton interpreter (what the test suite does file by file).

``--f32-dot-precision tf32x3`` runs every f32 dot as three TF32 products (``run
--f32-dot-precision``), checked at f32's tolerance: the evidence issue 26 asks for before
3xTF32 may become the default for f32 dots ("only where it passes the same f32 tolerance on
the whole corpus"); ``--with-f32-dots`` keeps to the files whose results that can move.

    python bench/gpu_corpus_check.py [--jobs N] [--timeout S] [--csv F] [--interpreter]
                                     [--f32-dot-precision P] [--with-f32-dots] [FILES...]
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIELDS = ["file", "status", "kernels", "compile_s", "run_s", "worst_rel_error", "detail"]


#: Bench programs whose kernels take forms only a GPU target chooses (split-K dots and
#: reductions split among programs, whose parts meet through integer atomics; see
#: ``device_lib/ordered_sums.py``), small enough for the evaluator to check in seconds.
GPU_FORM_PROGRAMS = ("matmul_bias_gelu_bf16_1024", "llama_block_bf16_b1_s512_d1024_h8_kv2",
                     "gpt2_block_f32_b1_s512_d768", "cross_entropy_f32_4096x8192",
                     "global_norm_f32_4096x8192", "bias_grad_bf16_8192x768")


#: Bench programs whose f32 dots ``--with-f32-dots`` checks beside the corpus's.
F32_DOT_PROGRAMS = ("attention_causal_f32_4x8x512x64", "vjp_attention_causal_f32_4x8x512x64")


def default_files() -> list[Path]:
    return (sorted((ROOT / "tests" / "data" / "hlo").glob("*.hlo"))
            + sorted((ROOT / "examples").glob("*.hlo"))
            + [ROOT / "bench" / "programs" / f"{name}.hlo" for name in GPU_FORM_PROGRAMS]
            # forms only a GPU compiles of what XLA accepts (bench/programs/coverage)
            + sorted((ROOT / "bench" / "programs" / "coverage").glob("*.hlo")))


def with_f32_dots(files: list[Path]) -> list[Path]:
    """The files holding a dot that ``--f32-dot-precision`` changes (an f32 dot, not asked
    to be exact): the only ones whose results 3xTF32 can move."""
    from fusion.text.parser import parse_hlo
    from fusion.transforms.dot_algorithm import with_f32_dot_precision

    out = []
    for path in files:
        module = parse_hlo(path.read_text())
        if with_f32_dot_precision(module, "tf32x3") is not module:
            out.append(path)
    return out


def check_file(path: Path, timeout: float, interpreter: bool,
               f32_dot_precision: str = "ieee") -> dict:
    """One child process: compile, run, compare; its JSON turned into a row."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    if interpreter:
        env["TRITON_INTERPRET"] = "1"
    else:
        env.pop("TRITON_INTERPRET", None)
    row = {"file": path.name}
    try:
        proc = subprocess.run([sys.executable, "-m", "triton_backend", "--json", "run", str(path),
                               "--check", "--f32-dot-precision", f32_dot_precision],
                              capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    except subprocess.TimeoutExpired:
        return {**row, "status": "timeout", "detail": f"over {timeout:.0f} s"}
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        return {**row, "status": "crash", "detail": f"exit {proc.returncode}: {tail[0][:160]}"}
    error = doc.get("error")
    if error is not None:
        message = error.get("message", error) if isinstance(error, dict) else error
        return {**row, "status": "error", "detail": str(message)[:160]}
    check = doc.get("check") or {}
    outputs = check.get("outputs", [])
    return {**row, "status": "pass" if check.get("passed") else "FAIL",
            "kernels": doc.get("kernels"), "compile_s": doc.get("compile_s"),
            "run_s": doc.get("run_s"),
            "worst_rel_error": max((o["max_rel_error"] for o in outputs), default=0.0),
            "detail": "; ".join(f"{o['name']}: {o['mismatches']}/{o['size']} off"
                                for o in outputs if not o["passed"])}


def _line(row: dict) -> str:
    parts = [f"{row['status']:<8}{row['file'][:46]:<47}"]
    if row.get("kernels") is not None:
        parts.append(f"{row['kernels']:>3} kernel(s)  compile {row['compile_s']:.2f}s"
                     f"  run {row['run_s']:.3f}s  worst rel {row['worst_rel_error']:.2g}")
    if row.get("detail"):
        parts.append(row["detail"])
    return "  ".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, help="HLO files (default: the corpus)")
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per file")
    parser.add_argument("--csv", type=Path, default=Path("gpu_corpus_check.csv"))
    parser.add_argument("--interpreter", action="store_true",
                        help="without a GPU, check under the Triton interpreter instead of skipping")
    parser.add_argument("--f32-dot-precision", default="ieee", choices=("ieee", "tf32x3", "tf32"),
                        help="how f32 dots run (run --f32-dot-precision); default ieee")
    parser.add_argument("--with-f32-dots", action="store_true",
                        help="only the files with an f32 dot (and the f32 attention programs)")
    args = parser.parse_args(argv)
    if not args.interpreter:
        sys.path.insert(0, str(Path(__file__).resolve().parent))
        from gpu_runtime import skip_reason

        reason = skip_reason()
        if reason is not None:
            print(f"gpu_corpus_check: skipped: {reason}")
            return 0
    files = args.files or default_files()
    if args.with_f32_dots:
        extra = [] if args.files else [ROOT / "bench" / "programs" / f"{name}.hlo"
                                       for name in F32_DOT_PROGRAMS]
        files = with_f32_dots(files + extra)
    counts: dict[str, int] = {}
    with args.csv.open("w", newline="") as handle, ThreadPoolExecutor(args.jobs) as pool:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        writer.writeheader()
        futures = [pool.submit(check_file, f, args.timeout, args.interpreter,
                               args.f32_dot_precision) for f in files]
        for future in as_completed(futures):
            row = future.result()
            writer.writerow(row)
            handle.flush()
            counts[row["status"]] = counts.get(row["status"], 0) + 1
            print(_line(row), flush=True)
    print("summary: " + ", ".join(f"{n} {status}" for status, n in sorted(counts.items())))
    print(f"CSV written to {args.csv}")
    return 0 if set(counts) <= {"pass"} else 1


if __name__ == "__main__":
    sys.exit(main())
