"""The call paths that only a GPU exercises, checked against the plain call on the same inputs.

Without a GPU these paths are no-ops or never chosen, so the test suite cannot check them;
this script is what a GPU session runs first (``bench/gpu_session.sh``).  Per program (default:
the bench programs with dots or attention, and a few corpus programs), the module is compiled
once plainly and once per variant, every variant is called on the same random inputs (three
calls with fresh inputs each, so a CUDA graph's replays see new arguments), and each output is
compared with the plain call's:

* ``cuda_graph``: ``compile_hlo(cuda_graph=True)``, replayed launches; the same kernels, so
  the results must be bit-identical (NaN where the plain call has NaN);
* ``reuse_outputs``: ``cuda_graph="reuse-outputs"``, bit-identical too;
* ``torch_op``: the module as a torch op (its plain eager call skips the dispatcher), bit-identical;
* ``dot_library``: ``dot_library="always"`` (plain dots as ``torch.einsum``, cuBLAS on a GPU),
  within the output type's tolerance (``output_check.tolerance_for``);
* ``tf32x3``: ``f32_dot_precision="tf32x3"``, within f32's tolerance;
* ``tf32``: ``f32_dot_precision="tf32"``, within ``output_check.TF32_TOLERANCE``.

A tolerance is widened by the square root of the output's summation length, as ``run
--check`` widens it: two orders of one sum differ by about that many roundings (an H200 run
without the widening failed the GPT-2 f32 block's tf32x3 variant at 5.8e-6, behind sums of
768 and 3072 terms).

A variant ``compile_hlo`` refuses with its located ``UnsupportedOpError`` (a CUDA graph of a
module with a ``while``) is ``refused``, as documented, not a failure.  Prints one line per
(program, variant) and exits 1 when any fails.  Without a GPU it says so and
exits 0, unless ``--interpreter`` runs the same comparisons under the Triton interpreter (the
GPU-only variants then reduce to the plain path, which the test suite relies on).

    python bench/gpu_paths_check.py [--interpreter] [--variants V,...] [FILES...]
"""
from __future__ import annotations

import argparse
import os
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

DEFAULT_PROGRAMS = [
    "bench/programs/matmul_bias_gelu_bf16_1024.hlo",
    "bench/programs/attention_causal_bf16_4x8x512x64.hlo",
    "bench/programs/gpt2_block_bf16_b4_s512_d768.hlo",
    "bench/programs/gpt2_block_f32_b1_s512_d768.hlo",
    "bench/programs/softmax_f32_4096x1024.hlo",
    "tests/data/hlo/batched_einsum.before.hlo",
    "tests/data/hlo/cnn_block.before.hlo",
    "tests/data/hlo/fori_loop.before.hlo",
    # A sort longer than one tile: torch.sort (CUB) captured in a CUDA graph.
    "tests/data/hlo/top_p_sampling.before.hlo",
]

#: variant -> (compile_hlo options, how outputs must agree: "exact" or a precision name).
VARIANTS = {
    "cuda_graph": ({"cuda_graph": True}, "exact"),
    "reuse_outputs": ({"cuda_graph": "reuse-outputs"}, "exact"),
    "torch_op": ({}, "exact"),
    "dot_library": ({"dot_library": "always"}, "ieee"),
    "tf32x3": ({"f32_dot_precision": "tf32x3"}, "tf32x3"),
    "tf32": ({"f32_dot_precision": "tf32"}, "tf32"),
}


def skip_reason(interpreter: bool) -> str | None:
    """Why the check cannot run here (None when it can)."""
    if interpreter:
        return None
    import torch

    if not torch.cuda.is_available():
        return "no CUDA GPU is visible (torch.cuda.is_available() is False)"
    return None


def _agree(expected, actual, dtype: str, how: str,
           summation_length: int = 1) -> tuple[bool, float]:
    """Whether ``actual`` matches ``expected`` as ``how`` asks (a tolerance widened for a
    sum of ``summation_length`` terms); the largest difference."""
    import numpy as np

    from triton_backend.host.output_check import compare_output

    e = expected.detach().float().cpu().numpy() if expected.dtype.is_floating_point \
        else expected.detach().cpu().numpy()
    a = actual.detach().float().cpu().numpy() if actual.dtype.is_floating_point \
        else actual.detach().cpu().numpy()
    if how == "exact":
        same = np.array_equal(e, a, equal_nan=e.dtype.kind == "f")
        diff = float(np.nanmax(np.abs(e - a))) if e.size and e.dtype.kind == "f" else 0.0
        return same, diff
    checked = compare_output("o", e, a, dtype, f32_dot_precision=how,
                             summation_length=summation_length)
    return checked.passed, checked.max_abs_error


def _compiled(text: str, variant: str, options: dict, name: str):
    from triton_backend import compile_hlo, torch_op

    if variant == "torch_op":
        return torch_op(text, name=f"gpu_paths_{name}", backward=None)
    return compile_hlo(text, **options)


def check_program(path: Path, variants: list[str], device: str) -> list[dict]:
    """Rows of one program: one per variant."""
    from fusion.analysis.summation_length import output_summation_lengths
    from fusion.errors import UnsupportedOpError
    from fusion.ir.shape import flatten_shape
    from fusion.text.parser import parse_hlo
    from gpu_runtime import program_inputs
    from triton_backend import compile_hlo

    text = path.read_text()
    module = parse_hlo(text)
    dtypes = [s.dtype for s in flatten_shape(module.entry.root.shape)]
    lengths = output_summation_lengths(module)
    plain = compile_hlo(text)
    inputs = [program_inputs(module, device) for _ in range(3)]
    expected = [[t.clone() for t in _as_tuple(plain(*args))] for args in inputs]
    rows = []
    for variant in variants:
        options, how = VARIANTS[variant]
        row = {"program": path.stem, "variant": variant}
        try:
            call = _compiled(text, variant, options, path.stem.replace(".", "_"))
        except UnsupportedOpError as err:  # refused at compile time, located: as documented
            row.update(status="refused", detail=str(err)[:120])
            rows.append(row)
            continue
        try:
            worst, ok = 0.0, True
            for args, want in zip(inputs, expected):
                got = [t.clone() for t in _as_tuple(call(*args))]
                for w, g, dtype, length in zip(want, got, dtypes, lengths):
                    passed, diff = _agree(w, g, dtype, how, length)
                    ok, worst = ok and passed, max(worst, diff)
            row.update(status="pass" if ok else "FAIL", max_abs_diff=worst)
        except Exception as err:  # noqa: BLE001 - a variant that fails is a row, not a crash
            row.update(status="error", detail=f"{type(err).__name__}: {str(err)[:120]}")
            # The whole chain on standard error (a session's log keeps it): a failed CUDA-graph
            # capture names only its last CUDA error in the row.
            print(f"{path.stem} {variant}:", file=sys.stderr)
            traceback.print_exc(file=sys.stderr)
        rows.append(row)
    return rows


def _as_tuple(result):
    return result if isinstance(result, tuple) else (result,)


def _line(row: dict) -> str:
    detail = row.get("detail") or (f"max |diff| {row['max_abs_diff']:.3g}"
                                   if "max_abs_diff" in row else "")
    return f"{row['program'][:44]:<45}{row['variant']:<15}{row['status']:<8}{detail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path)
    parser.add_argument("--interpreter", action="store_true",
                        help="run under the Triton interpreter (no GPU needed)")
    parser.add_argument("--variants", default=",".join(VARIANTS),
                        help=f"comma-separated, of: {', '.join(VARIANTS)}")
    args = parser.parse_args(argv)
    variants = [v for v in args.variants.split(",") if v]
    unknown = sorted(set(variants) - set(VARIANTS))
    if unknown:
        parser.error(f"unknown variants {unknown}; known: {list(VARIANTS)}")
    if args.interpreter:
        os.environ["TRITON_INTERPRET"] = "1"
    reason = skip_reason(args.interpreter)
    if reason is not None:
        print(f"gpu_paths_check: skipped: {reason}")
        return 0
    device = "cpu" if args.interpreter else "cuda"
    files = args.files or [ROOT / p for p in DEFAULT_PROGRAMS]
    failed = 0
    for path in files:
        for row in check_program(Path(path), variants, device):
            print(_line(row), flush=True)
            failed += row["status"] not in ("pass", "refused")
    print(f"{failed} of the checks failed" if failed else "every check passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
