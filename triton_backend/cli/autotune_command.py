"""``fusion-compile autotune FILE.hlo [--fusion NAME] [--budget N] [--jobs N] [--device h100] [--force]``

Sweeps legal tilings x num_warps x num_stages of each fusion (or just ``--fusion``), prints a
table of the candidates (tiling, warps, stages, time, GB/s, % of the device's peak bandwidth),
the winner and a summary line (candidates, time taken, winner, improvement over the untuned
default), and stores the winner in the tuning database.  On a GPU the times are measured;
without one they are the cost model's predictions, and the output says so.  An unfused module
(as JAX lowers it) is fused first, as ``run`` and ``compile`` do; ``--fusion`` then names a
fusion of the fused module.

Progress: a tqdm bar that stays on a terminal; plain lines at each tenth of the sweep when
standard error is not one (a CI log).  Results: ``--json``, ``--csv FILE`` (one row per
candidate, ``-`` for standard output), ``--plot PNG`` (needs matplotlib: ``pip install
'hlo-triton-fusion[plot]'``).  ``--scheduler tcp://HOST:PORT`` compiles (and on GPU workers
launches) the candidates on a ``dask.distributed`` cluster (``pip install
'hlo-triton-fusion[distributed]'``); the winners land in this machine's tuning database.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import io
import sys
import time
from collections.abc import Iterator
from typing import Any

from fusion.errors import BadArgumentError, FusionCompilerError
from fusion.ir.hlo_module import HloModule
from fusion.logs import get_logger
from triton_backend.cli.check_command import read_verified_module
from triton_backend.cli.json_output import emit
from triton_backend.cli.output_files import check_output_path
from triton_backend.runtime.atomic_files import atomic_output
from triton_backend.driver.module_compiler import compile_hlo
from triton_backend.tuning.autotune import AutotuneResult, Trial, autotune
from triton_backend.runtime.device_specs import device_spec
from triton_backend.runtime.tuning_db import find_fusion

HELP = "autotune the tiling and launch options of fusions (measured on a GPU, else cost model)"

_PROGRESS_MIN = 8
#: Plain progress lines when stderr is not a terminal: one per this fraction of the sweep.
_PLAIN_STEP = 0.1

_log = get_logger("triton_backend.cli")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE.hlo",
                        help="HLO text, fused or not (- reads standard input)")
    parser.add_argument("--fusion", metavar="NAME", help="tune only this fusion instruction")
    parser.add_argument("--budget", type=int, metavar="N",
                        help="at most N candidates per fusion (the best predicted ones)")
    parser.add_argument("--jobs", type=int, metavar="N", help="parallel compile workers")
    parser.add_argument("--device", default=None,
                        help="a100-40gb, a100-80gb (a100), h100, h200 (default: the GPU, else h100)")
    parser.add_argument("--force", action="store_true", help="ignore stored results and re-tune")
    parser.add_argument("--top", type=int, default=10, metavar="K",
                        help="rows of the candidate table (default 10)")
    parser.add_argument("--csv", metavar="FILE",
                        help="write every candidate as a CSV row to FILE (- : standard output)")
    parser.add_argument("--plot", metavar="PNG",
                        help="plot the candidates' times to PNG (needs matplotlib)")
    parser.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                        help="run the sweep on this dask.distributed scheduler's workers")


class Progress:
    """The sweep's progress on stderr: a tqdm bar that stays on a terminal, else a plain line
    at every ``_PLAIN_STEP`` of the candidates (nothing for sweeps under ``_PROGRESS_MIN``)."""

    def __init__(self, label: str, stream: Any = None) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.bar = None
        self.total = 0
        self.done = 0
        self.next_line = 0.0
        self.start = time.perf_counter()

    def on_total(self, total: int) -> None:
        self.total, self.done = total, 0
        self.start = time.perf_counter()
        if total < _PROGRESS_MIN:
            return
        if self.stream.isatty():
            self.bar = _progress_bar(total, self.label, self.stream)
        self.next_line = _PLAIN_STEP

    def update(self, n: int) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
            return
        if self.total < _PROGRESS_MIN or self.done < self.next_line * self.total:
            return
        while self.next_line * self.total <= self.done and self.next_line <= 1.0:
            self.next_line += _PLAIN_STEP
        print(f"{self.label}: {self.done}/{self.total} "
              f"({100 * self.done / self.total:.0f}%), {time.perf_counter() - self.start:.1f}s",
              file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _progress_bar(total: int, label: str = "autotune", stream: Any = None):
    """A tqdm bar on a terminal for sweeps of at least ``_PROGRESS_MIN`` (else None); it stays
    on the screen when done."""
    stream = stream if stream is not None else sys.stderr
    if total < _PROGRESS_MIN or not stream.isatty():
        return None
    try:
        from tqdm import tqdm  # noqa: PLC0415 - optional
    except ImportError:
        return None
    return tqdm(total=total, desc=label, unit="cand", file=stream, leave=True)


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


def summary_line(result: AutotuneResult, seconds: float) -> str:
    """``summary: fusion F: N candidates in T s; winner ...; X% faster than the default ...``."""
    head = f"summary: fusion {result.fusion}: "
    if result.from_cache:
        return head + "stored result reused (no candidates run; --force re-tunes)"
    head += f"{len(result.trials)} candidates in {seconds:.1f}s"
    best = result.best
    if best is None:
        return head + "; no candidate compiled"
    c = best.config
    text = (head + f"; winner {c.label()} warps {c.num_warps} stages {c.num_stages} "
            f"({_fmt_time(best.time_s)})")
    speedup = result.speedup_over_default
    if speedup is None:
        return text + "; default not comparable"
    d = result.default.config
    default = f"default {d.label()} warps {d.num_warps} stages {d.num_stages} " \
              f"({_fmt_time(result.default.time_s)})"
    if speedup > 1.0:
        return text + f"; {100 * (1 - 1 / speedup):.1f}% less time than the {default}"
    return text + f"; the {default} is as fast"


def _trial_json(t: Trial) -> dict:
    return {**t.config.to_json(), "time_s": None if t.error else t.time_s,
            "predicted_time_s": t.estimate.predicted_time_s, "p20_s": t.p20_s,
            "p80_s": t.p80_s, "gb_per_s": None if t.error else t.gb_per_s,
            "fraction_of_peak": None if t.error else t.fraction_of_peak, "error": t.error}


def result_json(result: AutotuneResult, seconds: float) -> dict:
    """One fusion's entry of ``--json`` (``docs/cli.md``)."""
    speedup = result.speedup_over_default
    return {"fusion": result.fusion, "device": result.device, "method": result.method,
            "measured": result.measured, "from_cache": result.from_cache,
            "candidates": len(result.trials), "seconds": round(seconds, 3),
            "winner": result.winner_json() or None,
            "default": None if result.default is None else _trial_json(result.default),
            "improvement_over_default": None if speedup is None else 1 - 1 / speedup,
            "trials": [_trial_json(t) for t in result.trials]}


CSV_COLUMNS = ("fusion", "tile_sizes", "reduction_chunk", "num_warps", "num_stages", "time_s",
               "predicted_time_s", "measured", "gb_per_s", "fraction_of_peak", "winner",
               "default", "error")


def write_csv(results: list[AutotuneResult], out) -> None:
    """Every candidate of every fusion, one row each (``CSV_COLUMNS``)."""
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for result in results:
        best = result.best
        default = result.default.config if result.default is not None else None
        for t in result.trials:
            writer.writerow([result.fusion, "x".join(map(str, t.config.tile_sizes)),
                             t.config.reduction_chunk or "", t.config.num_warps,
                             t.config.num_stages, "" if t.error else f"{t.time_s:.6e}",
                             f"{t.estimate.predicted_time_s:.6e}", int(result.measured),
                             "" if t.error else f"{t.gb_per_s:.4g}",
                             "" if t.error else f"{t.fraction_of_peak:.4g}",
                             int(t is best), int(t.config == default), t.error or ""])


def _pyplot():
    try:
        import matplotlib  # noqa: PLC0415 - optional extra
    except ImportError:
        raise BadArgumentError("--plot needs matplotlib: pip install "
                               "'hlo-triton-fusion[plot]'", where="--plot") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    return plt


def write_plot(results: list[AutotuneResult], path, plt) -> None:
    """Each fusion's candidates, time by rank, winner and default marked."""
    shown = [r for r in results if r.trials]
    fig, axes = plt.subplots(max(1, len(shown)), 1, figsize=(8, 3 * max(1, len(shown))),
                             squeeze=False)
    for ax, result in zip(axes[:, 0], shown):
        ok = [t for t in result.trials if t.error is None]
        ax.plot(range(len(ok)), [t.time_s * 1e6 for t in ok], "o", ms=3, label="candidate")
        if ok:
            ax.plot([0], [ok[0].time_s * 1e6], "*", ms=12, label="winner")
        if result.default is not None and result.default.error is None:
            ax.axhline(result.default.time_s * 1e6, ls="--", color="gray", label="default")
        times = [t.time_s for t in ok]
        if times and max(times) > 10 * min(times):  # a wide spread reads better in log scale
            ax.set_yscale("log")
        ax.set_xlabel("candidate (best first)")
        ax.set_ylabel("time (us)" if result.measured else "predicted time (us)")
        ax.set_title(f"{result.fusion} on {result.device}")
        ax.legend(loc="upper left")
    if not shown:
        axes[0, 0].set_title("no candidates")
    fig.tight_layout()
    with atomic_output(path) as handle:
        fig.savefig(handle, format="png", dpi=100)
    plt.close(fig)


@contextlib.contextmanager
def scheduler_client(address: str | None) -> Iterator[Any]:
    """A ``dask.distributed.Client`` for ``address`` (None: no client), closed afterwards."""
    if address is None:
        yield None
        return
    try:
        from distributed import Client  # noqa: PLC0415 - optional extra
    except ImportError:
        raise BadArgumentError("--scheduler needs dask.distributed: pip install "
                               "'hlo-triton-fusion[distributed]'", where="--scheduler") from None
    try:
        client = Client(address, timeout=30)
    except (OSError, TimeoutError) as err:
        raise FusionCompilerError(f"cannot reach the dask scheduler {address}: {err}",
                                  where="--scheduler") from None
    _log.info("autotune on dask scheduler %s (%d workers)", address,
              len(client.scheduler_info().get("workers", {})))
    try:
        yield client
    finally:
        client.close()


def fused_like_run(module: HloModule) -> HloModule:
    """``module`` when it has fusions; else the module ``run`` and ``compile`` would compile
    (the fusion pass, lone ops wrapped), whose fusions the tuned results then apply to."""
    if module.fusions():
        return module
    fused = compile_hlo(module).module
    _log.info("module %s has no fusions: fused like run (%d fusions)", module.name,
              len(fused.fusions()))
    return fused


def _check_arguments(args: argparse.Namespace) -> None:
    if args.device:
        try:
            device_spec(args.device)
        except ValueError as err:
            raise BadArgumentError(str(err), where="--device") from None
    if args.budget is not None and args.budget < 1:
        raise BadArgumentError("--budget must be at least 1", where="--budget")
    if args.jobs is not None and args.jobs < 1:
        raise BadArgumentError("--jobs must be at least 1", where="--jobs")
    if args.csv == "-" and args.json:
        raise BadArgumentError("--csv - and --json both write to standard output; give --csv "
                               "a FILE", where="--csv")


def run(args: argparse.Namespace) -> int:
    _check_arguments(args)
    csv_path = None if args.csv in (None, "-") else check_output_path(args.csv, "--csv")
    plot_path = check_output_path(args.plot, "--plot") if args.plot else None
    plt = _pyplot() if plot_path is not None else None
    module = fused_like_run(read_verified_module(args.file))
    fusions = [find_fusion(module, args.fusion)] if args.fusion else \
        [instr for _, instr in module.fusions()]
    if not fusions:
        raise FusionCompilerError(f"{args.file} has no fusions to tune", where=args.file)
    results: list[tuple[AutotuneResult, float]] = []
    skipped: list[dict] = []
    text_out = io.StringIO() if args.json or args.csv == "-" else sys.stdout
    start_all = time.perf_counter()
    with scheduler_client(args.scheduler) as client:
        for instr in fusions:
            progress = Progress(f"autotune {instr.name}")
            start = time.perf_counter()
            try:
                result = autotune(module, instr, device=args.device, budget=args.budget,
                                  jobs=args.jobs, force=args.force, progress=progress.update,
                                  on_total=progress.on_total, executor=client)
            except FusionCompilerError as err:
                if args.fusion:
                    raise
                print(f"fusion {instr.name}: skipped: {err}", file=text_out)
                skipped.append({"fusion": instr.name, "error": err.message})
                continue
            finally:
                progress.close()
            seconds = time.perf_counter() - start
            results.append((result, seconds))
            print_result(result, args.top, text_out)
            print(summary_line(result, seconds), file=text_out)
    total_s = time.perf_counter() - start_all
    candidates = sum(len(r.trials) for r, _ in results)
    overall = (f"autotuned {len(results)} fusion(s), {candidates} candidates in {total_s:.1f}s"
               + (f"; {len(skipped)} skipped" if skipped else ""))
    if len(fusions) > 1:
        print(overall, file=text_out)
    plain = [r for r, _ in results]
    if args.csv == "-":
        write_csv(plain, sys.stdout)
    elif csv_path is not None:
        with atomic_output(csv_path, "w") as handle:
            write_csv(plain, handle)
    if plot_path is not None:
        write_plot(plain, plot_path, plt)
    if args.json:
        emit("autotune", {"module": module.name,
                          "fusions": [result_json(r, s) for r, s in results],
                          "skipped": skipped, "summary": overall})
    return 1 if skipped else 0
