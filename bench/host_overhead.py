"""Host time per call of a compiled module, with every kernel launch replaced by a no-op.

A call's time as a user feels it is the GPU's work plus the Python around it; this measures
the Python: per program of ``bench/programs/`` (or the files given), ``compile_hlo`` once, then
every kernel's launch (``KERNEL[GRID](...)`` in its kernel file) is stubbed and the call is
timed (the minimum over repeats of the mean of many calls), with the Python function calls per
call (``sys.setprofile``), and the same for the module as a torch op (``torch_op``, its
launches stubbed too: its cost over ``compile_hlo``'s call).  ``floor_us`` is what no wrapper can go below, measured in the same
run: a plain function taking the same tensors and allocating the same final outputs with
``torch.empty``, nothing else.  Runs on CPU (kernels under the interpreter are stubbed too);
on a GPU the stubs make it the host part of a call.

    python bench/host_overhead.py [--json] [--calls N] [FILES...]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

def _interpret_without_a_gpu() -> None:
    """The interpreter where no GPU is (so kernel files load); a GPU's own launches otherwise."""
    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

DEFAULT_PROGRAMS = sorted(str(p) for p in (ROOT / "bench" / "programs").glob("*.hlo"))


def _inputs(module, device="cpu"):
    import torch
    from triton_backend.host.input_validation import TORCH_DTYPES

    return [torch.zeros(p.shape.dims, dtype=TORCH_DTYPES[p.shape.dtype], device=device)
            for p in module.entry.parameters]


def _per_call(function, args, calls: int, repeats: int = 5) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            function(*args)
        best = min(best, (time.perf_counter() - start) / calls)
    return best * 1e6


def _python_calls(function, args) -> int:
    count = 0

    def profile(frame, event, arg):
        nonlocal count
        if event == "call":
            count += 1

    sys.setprofile(profile)
    try:
        function(*args)
    finally:
        sys.setprofile(None)
    return count


def measure(path: str, calls: int) -> dict:
    import torch
    from fusion.ir.shape import flatten_shape
    from fusion.text.parser import parse_hlo
    from triton_backend import compile_hlo, torch_op
    from triton_backend.host.input_validation import TORCH_DTYPES
    from triton_backend.reports.launch_stubs import stub_launches

    text = Path(path).read_text()
    module = parse_hlo(text)
    compiled = compile_hlo(module)
    stub_launches(compiled)
    # The torch op compiles its own module (same kernel files): stub that one's launches too.
    op = torch_op(text, name=f"host_overhead_{len(_OPS)}", backward=None)
    _OPS.append(op)
    stub_launches(op.compiled)
    args = _inputs(module, compiled.device)
    outputs = [(tuple(s.dims), TORCH_DTYPES[s.dtype]) for s in flatten_shape(module.entry.root.shape)]

    def floor(*tensors):
        return tuple(torch.empty(dims, dtype=dtype, device=compiled.device)
                     for dims, dtype in outputs)

    for _ in range(20):
        compiled(*args)
        op(*args)
    return {"program": Path(path).stem, "kernels": len(compiled.fusions),
            "host_us_per_call": round(_per_call(compiled, args, calls), 2),
            "python_calls_per_call": _python_calls(compiled, args),
            "torch_op_us_per_call": round(_per_call(op, args, calls), 2),
            "torch_op_python_calls_per_call": _python_calls(op, args),
            "floor_us": round(_per_call(floor, args, calls), 2)}


#: The torch ops registered in this process (a registration lives as long as the process).
_OPS: list = []


def _program_path(given: str) -> str:
    """``given`` when it is a file, else the bench program of that name.

    >>> Path(_program_path("softmax_f32_4096x1024")).name
    'softmax_f32_4096x1024.hlo'
    """
    named = ROOT / "bench" / "programs" / f"{given}.hlo"
    return str(named) if not Path(given).is_file() and named.is_file() else given


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("programs", nargs="*",
                        help="HLO files, or names of bench/programs (default: all of them)")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--json", action="store_true", help="one JSON document with the rows")
    args = parser.parse_args(argv)
    paths = [_program_path(p) for p in args.programs] or DEFAULT_PROGRAMS
    missing = [p for p in paths if not Path(p).is_file()]
    if missing:
        parser.error(f"no such HLO file or bench program: {', '.join(missing)}")
    _interpret_without_a_gpu()
    rows = []
    for path in paths:
        row = measure(path, args.calls)
        rows.append(row)
        if not args.json:
            print(f"{row['program']:40} {row['kernels']:>3} kernels {row['host_us_per_call']:>8.1f} us"
                  f" {row['python_calls_per_call']:>5} calls  torch op"
                  f" {row['torch_op_us_per_call']:>6.1f} us {row['torch_op_python_calls_per_call']:>5}"
                  f" calls  floor {row['floor_us']:>6.1f} us", flush=True)
    if args.json:
        print(json.dumps({"rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
