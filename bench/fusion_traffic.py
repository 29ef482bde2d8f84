"""Modeled memory traffic of every corpus program, unfused against fused.

For each ``tests/data/hlo/NAME.before.hlo``: kernels and bytes read+written by kernels
(``tiling.fusion_pass.traffic_model``) of the module as JAX lowers it, of our fused module, and
the fusion count of XLA CPU's optimized module (``NAME.after.hlo``) as a reference point.

    python bench/fusion_traffic.py [DIR]
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

from fusion.text.parser import parse_hlo
from tiling.fusion_pass.traffic_model import count_kernels, module_traffic
from tiling.fusion_pass.priority_fusion import fuse_module

CORPUS = Path(__file__).resolve().parents[1] / "tests" / "data" / "hlo"


def rows(corpus: Path = CORPUS):
    """(name, unfused kernels, unfused bytes, fused kernels, fused bytes, XLA CPU kernels,
    seconds to fuse) per program."""
    for path in sorted(corpus.glob("*.before.hlo")):
        name = path.name[: -len(".before.hlo")]
        module = parse_hlo(path.read_text())
        start = time.perf_counter()
        fused = fuse_module(module).module
        seconds = time.perf_counter() - start
        after = path.with_name(name + ".after.hlo")
        xla = count_kernels(parse_hlo(after.read_text())) if after.exists() else None
        yield (name, count_kernels(module), module_traffic(module), count_kernels(fused),
               module_traffic(fused), xla, seconds)


def main(argv: list[str]) -> int:
    corpus = Path(argv[0]) if argv else CORPUS
    header = (f"{'program':22} {'kernels':>8} {'bytes':>9} {'fused':>6} {'bytes':>9} "
              f"{'saved':>6} {'xla-cpu':>7} {'ms':>7}")
    print(header)
    total_before = total_after = 0
    for name, k0, b0, k1, b1, xla, seconds in rows(corpus):
        total_before += b0
        total_after += b1
        saved = f"{100 * (b0 - b1) / b0:5.1f}%" if b0 else "   -  "
        print(f"{name:22} {k0:8} {b0:9} {k1:6} {b1:9} {saved:>6} "
              f"{'-' if xla is None else xla:>7} {seconds * 1000:7.1f}")
    if total_before:
        print(f"{'total':22} {'':8} {total_before:9} {'':6} {total_after:9} "
              f"{100 * (total_before - total_after) / total_before:5.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
