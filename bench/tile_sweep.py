"""Measured block sizes of the dot and attention templates (forward and backward), on a GPU.

Also the rows per program of two row normalizations (``ROWS_PROGRAMS``), where a one-row
program lost to eager PyTorch.

The autotuner sweeps hundreds of candidates ranked by the cost model; a GPU lent for minutes
measures a dozen.  This script times, per dot or attention fusion of the bench programs, a short
list of launch configurations taken from Triton's own tuned kernels (the matmul tutorial's
``get_cuda_autotune_config``, the fused-attention tutorial's forward configs) and the
template's default, and prints the time, TFLOP/s and the ratio to the default.  What wins here
is what the default tables in ``templates/dot/tiling.py`` and ``templates/attention/tiling.py``
should pick; the tuning database overrides them per fusion.

Candidates are compiled in spawned workers first (each launches once, filling Triton's own
cache), then timed one by one in this process with ``triton.testing.do_bench`` (L2 flushed).
``--dry-run`` only generates every candidate's kernel file (no GPU needed): it checks that each
configuration is legal for each fusion.  Without a GPU (and without ``--dry-run``) it says so
and exits 0.

    python bench/tile_sweep.py [--dry-run] [--csv tile_sweep.csv] [PROGRAMS...]
"""
from __future__ import annotations

import argparse
import csv
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from gpu_runtime import program_flops  # noqa: E402 - the bench directory is on the path now

DEFAULT_PROGRAMS = [
    "matmul_bf16_4096x4096x4096", "matmul_bf16_2048x3072x768", "matmul_bf16_2048x768x2304",
    "matmul_bias_gelu_bf16_1024", "attention_bf16_4x16x2048x128",
    "attention_causal_bf16_4x16x2048x128", "attention_causal_bf16_4x8x512x64",
    "attention_causal_f32_4x8x512x64",
    "gpt2_block_bf16_b4_s512_d768", "softmax_f32_4096x1024", "layernorm_f32_4096x1024",
    "vjp_attention_causal_bf16_4x8x512x64",
    "vjp_attention_gqa_sliding_window_bf16_4x16x2048x128_kv4_w512",
]

#: Dot candidates: (BLOCK_M, BLOCK_N, BLOCK_K, warps, stages); the matmul tutorial's sm_90
#: list and the larger tiles CUTLASS-style Hopper kernels use.
DOT_CONFIGS = (
    (128, 256, 64, 8, 3), (64, 256, 32, 4, 4), (128, 128, 32, 4, 4), (128, 64, 32, 4, 4),
    (64, 128, 32, 4, 4), (128, 128, 64, 4, 3), (128, 128, 64, 8, 3), (256, 128, 64, 8, 3),
    (128, 256, 64, 8, 4), (64, 128, 64, 4, 4),
)
#: Attention candidates: (BLOCK_M, BLOCK_N, warps, stages), the tutorial's forward space.
ATTENTION_CONFIGS = (
    (64, 32, 4, 2), (64, 64, 4, 3), (128, 32, 8, 3), (128, 64, 8, 3), (128, 64, 4, 3),
    (128, 128, 8, 3), (128, 64, 8, 2), (64, 64, 8, 2),
)

#: Attention candidates for exact f32 dots (FMA, operands in registers: one stage).  The
#: default's 64x32 at 4 warps spilled 488 bytes on Triton 3.6 and took 204 us on the H200
#: (eager 74); it now takes 8 warps, which the cost model predicts a little slower.
ATTENTION_F32_CONFIGS = (
    (64, 32, 4, 1), (64, 32, 8, 1), (32, 32, 4, 1), (64, 64, 8, 1), (128, 32, 8, 1),
    (32, 64, 4, 1),
)


#: Attention backward candidates (the score-space kernels: rows, key or query; then the
#: streamed block): (BLOCK_ROWS, BLOCK_STREAMED, warps, stages).
BACKWARD_CONFIGS = (
    (64, 32, 8, 2), (64, 32, 4, 2), (64, 64, 4, 3), (64, 64, 8, 3), (128, 64, 8, 3),
    (32, 64, 4, 3), (64, 128, 8, 3), (128, 32, 8, 2),
)


#: Row-kernel candidates (a normalization over rows of a program of ``ROWS_PROGRAMS``):
#: (rows per program, warps).  The default's one 1,024-element row per program took 13.8 us
#: for softmax f32[4096,1024] on the H200, eager 8.8: do more rows per program do better?
ROWS_CONFIGS = ((1, 4), (1, 8), (2, 4), (4, 4), (4, 8), (8, 8), (16, 8))
ROWS_PROGRAMS = ("softmax_f32_4096x1024", "layernorm_f32_4096x1024")


def skip_reason(dry_run: bool) -> str | None:
    if dry_run:
        return None
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    if os.environ.get("TRITON_INTERPRET", "").strip().lower() in ("1", "true", "on", "yes"):
        return "TRITON_INTERPRET is set"
    if not torch.cuda.is_available():
        return "no CUDA GPU is visible"
    return None


def swept_fusions(module, rows: bool = False):
    """``(instruction, kind, configs)`` per dot or attention fusion of the fused ``module``;
    with ``rows``, per other fusion with a rank-2 output too (its rows per program)."""
    from fusion.ir.shape import flatten_shape
    from triton_backend.templates.attention.backward_driver import is_score_space_fusion
    from triton_backend.templates.attention.driver import (attention_pattern, dot_operand_bytes,
                                                           is_attention_fusion)
    from triton_backend.templates.dot.driver import is_dot_fusion

    for _, instr in module.fusions():
        if is_attention_fusion(module, instr):
            fused = module.computation(instr.attr("calls"))
            exact_f32 = dot_operand_bytes(fused, attention_pattern(module, instr)) >= 4
            configs = ATTENTION_F32_CONFIGS if exact_f32 else ATTENTION_CONFIGS
            yield instr, "attention", [((m, n), w, s) for m, n, w, s in configs]
        elif is_score_space_fusion(module, instr):
            yield instr, "backward", [((m, n), w, s) for m, n, w, s in BACKWARD_CONFIGS]
        elif is_dot_fusion(module, instr):
            yield instr, "dot", [((m, n, k), w, s) for m, n, k, w, s in DOT_CONFIGS]
        elif rows and len(dims := flatten_shape(instr.shape)[0].dims) == 2:
            yield instr, "rows", [((r, dims[1]), w, 1) for r, w in ROWS_CONFIGS
                                  if r <= dims[0]]


def _timed(compiled_module, inputs, warps: int, stages: int) -> float:
    from triton.testing import do_bench

    from triton_backend.tuning.autotune import launch

    return do_bench(lambda: launch(compiled_module, inputs, num_warps=warps,
                                   num_stages=stages)) * 1e-3


def plan(names: list[str], dry_run: bool) -> list[tuple]:
    """``(program, fused module, instruction, kind, configs)`` per swept fusion of the named
    bench programs (fused as ``compile_hlo`` fuses them)."""
    from fusion.text.parser import parse_hlo
    from triton_backend.driver.module_compiler import compile_hlo

    work = []
    for name in names:
        text = (ROOT / "bench" / "programs" / f"{name}.hlo").read_text()
        fused = compile_hlo(parse_hlo(text), target="sm_90" if dry_run else None).module
        work += [(name, fused, instr, kind, configs)
                 for instr, kind, configs in swept_fusions(fused, name in ROWS_PROGRAMS)]
    return work


def compile_all(work: list[tuple], jobs: int) -> dict:
    """Build and launch every candidate once in spawned workers (a fault poisons only its
    worker; Triton's cache then serves this process): key -> error text or None."""
    from fusion.text.printer import print_hlo
    from triton_backend.tuning.autotune import compile_candidate, default_executor

    texts = {}
    with default_executor(jobs, on_gpu=True) as pool:
        futures = {}
        for name, fused, instr, _, configs in work:
            text = texts.setdefault(name, print_hlo(fused))
            for sizes, warps, stages in configs:
                futures[(name, instr.name, sizes, warps, stages)] = pool.submit(
                    compile_candidate, text, instr.name, sizes, warps, stages, True)
        return {key: future.result() for key, future in futures.items()}


def sweep_fusion(name: str, fused, instr, kind: str, configs, dry_run: bool,
                 errors: dict) -> list[dict]:
    """The default and every candidate of one fusion, timed (or, ``dry_run``, generated)."""
    from triton_backend.driver.compiled_fusion import compile_fusion

    target = "sm_90" if dry_run else None
    flops, _ = program_flops(fused, [fused.computation(instr.attr("calls"))])
    default = compile_fusion(fused, instr, target=target)
    options = (int(getattr(default.module, "NUM_WARPS", 4)),
               int(getattr(default.module, "NUM_STAGES", 1)))
    candidates = [("default", tuple(default.tile_sizes), *options)] + [
        ("candidate", sizes, w, s) for sizes, w, s in configs]
    rows, default_us = [], None
    for role, sizes, warps, stages in candidates:
        row = {"program": name, "fusion": instr.name, "kind": kind, "role": role,
               "tiles": "x".join(map(str, sizes)), "warps": warps, "stages": stages,
               "gflop": flops / 1e9}
        try:
            error = errors.get((name, instr.name, sizes, warps, stages))
            if error:
                raise RuntimeError(error)
            compiled = compile_fusion(fused, instr, tile_sizes=sizes, target=target)
            if not dry_run:
                inputs = [t.cuda() for t in compiled.module.example_inputs()]
                row["us"] = _timed(compiled.module, inputs, warps, stages) * 1e6
                row["tflops"] = flops / row["us"] / 1e6 if flops else None
                if role == "default":
                    default_us = row["us"]
                if default_us:
                    row["vs_default"] = default_us / row["us"]
        except Exception as err:  # noqa: BLE001 - one candidate's failure is a row
            row["error"] = f"{type(err).__name__}: {str(err)[:90]}"
        rows.append(row)
        print(_line(row), flush=True)
    return rows


def _line(r: dict) -> str:
    cells = (f"{r['program'][:34]:<35}{r['fusion'][:20]:<21}{r['kind']:<10}{r['role']:<10}"
             f"{r['tiles']:<12}{r['warps']:>3}{r['stages']:>3}")
    if "error" in r:
        return cells + f"  error: {r['error']}"
    if "us" not in r:
        return cells + "  generated"
    tflops = f"{r['tflops']:.0f}" if r.get("tflops") else "-"
    ratio = f"{r['vs_default']:.2f}x" if r.get("vs_default") else "-"
    return cells + f"{r['us']:>10.1f}{tflops:>8}{ratio:>8}"


HEADER = (f"{'program':<35}{'fusion':<21}{'kind':<10}{'role':<10}{'tiles':<12}{'w':>3}{'s':>3}"
          f"{'us':>10}{'TFLOP/s':>8}{'vs dflt':>8}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("programs", nargs="*", default=DEFAULT_PROGRAMS)
    parser.add_argument("--dry-run", action="store_true",
                        help="only generate each candidate's kernel (for sm_90), no GPU")
    parser.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    parser.add_argument("--csv", type=Path, default=Path("tile_sweep.csv"))
    args = parser.parse_args(argv)
    reason = skip_reason(args.dry_run)
    if reason is not None:
        print(f"tile_sweep: skipped: {reason}")
        return 0
    if not args.dry_run:
        from triton_backend.runtime.launch_mode import configure_launch_mode

        configure_launch_mode()
    start = time.perf_counter()
    work = plan(args.programs, args.dry_run)
    errors = {} if args.dry_run else compile_all(work, args.jobs)
    print(f"{sum(len(w[4]) for w in work)} candidates of {len(work)} fusions ready in "
          f"{time.perf_counter() - start:.0f}s", flush=True)
    print(HEADER, flush=True)
    rows: list[dict] = []
    for name, fused, instr, kind, configs in work:
        rows += sweep_fusion(name, fused, instr, kind, configs, args.dry_run, errors)
        fields = sorted({k for r in rows for k in r}, key=lambda k: (k != "program", k))
        with args.csv.open("w", newline="") as handle:  # rewritten as rows come
            writer = csv.DictWriter(handle, fieldnames=fields)
            writer.writeheader()
            writer.writerows(rows)
    print(f"{len(rows)} rows in {time.perf_counter() - start:.0f}s; CSV written to {args.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
