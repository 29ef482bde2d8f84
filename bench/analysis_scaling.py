"""Indexing analysis plus tile analysis time for generated fusions of 10, 100 and 1000 ops.

Reuses the chains of ``bench/indexing_scaling.py`` (elementwise, reshape, transpose,
diamond); for each it times the indexing analysis (as that script does), the symbolic tile
analysis (``tiling.symbolic.tiled_fusion.analyze_fusion_tiling``) and the enumeration of legal tilings
with their costs (``tiling.policy.candidates``).

    python bench/analysis_scaling.py [SIZES...]
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from indexing_scaling import GENERATORS, build, time_analysis  # noqa: E402
from tiling.symbolic.tiled_fusion import analyze_fusion_tiling  # noqa: E402
from tiling.policy.candidates import report_for  # noqa: E402


def time_tiling(kind: str, n: int) -> tuple[float, float, int]:
    """Seconds of the symbolic tile analysis and of the candidate enumeration, and the
    number of legal tilings."""
    module = build(kind, n)
    fusion = module.entry.root
    start = time.perf_counter()
    analysis = analyze_fusion_tiling(module, fusion)
    symbolic = time.perf_counter() - start
    start = time.perf_counter()
    report = report_for(analysis)
    candidates = time.perf_counter() - start
    return symbolic, candidates, len(report.legal)


def main(sizes=(10, 100, 1000)) -> int:
    print(f"{'chain':<12}{'ops':>6}{'indexing':>12}{'tile analysis':>15}{'tilings':>12}"
          f"{'total':>12}{'legal':>7}")
    for kind in GENERATORS:
        for n in sizes:
            indexing, _ = time_analysis(kind, n)
            symbolic, candidates, legal = time_tiling(kind, n)
            total = indexing + symbolic + candidates
            print(f"{kind:<12}{n:>6}{indexing * 1e3:>10.1f}ms{symbolic * 1e3:>13.1f}ms"
                  f"{candidates * 1e3:>10.1f}ms{total * 1e3:>10.1f}ms{legal:>7}")
    return 0


if __name__ == "__main__":
    sys.exit(main(tuple(int(a) for a in sys.argv[1:]) or (10, 100, 1000)))
