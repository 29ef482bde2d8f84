"""Compile latency per module of the corpus and the examples, phase by phase.

Phases: parse, indexing analysis (every fusion's output-to-input maps), tiling (legal tilings
and their costs), code generation (kernel files, cold: a fresh kernel cache; warm: the same
cache again), and Triton's own compile to cubin for sm_90 (cold: a fresh Triton cache; warm:
its on-disk hit), run in a child process without ``TRITON_INTERPRET``
(``bench/triton_child_compile.py``).  The last column is our phases over Triton's cold compile.

    python bench/compile_latency.py [--no-triton] [--limit N] [FILES...]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fusion.errors import FusionCompilerError  # noqa: E402
from fusion.text.parser import parse_hlo  # noqa: E402
from tiling.indexing_analysis.fusion_indexing import output_to_input_indexing_of_computation  # noqa: E402
from tiling.policy.candidates import tiling_candidates  # noqa: E402


def default_files() -> list[Path]:
    return sorted((ROOT / "tests" / "data" / "hlo").glob("*.after.hlo")) + sorted(
        (ROOT / "examples").glob("*.hlo"))


def measure(path: Path) -> dict:
    """Seconds per phase for one module, and the kernel files it produced."""
    from triton_backend.driver.compiled_fusion import compile_fusion
    from triton_backend.runtime.kernel_cache import KernelCache

    text = path.read_text()
    row = {"module": path.name, "fusions": 0, "kernels": [], "errors": []}
    start = time.perf_counter()
    module = parse_hlo(text)
    row["parse"] = time.perf_counter() - start
    fusions = [instr for _, instr in module.fusions()]
    row["fusions"] = len(fusions)
    row["indexing"] = row["tiling"] = row["codegen_cold"] = row["codegen_warm"] = 0.0
    cache_dir = tempfile.mkdtemp(prefix="bench-kernels-")
    for instr in fusions:
        comp = module.computation(instr.attr("calls"))
        start = time.perf_counter()
        try:
            output_to_input_indexing_of_computation(comp, module)
        except (FusionCompilerError, ValueError, KeyError) as err:
            row["errors"].append(f"{instr.name}: indexing: {err}")
        row["indexing"] += time.perf_counter() - start
        start = time.perf_counter()
        try:
            tiling_candidates(module, instr)
        except FusionCompilerError as err:
            row["errors"].append(f"{instr.name}: tiling: {err}")
        row["tiling"] += time.perf_counter() - start
        for phase, cache in (("codegen_cold", KernelCache(cache_dir)),
                             ("codegen_warm", KernelCache(cache_dir))):
            start = time.perf_counter()
            try:
                compiled = compile_fusion(module, instr, cache=cache)
            except FusionCompilerError as err:
                row["errors"].append(f"{instr.name}: codegen: {err}")
                break
            finally:
                row[phase] += time.perf_counter() - start
            if phase == "codegen_cold":
                row["kernels"].append(str(compiled.kernel_path))
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--no-triton", action="store_true", help="skip Triton's cubin compile")
    parser.add_argument("--limit", type=int, help="only the first N modules")
    args = parser.parse_args(argv)
    files = args.files or default_files()
    # Pay the one-time imports (torch, triton, the kernel helpers) before any timing.
    import triton  # noqa: F401
    import triton_backend.driver.compiled_fusion  # noqa: F401
    import triton_backend.device_lib.elementwise_math  # noqa: F401
    rows = [measure(p) for p in files[: args.limit]]
    if not args.no_triton:
        from triton_child_compile import run_in_child

        paths = [k for r in rows for k in r["kernels"]]
        results = run_in_child(paths, arch=90) if paths else {}
        for r in rows:
            got = [results.get(k, {}) for k in r["kernels"]]
            r["triton_cold"] = sum(g.get("cold_s", 0.0) for g in got)
            r["triton_warm"] = sum(g.get("warm_s", 0.0) for g in got)
            r["errors"] += [f"triton: {g['error']}" for g in got if "error" in g]
    cols = ["parse", "indexing", "tiling", "codegen_cold", "codegen_warm"]
    if not args.no_triton:
        cols += ["triton_cold", "triton_warm"]
    print(f"{'module':<34}{'fus':>4}" + "".join(f"{c:>14}" for c in cols)
          + ("" if args.no_triton else f"{'ours/triton':>13}"))
    for r in rows:
        line = f"{r['module']:<34}{r['fusions']:>4}" + "".join(f"{r[c] * 1e3:>12.2f}ms" for c in cols)
        if not args.no_triton:
            ours = r["parse"] + r["indexing"] + r["tiling"] + r["codegen_cold"]
            line += f"{ours / r['triton_cold']:>13.2f}" if r["triton_cold"] else f"{'n/a':>13}"
        print(line)
    errors = [(r["module"], e) for r in rows for e in r["errors"]]
    if errors:
        print(f"\n{len(errors)} fusion(s) not fully compiled:")
        for name, err in errors:
            print(f"  {name}: {err[:160]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
