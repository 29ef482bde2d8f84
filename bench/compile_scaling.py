"""How compile time grows with module size: per phase, on generated chains and a real model.

Generated unfused modules (``chain_module``) of N ops in the ENTRY computation:

* ``elementwise``: ``v[i] = negate(v[i-1])``;
* ``reshape``: reshapes through ``f32[8,16]``, ``f32[128]``, ``f32[4,32]``, ``f32[16,8]``,
  a negate after each (canonicalization would fold a reshape of a reshape);
* ``transpose``: ``f32[8,16] <-> f32[16,8]`` transposes, a negate after each;
* ``diamond``: ``a = negate(x); x' = add(x, a)`` (every value read twice);
* ``wide-diamond``: ``x`` read by 8 branches (negate, abs, ...) summed back into one value;

and a real JAX training step (a two-layer transformer's forward, backward and SGD update,
``bench/programs/training/transformer_train_step.hlo``, written by
``bench/programs/generate.py --training-step``).

Phases, each timed alone (min of ``--repeat`` runs): ``parse`` (text -> module), ``fuse``
(``tiling.fusion_pass.priority_fusion.fuse_module``), ``indexing`` (the output->input maps of every
fused computation), ``tiling`` (the tile analysis and the tiling choice of every fusion),
``codegen`` (every fusion's kernel file text), and ``compile_hlo`` cold (fresh kernel cache,
the whole chain, kernels loaded for the Triton interpreter: no Triton compile) and warm
(again in the same process, when ``triton_backend.driver`` has a compiled-module cache;
else ``n/a``).  ``kernel_import`` is the part of the cold compile spent importing the kernel
files: Python compiling each module, Triton's ``@triton.jit`` reading its source, and the
Triton interpreter's rewrite of each kernel (on a GPU, Triton's own compile comes on top at
the first launch); ``ours`` is ``compile_cold`` without it: the compiler's own time, which
the issue's target (a 20,000-op chain in under 30 s) is about.  Prints a table; ``--csv FILE`` writes the rows, ``--png FILE`` a log-log
plot of seconds per phase against ops with the fitted slope per phase (matplotlib).

``--cpu`` prints instead the issue's own measure, one row per kind and size: the kernels a
cold ``compile_hlo`` generates and the CPU seconds it takes (``time.process_time``, so other
load on the machine does not count), each in a fresh process on fresh, empty kernel and
module caches (``FUSION_KERNEL_CACHE_DIR``, ``FUSION_MODULE_CACHE_DIR``), generating and
importing every kernel file; then the fitted slope (1: linear).

    python bench/compile_scaling.py [--sizes 100 1000 5000 20000] [--kinds ...] [--csv F]
                                    [--png F] [--no-compile] [--repeat R]
    python bench/compile_scaling.py --cpu [--sizes 5000 10000 20000] [--kinds elementwise]
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")  # kernels load for the interpreter: no GPU

from fusion.ir.hlo_module import HloModule  # noqa: E402
from fusion.text.parser import parse_hlo  # noqa: E402
from tiling.indexing_analysis.fusion_indexing import (  # noqa: E402
    output_to_input_indexing_of_computation,
)
from tiling.fusion_pass.priority_fusion import fuse_module  # noqa: E402

HERE = Path(__file__).resolve().parent
TRAINING_STEP = HERE / "programs" / "training" / "transformer_train_step.hlo"
SIZES = (100, 1000, 5000, 20000)
CPU_SIZES = (5000, 10000, 20000)  # --cpu: the 20,000-op chain and two halvings
PHASES = ("parse", "fuse", "indexing", "tiling", "codegen", "compile_cold", "kernel_import",
          "ours", "compile_warm")

_RESHAPE_SHAPES = ("f32[8,16]", "f32[128]", "f32[4,32]", "f32[16,8]")
_BRANCH_OPS = ("negate", "abs", "floor", "ceil", "sign", "negate", "abs", "floor")


def _elementwise(n: int) -> list[str]:
    return [f"v{i} = f32[8,16] negate(v{i - 1})" for i in range(1, n + 1)]


def _reshape(n: int) -> list[str]:
    # A negate between reshapes: canonicalization folds a reshape of a reshape into one.
    return [f"v{i} = {_RESHAPE_SHAPES[((i + 1) // 2) % 4]} "
            + (f"reshape(v{i - 1})" if i % 2 else f"negate(v{i - 1})") for i in range(1, n + 1)]


def _transpose(n: int) -> list[str]:
    # A negate between transposes: canonicalization folds a transpose of a transpose.
    return [f"v{i} = f32[{'16,8' if ((i + 1) // 2) % 2 else '8,16'}] "
            + (f"transpose(v{i - 1}), dimensions={{1,0}}" if i % 2 else f"negate(v{i - 1})")
            for i in range(1, n + 1)]


def _diamond(n: int) -> list[str]:
    lines, v = [], 0
    while len(lines) + 2 <= n:
        lines.append(f"a{v} = f32[8,16] negate(v{v})")
        lines.append(f"v{v + 1} = f32[8,16] add(v{v}, a{v})")
        v += 1
    return lines


def _wide_diamond(n: int) -> list[str]:
    width = len(_BRANCH_OPS)
    lines, v = [], 0
    while len(lines) + 2 * width <= n:
        branches = [f"b{v}_{k}" for k in range(width)]
        lines += [f"{b} = f32[8,16] {op}(v{v})" for b, op in zip(branches, _BRANCH_OPS)]
        acc = branches[0]
        for k in range(1, width):
            out = f"v{v + 1}" if k == width - 1 else f"s{v}_{k}"
            lines.append(f"{out} = f32[8,16] add({acc}, {branches[k]})")
            acc = out
        v += 1
    return lines


GENERATORS = {"elementwise": _elementwise, "reshape": _reshape, "transpose": _transpose,
              "diamond": _diamond, "wide-diamond": _wide_diamond}


def chain_text(kind: str, n: int) -> str:
    """HLO text of an unfused ENTRY computation: a parameter and about ``n`` ops of ``kind``.

    >>> print(chain_text("elementwise", 2))
    HloModule elementwise_2
    ENTRY main {
      v0 = f32[8,16] parameter(0)
      v1 = f32[8,16] negate(v0)
      ROOT v2 = f32[8,16] negate(v1)
    }
    """
    lines = ["v0 = f32[8,16] parameter(0)"] + GENERATORS[kind](n)
    lines[-1] = "ROOT " + lines[-1]
    return f"HloModule {kind.replace('-', '_')}_{n}\nENTRY main {{\n  " + "\n  ".join(lines) \
        + "\n}"


def fused_chain_text(kind: str, n: int) -> str:
    """The same chain as one fused computation that a ``kLoop`` fusion calls: one kernel of
    ``n`` ops, deeper than the fusion pass would ever make (its member limit)."""
    lines = ["v0 = f32[8,16] parameter(0)"] + GENERATORS[kind](n)
    lines[-1] = "ROOT " + lines[-1]
    shape = lines[-1].split(" = ")[1].split()[0]
    return (f"HloModule fused_{kind.replace('-', '_')}_{n}\nchain {{\n  " + "\n  ".join(lines)
            + "\n}\nENTRY main {\n  x = f32[8,16] parameter(0)\n"
            + f"  ROOT f = {shape} fusion(x), kind=kLoop, calls=chain\n}}")


def chain_module(kind: str, n: int) -> HloModule:
    """``chain_text(kind, n)`` parsed."""
    return parse_hlo(chain_text(kind, n))


def fusions_of(module: HloModule) -> list:
    """The fusions the index-expression emitter compiles (templates' are left out: their
    kernels come from ``triton_backend/templates``)."""
    from triton_backend.driver.compiled_fusion import (
        SPECIAL_FUSIONS,
        SUPPORTED_KINDS,
        emitter_analysis,
    )

    return [(module, i) for c in module.computations for i in c.instructions
            if i.opcode == "fusion" and not any(p(module, i) for _, p, _ in SPECIAL_FUSIONS)
            and emitter_analysis(module, i).kind in SUPPORTED_KINDS]


def phase_indexing(fusions: list) -> None:
    for module, instr in fusions:
        output_to_input_indexing_of_computation(module.computation(instr.attr("calls")), module)


def phase_tiling(fusions: list) -> list:
    from triton_backend.driver.compiled_fusion import choose_fusion_tiling

    return [choose_fusion_tiling(m, i, None, None) for m, i in fusions]


def phase_codegen(fusions: list, tilings: list) -> None:
    from triton_backend.driver.compiled_fusion import emitter_analysis
    from triton_backend.lowering.kernel_file import render_kernel_file

    for (m, instr), (tiles, chunk, _) in zip(fusions, tilings):
        kind = emitter_analysis(m, instr).kind
        render_kernel_file(m, instr, tiles, kind, reduction_chunk=chunk)


def _timed(fn, repeat: int):
    best, result = math.inf, None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def measure(text: str, *, repeat: int = 1, compile_: bool = True) -> dict[str, float | None]:
    """Seconds per phase for one module's text (None: not measured or not available)."""
    from triton_backend.driver import module_compiler

    out: dict[str, float | None] = dict.fromkeys(PHASES)
    out["parse"], module = _timed(lambda: parse_hlo(text), repeat)
    out["fuse"], fused = _timed(lambda: fuse_module(module).module, repeat)
    fusions = fusions_of(fused)
    out["indexing"], _ = _timed(lambda: phase_indexing(fusions), repeat)
    out["tiling"], tilings = _timed(lambda: phase_tiling(fusions), repeat)
    out["codegen"], _ = _timed(lambda: phase_codegen(fusions, tilings), repeat)
    if compile_:
        previous = os.environ.get("FUSION_KERNEL_CACHE_DIR")
        with tempfile.TemporaryDirectory() as cache:
            os.environ["FUSION_KERNEL_CACHE_DIR"] = cache  # cold: no kernel file exists yet
            with _timing_kernel_imports() as imports:
                start = time.perf_counter()
                module_compiler.compile_hlo(text)
                out["compile_cold"] = time.perf_counter() - start
            out["kernel_import"] = imports[0]
            out["ours"] = out["compile_cold"] - imports[0]
            if _has_module_cache(module_compiler):
                out["compile_warm"], _ = _timed(lambda: module_compiler.compile_hlo(text), repeat)
        if previous is None:
            os.environ.pop("FUSION_KERNEL_CACHE_DIR", None)
        else:
            os.environ["FUSION_KERNEL_CACHE_DIR"] = previous
    return out


@contextlib.contextmanager
def _timing_kernel_imports():
    """Seconds spent in ``kernel_cache.import_checked_text`` while the block runs (a list
    of one float, filled in as imports happen)."""
    from triton_backend.runtime import kernel_cache

    spent = [0.0]
    original = kernel_cache.import_checked_text

    def timed(*args, **kwargs):
        start = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - start

    kernel_cache.import_checked_text = timed
    try:
        yield spent
    finally:
        kernel_cache.import_checked_text = original


def _has_module_cache(module_compiler) -> bool:
    import triton_backend.driver as driver

    return any("module_cache" in name for name in dir(driver)) or any(
        "module_cache" in name for name in dir(module_compiler))


def cpu_compile(kind: str, n: int) -> tuple[int, float]:
    """(kernel files generated, CPU seconds) of a cold ``compile_hlo`` of ``chain_text(kind,
    n)``, measured in this process on fresh, empty kernel and module caches."""
    from triton_backend.driver import module_compiler

    text = chain_text(kind, n)
    with tempfile.TemporaryDirectory() as kernels, tempfile.TemporaryDirectory() as plans, \
            _environment(FUSION_KERNEL_CACHE_DIR=kernels, FUSION_MODULE_CACHE_DIR=plans):
        start = time.process_time()
        module_compiler.compile_hlo(text)
        seconds = time.process_time() - start
        return len(list(Path(kernels).glob("kernel_*.py"))), seconds


@contextlib.contextmanager
def _environment(**values: str):
    """``os.environ`` with ``values`` set while the block runs, as it was after."""
    previous = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def cpu_compile_in_child(kind: str, n: int) -> tuple[int, float]:
    """``cpu_compile`` in a new Python process: no earlier compile's heap, caches or imports
    of kernels change the measure.  The child imports this checkout's packages."""
    import fusion

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(Path(fusion.__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, __file__, "--cpu-child", kind, str(n)], env=env,
                         check=True, capture_output=True, text=True).stdout.split()
    return int(out[-2]), float(out[-1])


def cpu_table(kinds: list[str], sizes: list[int], measure=cpu_compile_in_child) -> list[dict]:
    """Print and return the ``--cpu`` rows: kind, ops, kernels, CPU seconds, ms per op."""
    print(f"{'kind':13} {'ops':>6} {'kernels':>8} {'CPU s':>8} {'ms/op':>7}")
    rows = []
    for kind in kinds:
        for n in sizes:
            kernels, seconds = measure(kind, n)
            rows.append({"kind": kind, "ops": n, "kernels": kernels, "cpu_s": seconds})
            print(f"{kind:13} {n:>6} {kernels:>8} {seconds:>8.2f} {1e3 * seconds / n:>7.3f}",
                  flush=True)
        slope = fitted_slope(sizes, [r["cpu_s"] for r in rows if r["kind"] == kind])
        if slope is not None:
            print(f"  {kind}: fitted slope of log(CPU s) against log(ops) {slope:.2f}")
    return rows


def fitted_slope(sizes: list[int], seconds: list[float]) -> float | None:
    """Least-squares slope of log(seconds) against log(size): 1 is linear, 2 quadratic.

    >>> round(fitted_slope([10, 100, 1000], [1.0, 10.0, 100.0]), 6)
    1.0
    """
    points = [(math.log(n), math.log(s)) for n, s in zip(sizes, seconds) if s and s > 0]
    if len(points) < 2:
        return None
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    sxx = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else None


def _cell(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="*", type=int)
    parser.add_argument("--kinds", nargs="*")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--no-compile", action="store_true", help="skip compile_hlo")
    parser.add_argument("--csv", type=Path)
    parser.add_argument("--png", type=Path)
    parser.add_argument("--cpu", action="store_true",
                        help="cold compile_hlo CPU seconds and kernels per kind and size")
    parser.add_argument("--cpu-child", nargs=2, metavar=("KIND", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.cpu_child:
        kernels, seconds = cpu_compile(args.cpu_child[0], int(args.cpu_child[1]))
        print(kernels, seconds)
        return 0
    if args.cpu:
        rows = cpu_table(args.kinds or ["elementwise"], args.sizes or list(CPU_SIZES))
        if args.csv:
            with args.csv.open("w", newline="") as fh:
                writer = csv.DictWriter(fh, ["kind", "ops", "kernels", "cpu_s"])
                writer.writeheader()
                writer.writerows(rows)
        return 0
    args.sizes = args.sizes or list(SIZES)
    args.kinds = args.kinds or list(GENERATORS) + ["training-step"]
    sys.setrecursionlimit(1000)  # the default: a walk that recursed would fail here
    rows: list[dict] = []
    print(f"{'kind':13} {'ops':>6} " + " ".join(f"{p:>12}" for p in PHASES)
          + f" {'us/op fuse':>10}")
    for kind in args.kinds:
        if kind == "training-step":
            if not TRAINING_STEP.exists():
                print(f"{kind}: {TRAINING_STEP} missing (generate.py --training-step)")
                continue
            texts = [(TRAINING_STEP.read_text(), None)]
        else:
            texts = [(chain_text(kind, n), n) for n in args.sizes]
        for text, n in texts:
            ops = n if n is not None else text.count(" = ")
            times = measure(text, repeat=args.repeat, compile_=not args.no_compile)
            row = {"kind": kind, "ops": ops, **times}
            rows.append(row)
            print(f"{kind:13} {ops:>6} " + " ".join(f"{_cell(times[p]):>12}" for p in PHASES)
                  + f" {1e6 * times['fuse'] / ops:>10.1f}", flush=True)
    print("\nfitted slope of log(seconds) against log(ops), per kind and phase:")
    for kind in args.kinds:
        kind_rows = [r for r in rows if r["kind"] == kind]
        if len(kind_rows) < 2:
            continue
        slopes = {p: fitted_slope([r["ops"] for r in kind_rows], [r[p] for r in kind_rows])
                  for p in PHASES}
        print(f"  {kind:13} " + " ".join(f"{p}={'n/a' if s is None else f'{s:.2f}'}"
                                          for p, s in slopes.items()))
    if args.csv:
        with args.csv.open("w", newline="") as fh:
            writer = csv.DictWriter(fh, ["kind", "ops", *PHASES])
            writer.writeheader()
            writer.writerows(rows)
    if args.png:
        _plot(rows, args.kinds, args.png)
    return 0


def _plot(rows: list[dict], kinds: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    chain_kinds = [k for k in kinds if len([r for r in rows if r["kind"] == k]) >= 2]
    fig, axes = plt.subplots(1, max(1, len(chain_kinds)), figsize=(4 * max(1, len(chain_kinds)),
                                                                   4), squeeze=False)
    for ax, kind in zip(axes[0], chain_kinds):
        kind_rows = [r for r in rows if r["kind"] == kind]
        for phase in PHASES:
            pts = [(r["ops"], r[phase]) for r in kind_rows if r[phase]]
            if len(pts) < 2:
                continue
            slope = fitted_slope([p[0] for p in pts], [p[1] for p in pts])
            ax.loglog([p[0] for p in pts], [p[1] for p in pts], marker="o",
                      label=f"{phase} (slope {slope:.2f})")
        ax.set_title(kind)
        ax.set_xlabel("ops")
        ax.set_ylabel("seconds")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    sys.exit(main())
