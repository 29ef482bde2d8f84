"""Fuzz the front end with N mutated real modules and count the outcomes.

Each case (``tests.fuzz.mutations``) runs parse -> verify -> print/parse round trip -> layouts
-> evaluate -> indexing analysis -> the ``check``/``evaluate``/``indexing``/``layout`` commands
(``tests.fuzz.fuzz_pipeline``).  Every outcome must be success or one of the project's errors
with a location; anything else is a CRASH (or ROUNDTRIP / TIMEOUT) and its reproducer is
printed.  ``--stages tile,compile,run`` also runs, on modules that passed the front end,
``tiling.policy.candidates.tiling_candidates`` on every fusion, ``triton_backend.compile_hlo``,
and a run under the interpreter compared with the reference evaluator
(``tests.fuzz.backend_stages``): a wrong result is a defect (``WRONG``), like a crash or a hang.
``ok`` then means accepted and correct; ``NOT_RUN`` compiled but too large to run in a case.

    python bench/fuzz_frontend.py                  # 10,000 cases, seed 0
    python bench/fuzz_frontend.py --count 500 --seed 3 --show 5
    python bench/fuzz_frontend.py --count 2000 --stages tile,compile,run --timeout 5
"""
from __future__ import annotations

import argparse
import importlib
import sys
import time
import warnings
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fuzz.fuzz_pipeline import (
    FAILURES,
    frontend_stages,
    run_pipeline,
    with_extra_stages,
)
from tests.fuzz.mutations import generate

MAIN_KINDS = ("ok", "NOT_RUN", "HloParseError", "HloVerifyError", "EvaluationError",
              "UnsupportedOpError")
STAGE_NAMES = ("tile", "compile", "run")


def _stages(names: list[str]):
    if not names:
        return frontend_stages
    # Imported only when asked for: the front end alone needs neither torch nor triton.
    backend = importlib.import_module("tests.fuzz.backend_stages")
    return with_extra_stages(backend.backend_stages(names))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=10_000, help="number of cases")
    parser.add_argument("--seed", type=int, default=0, help="seed of the mutations")
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per case")
    parser.add_argument("--show", type=int, default=3, help="crash reproducers to print")
    parser.add_argument("--stages", default="",
                        help="extra stages after the front end, comma-separated: "
                             "tile,compile,run")
    args = parser.parse_args(argv)
    names = [n for n in args.stages.split(",") if n]
    unknown = [n for n in names if n not in STAGE_NAMES]
    if unknown:
        parser.error(f"unknown stage(s) {', '.join(unknown)}; known: {', '.join(STAGE_NAMES)}")
    stages = _stages(names)
    # Mutated modules divide by zero and overflow on purpose; NumPy (evaluator, interpreter)
    # says so for every case.  The outcome, not the warning, is what is counted.
    warnings.filterwarnings("ignore", category=RuntimeWarning)
    # Reproducers hold hostile characters (lone surrogates among them): print them escaped.
    sys.stdout.reconfigure(errors="backslashreplace")

    counts: Counter[str] = Counter()
    others: Counter[str] = Counter()
    by_stage: Counter[str] = Counter()
    by_mutation: Counter[str] = Counter()
    failures = []
    start = time.perf_counter()
    for case in generate(args.count, seed=args.seed):
        outcome = run_pipeline(case.text, timeout_s=args.timeout, stages=stages)
        by_stage[f"{outcome.kind} at {outcome.stage}"] += 1
        if outcome.kind in MAIN_KINDS or outcome.kind in FAILURES:
            counts[outcome.kind] += 1
        else:
            counts["other project errors"] += 1
            others[outcome.kind] += 1
        if outcome.failed:
            failures.append((case, outcome))
            by_mutation.update(case.mutations)
    elapsed = time.perf_counter() - start

    print(f"{args.count} mutations (seed {args.seed}) in {elapsed:.1f} s")
    for kind in MAIN_KINDS + ("other project errors",) + FAILURES:
        extra = ""
        if kind == "other project errors" and others:
            extra = "  (" + ", ".join(f"{k}: {v}" for k, v in others.most_common()) + ")"
        print(f"  {kind:22s} {counts[kind]:6d}{extra}")
    print("by stage: " + ", ".join(f"{k}: {v}" for k, v in sorted(by_stage.items())))
    if by_mutation:
        print("failures by mutation: " + ", ".join(f"{k}: {v}" for k, v in by_mutation.most_common()))
    for case, outcome in failures[: args.show]:
        print(f"\n=== case {case.index} ({case.source}, mutations {list(case.mutations)}): "
              f"{outcome.kind} at {outcome.stage}")
        print(outcome.detail.rstrip())
        print("--- reproducer ---")
        print(case.text)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
