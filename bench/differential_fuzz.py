"""Differential fuzzing against XLA: random valid JAX programs through XLA, the reference
evaluator and ``compile_hlo`` (under the interpreter), and a count of the verdicts.

Each program (``tests.fuzz.random_programs``) is lowered twice: as JAX writes it (``before``,
fused by our pass) and as XLA's CPU pipeline optimizes it (``after``, XLA's fusions and
layouts).  A verdict other than ``ok`` or ``REFUSED`` (a located project error) is a defect:
``EVALUATOR`` (the evaluator disagrees with XLA), ``WRONG`` (our kernels do) or ``CRASH``; its
module text is written to ``--out`` so it can be replayed with ``fusion-compile run --check``.

    python bench/differential_fuzz.py                        # 200 programs from seed 0
    python bench/differential_fuzz.py --count 2000 --seed 1000 --out /tmp/diff
    python bench/differential_fuzz.py --large --count 200    # looped and split reductions
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ.setdefault("TRITON_INTERPRET", "1")  # kernels run on CPU tensors

from tests.fuzz.differential import VERDICTS, check_program  # noqa: E402
from tests.fuzz.random_programs import LARGE, random_program  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=200, help="number of programs")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first program")
    parser.add_argument("--steps", type=int, default=8, help="most operations per program")
    parser.add_argument("--large", action="store_true",
                        help="longer rows (to 2050) and values of up to 65,536 elements: looped "
                             "and split reductions, many tiles per kernel")
    parser.add_argument("--variants", default="before,after",
                        help="module texts to try: before (JAX's), after (XLA-optimized)")
    parser.add_argument("--out", type=Path, default=None,
                        help="folder for the module text of every defect")
    parser.add_argument("--show", type=int, default=5, help="defects to print in full")
    args = parser.parse_args(argv)
    variants = tuple(v for v in args.variants.split(",") if v)
    counts: Counter = Counter()
    shown = 0
    start = time.perf_counter()
    for n, seed in enumerate(range(args.seed, args.seed + args.count)):
        if n and n % 100 == 0:
            print(f"... {n} programs in {time.perf_counter() - start:.0f} s", flush=True)
        program = random_program(seed, args.steps, LARGE if args.large else None)
        for verdict in check_program(program, variants):
            counts[verdict.variant, verdict.kind] += 1
            if verdict.kind == "ok":
                continue
            if verdict.kind == "REFUSED":  # allowed, but a gap to know: one line
                print(f"seed {seed} {verdict.variant}: REFUSED {verdict.detail[:300]}", flush=True)
                continue
            print(f"seed {seed} {verdict.variant}: {verdict.kind}", flush=True)
            if shown < args.show:
                print(verdict.detail, flush=True)
                shown += 1
            if args.out is not None:
                args.out.mkdir(parents=True, exist_ok=True)
                (args.out / f"seed{seed}.{verdict.variant}.{verdict.kind}.hlo").write_text(
                    verdict.text)
    print(f"\n{args.count} programs (seeds {args.seed}..{args.seed + args.count - 1}) in "
          f"{time.perf_counter() - start:.1f} s")
    print(f"{'verdict':<10}" + "".join(f"{v:>10}" for v in variants))
    for kind in VERDICTS:
        print(f"{kind:<10}" + "".join(f"{counts[v, kind]:>10}" for v in variants))
    defects = sum(n for (_, kind), n in counts.items() if kind not in ("ok", "REFUSED"))
    return 1 if defects else 0


if __name__ == "__main__":
    sys.exit(main())
