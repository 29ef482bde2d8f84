"""Quality of the generated kernels, per fusion of the corpus and the examples.

For each kernel: modeled bytes over compulsory bytes for the tiling it was generated with
(``tiling.policy.candidates`` costs through ``triton_backend.tuning.cost_model``: 1.00 means no byte
is moved twice), and, compiled for sm_90 in a child process without ``TRITON_INTERPRET``
(``bench/triton_child_compile.py``), registers per thread, spilled bytes and the vectorized
global loads/stores in the PTX (``ld.global.v4`` ...).

    python bench/codegen_quality.py [--arch 90] [--no-triton] [--limit N] [FILES...]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compile_latency import default_files  # noqa: E402
from fusion.errors import FusionCompilerError  # noqa: E402
from fusion.text.parser import parse_hlo  # noqa: E402


def kernel_rows(path: Path) -> list[dict]:
    from tiling.symbolic.tiled_fusion import analyze_fusion_tiling
    from tiling.policy.candidates import TilingCandidate, evaluate_candidate
    from triton_backend.tuning.autotune import workload_for
    from triton_backend.driver.compiled_fusion import compile_fusion

    module = parse_hlo(path.read_text())
    rows = []
    for _, instr in module.fusions():
        row = {"module": path.name, "fusion": instr.name}
        try:
            compiled = compile_fusion(module, instr)
        except FusionCompilerError as err:
            row["error"] = f"codegen: {err}"
            rows.append(row)
            continue
        row.update(kernel=str(compiled.kernel_path), kind=compiled.kind.value,
                   tile_sizes=compiled.tile_sizes)
        try:
            analysis = analyze_fusion_tiling(module, instr)
            # codegen pads a tile to a power of two past a small dim (3 -> 4); the tile
            # analysis takes tiles within the dims: same blocks, same elements.
            sizes = tuple(min(t, max(n, 1)) for t, n in zip(compiled.tile_sizes,
                                                            analysis.output_dims))
            candidate = evaluate_candidate(analysis, sizes)
            if isinstance(candidate, TilingCandidate):
                row["traffic_ratio"] = workload_for(module, instr, candidate).traffic_ratio
            else:
                row["traffic_note"] = candidate.reason
        except FusionCompilerError as err:
            row["traffic_note"] = str(err)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--arch", type=int, default=90, choices=(80, 86, 89, 90))
    parser.add_argument("--no-triton", action="store_true", help="skip the sm_XX compile")
    parser.add_argument("--limit", type=int, help="only the first N modules")
    args = parser.parse_args(argv)
    rows = [r for p in (args.files or default_files())[: args.limit] for r in kernel_rows(p)]
    if not args.no_triton:
        from triton_child_compile import run_in_child

        paths = [r["kernel"] for r in rows if "kernel" in r]
        results = run_in_child(paths, arch=args.arch, resources=True) if paths else {}
        for r in rows:
            r.update(results.get(r.get("kernel"), {}))
    print(f"{'module':<30}{'fusion':<34}{'kind':<12}{'tile':<12}{'bytes/compulsory':>17}"
          f"{'regs':>6}{'spills':>8}  vectorized")
    for r in rows:
        if "kernel" not in r:
            print(f"{r['module']:<30}{r['fusion']:<34}{r['error'][:80]}")
            continue
        ratio = f"{r['traffic_ratio']:.2f}" if "traffic_ratio" in r else "n/a"
        tile = "x".join(map(str, r["tile_sizes"]))
        regs = str(r.get("registers", "-"))
        spills = str(r.get("spills", "-"))
        vector = ", ".join(f"{k} x{v}" for k, v in r.get("vector_accesses", {}).items()) or \
            ("none" if "registers" in r else r.get("error", "-")[:60])
        print(f"{r['module']:<30}{r['fusion'][:33]:<34}{r['kind']:<12}{tile:<12}{ratio:>17}"
              f"{regs:>6}{spills:>8}  {vector}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
