"""Time the indexing analysis of generated fusions of 10, 100 and 1000 ops.

Chains of elementwise ops, of reshapes (alternating two shapes) and of transposes, and a
"diamond" chain where every op reads the previous value twice (``add(x, negate(x))``):
naive recomputation of shared producers would take 2**n steps there; the per-instruction
sets keep it linear.  Prints a table; run ``python bench/indexing_scaling.py``.
"""
from __future__ import annotations

import time

from fusion.text.parser import parse_hlo
from tiling.indexing_analysis.fusion_indexing import output_to_input_indexing_of_computation


def _elementwise(n: int) -> list[str]:
    lines = ["v0 = f32[64,32] parameter(0)"]
    lines += [f"v{i} = f32[64,32] {'negate' if i % 2 else 'exponential'}(v{i - 1})"
              for i in range(1, n + 1)]
    return lines


def _reshape(n: int) -> list[str]:
    shapes = ("f32[64,32]", "f32[8,8,32]")
    lines = [f"v0 = {shapes[0]} parameter(0)"]
    lines += [f"v{i} = {shapes[i % 2]} reshape(v{i - 1})" for i in range(1, n + 1)]
    return lines


def _transpose(n: int) -> list[str]:
    shapes = ("f32[16,32,8]", "f32[32,8,16]")
    lines = [f"v0 = {shapes[0]} parameter(0)"]
    lines += [f"v{i} = {shapes[i % 2]} transpose(v{i - 1}), dimensions={{1,2,0}}"
              if i % 2 else f"v{i} = {shapes[0]} transpose(v{i - 1}), dimensions={{2,0,1}}"
              for i in range(1, n + 1)]
    return lines


def _diamond(n: int) -> list[str]:
    lines = ["v0 = f32[64,32] parameter(0)"]
    for i in range(1, n + 1, 2):
        lines.append(f"v{i} = f32[64,32] negate(v{i - 1})")
        lines.append(f"v{i + 1} = f32[64,32] add(v{i - 1}, v{i})")
    return lines


GENERATORS = {"elementwise": _elementwise, "reshape": _reshape, "transpose": _transpose,
              "diamond": _diamond}


def build(kind: str, n: int):
    lines = GENERATORS[kind](n)
    lines[-1] = "ROOT " + lines[-1]
    text = "HloModule m\nf {\n  " + "\n  ".join(lines) + "\n}\n"
    root_shape = lines[-1].split("=")[1].split()[0]
    text += f"ENTRY e {{\n  x = {lines[0].split()[2]} parameter(0)\n"
    text += f"  ROOT r = {root_shape} fusion(x), kind=kLoop, calls=f\n}}\n"
    return parse_hlo(text)


def time_analysis(kind: str, n: int) -> tuple[float, int]:
    module = build(kind, n)
    start = time.perf_counter()
    maps = output_to_input_indexing_of_computation(module.computation("f"), module)
    elapsed = time.perf_counter() - start
    return elapsed, len(maps["v0"])


def main(sizes=(10, 100, 1000)) -> None:
    print(f"{'chain':<12}" + "".join(f"{n:>12}" for n in sizes) + f"{'maps':>8}")
    for kind in GENERATORS:
        cells, count = [], 0
        for n in sizes:
            seconds, count = time_analysis(kind, n)
            cells.append(f"{seconds * 1000:>10.1f}ms")
        print(f"{kind:<12}" + "".join(cells) + f"{count:>8}")


if __name__ == "__main__":
    main()
