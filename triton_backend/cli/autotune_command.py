"""``fusion-compile autotune FILE.hlo [--fusion NAME] [--budget N] [--jobs N] [--device h100] [--force]``

Sweeps legal tilings x num_warps x num_stages of each fusion (or just ``--fusion``), prints a
table of the candidates (tiling, warps, stages, time, GB/s, % of the device's peak bandwidth)
and the winner, and stores the winner in the tuning database.  On a GPU the times are
measured; without one they are the cost model's predictions, and the output says so.  A
progress bar (tqdm) is shown on a terminal for sweeps of more than a few candidates.
"""
from __future__ import annotations

import argparse
import sys

from fusion.errors import FusionCompilerError
from triton_backend.tuning.autotune import autotune
from triton_backend.cli.check_command import read_module
from triton_backend.tuning.device_specs import device_spec
from triton_backend.tuning.tuning_db import find_fusion

HELP = "autotune the tiling and launch options of fusions (measured on a GPU, else cost model)"

_PROGRESS_MIN = 8


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE.hlo", help="HLO text with fusions")
    parser.add_argument("--fusion", metavar="NAME", help="tune only this fusion instruction")
    parser.add_argument("--budget", type=int, metavar="N",
                        help="at most N candidates per fusion (the best predicted ones)")
    parser.add_argument("--jobs", type=int, metavar="N", help="parallel compile workers")
    parser.add_argument("--device", default=None,
                        help="a100-40gb, a100-80gb (a100), h100, h200 (default: the GPU, else h100)")
    parser.add_argument("--force", action="store_true", help="ignore stored results and re-tune")
    parser.add_argument("--top", type=int, default=10, metavar="K",
                        help="rows of the candidate table (default 10)")


def _progress_bar(total: int):
    if total < _PROGRESS_MIN or not sys.stderr.isatty():
        return None
    try:
        from tqdm import tqdm  # noqa: PLC0415 - optional
    except ImportError:
        return None
    return tqdm(total=total, desc="autotune", unit="cand", file=sys.stderr, leave=False)


def _fmt_time(seconds: float) -> str:
    return f"{seconds * 1e6:.2f} us"


def print_result(result, top: int, out=None) -> None:
    """The candidate table and the winner of one fusion (on ``out``, default stdout)."""
    out = out if out is not None else sys.stdout
    print(f"fusion {result.fusion} on {result.device}: {result.method}", file=out)
    if result.from_cache:
        w = result.cached
        print(f"  winner (stored): tiling {w.get('tile_sizes')}, warps {w.get('num_warps')}, "
              f"stages {w.get('num_stages')}, {_fmt_time(w.get('time_s', 0.0))} "
              "(use --force to re-tune)", file=out)
        return
    header = "time" if result.measured else "predicted time"
    rows = [("tiling", "warps", "stages", header, "GB/s", "% of peak BW", "modeled/compulsory bytes")]
    for t in result.trials[:top]:
        if t.error:
            rows.append((t.config.label(), str(t.config.num_warps), str(t.config.num_stages),
                         "failed: " + t.error[:60], "", "", ""))
            continue
        rows.append((t.config.label(), str(t.config.num_warps), str(t.config.num_stages),
                     _fmt_time(t.time_s), f"{t.gb_per_s:.3g}", f"{100 * t.fraction_of_peak:.3g}%",
                     f"{t.estimate.workload.traffic_ratio:.2f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip(), file=out)
    hidden = len(result.trials) - top
    if hidden > 0:
        print(f"  ... {hidden} more candidates", file=out)
    best = result.best
    if best is None:
        print("  no candidate compiled", file=out)
        return
    what = "measured" if result.measured else "predicted (cost model, not measured)"
    print(f"  winner: tiling {list(best.config.tile_sizes)}, num_warps {best.config.num_warps}, "
          f"num_stages {best.config.num_stages}: {_fmt_time(best.time_s)} {what}, "
          f"{100 * best.fraction_of_peak:.3g}% of peak bandwidth", file=out)


def run(args: argparse.Namespace) -> int:

    if args.device:
        try:
            device_spec(args.device)
        except ValueError as err:
            print(f"fusion-compile autotune: error: {err}", file=sys.stderr)
            return 2
    if args.budget is not None and args.budget < 1:
        print("fusion-compile autotune: error: --budget must be at least 1", file=sys.stderr)
        return 2
    module = read_module(args.file)
    fusions = [find_fusion(module, args.fusion)] if args.fusion else \
        [instr for _, instr in module.fusions()]
    if not fusions:
        print(f"fusion-compile autotune: {args.file} has no fusions to tune", file=sys.stderr)
        return 1
    status = 0
    for instr in fusions:
        bar = None

        def on_total(total: int) -> None:
            nonlocal bar
            bar = _progress_bar(total)

        def progress(n: int) -> None:
            if bar is not None:
                bar.update(n)

        try:
            result = autotune(module, instr, device=args.device, budget=args.budget,
                              jobs=args.jobs, force=args.force, progress=progress,
                              on_total=on_total)
        except FusionCompilerError as err:
            if args.fusion:
                raise
            print(f"fusion {instr.name}: skipped: {err}")
            status = 1
            continue
        finally:
            if bar is not None:
                bar.close()
        print_result(result, args.top)
    return status
