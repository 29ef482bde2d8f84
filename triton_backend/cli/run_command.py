"""``fusion-compile run FILE.hlo [--inputs IN.npz] [--outputs OUT.npz] [--check] [--seed N]``.

Compiles the module with ``triton_backend.compile_hlo`` and runs it: fusions as generated
Triton kernels (on the GPU, or under the Triton interpreter on CPU tensors without one), the
ops between them on the host.  Inputs and outputs follow ``fusion-compile evaluate``'s npz
convention and default paths (random inputs, ``--seed``, saved next to the outputs when no
``--inputs`` is given).  ``--check`` also runs the reference evaluator and prints, per output,
the maximum absolute and relative error and whether it is within the element type's tolerance
(``triton_backend.host.output_check``); a failed check exits with status 2.

``--tile NAME=T0,T1,...`` (repeatable) sets the tile sizes of fusion NAME; ``--no-fuse`` runs an
unfused module op by op (one-op fusions) instead of fusing it first.
"""
from __future__ import annotations

import argparse
import time

from fusion.errors import FusionCompilerError
from triton_backend.cli.npz_files import (
    add_npz_arguments,
    default_paths,
    print_outputs,
    read_inputs,
    save_outputs,
)
from triton_backend.cli.check_command import read_module
from fusion.evaluator import evaluate
from triton_backend.host.output_check import compare_output

HELP = "compile an HLO module to Triton kernels and run it; npz inputs/outputs, --check"

#: Exit status of a run whose --check found an output out of tolerance.
CHECK_FAILED = 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_npz_arguments(parser)
    parser.add_argument("--check", action="store_true",
                        help="compare with the reference evaluator (exit 2 when out of tolerance)")
    add_compile_options(parser)


def add_compile_options(parser: argparse.ArgumentParser) -> None:
    """Options shared with ``fusion-compile compile``: ``--tile`` and ``--no-fuse``."""
    parser.add_argument("--tile", action="append", default=[], metavar="NAME=T0,T1,...",
                        help="tile sizes of fusion NAME (powers of two, one per output dim)")
    parser.add_argument("--no-fuse", action="store_true",
                        help="do not fuse an unfused module; run its ops as one-op fusions")


def parse_tiling(specs: list[str]) -> dict[str, tuple[int, ...]]:
    """``["f=8,128"]`` -> ``{"f": (8, 128)}``; a malformed entry is a located error.

    >>> parse_tiling(["fusion.1=1,8,128", "g=64"])
    {'fusion.1': (1, 8, 128), 'g': (64,)}
    """
    out: dict[str, tuple[int, ...]] = {}
    for spec in specs:
        name, sep, sizes = spec.rpartition("=")
        try:
            values = tuple(int(s) for s in sizes.split(","))
        except ValueError:
            values = ()
        if not sep or not name or not values:
            raise FusionCompilerError(f"malformed --tile {spec!r}", where="--tile",
                                      expected="NAME=T0,T1,... with integer tile sizes")
        out[name] = values
    return out


def run(args: argparse.Namespace) -> int:
    from triton_backend.host.input_validation import tensor_from_numpy, tensor_to_numpy  # noqa: PLC0415
    from triton_backend.driver.module_runner import compile_hlo  # noqa: PLC0415

    module = read_module(args.file)
    tiling = parse_tiling(args.tile)
    out_path, inputs_path = default_paths(args.file, args.outputs)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    compiled = compile_hlo(module, tiling=tiling, fuse=not args.no_fuse)
    compile_s = time.perf_counter() - start
    params = module.entry.parameters
    inputs = read_inputs(module, args, inputs_path)
    tensors = [tensor_from_numpy(a, p.shape.dtype, compiled.device) for a, p in zip(inputs, params)]
    start = time.perf_counter()
    results = compiled(*tensors)
    run_s = time.perf_counter() - start
    outputs = [tensor_to_numpy(t) for t in results]
    out_types = save_outputs(module, out_path, outputs)
    where = "Triton interpreter (CPU)" if compiled.device.type == "cpu" else str(compiled.device)
    print(f"compiled {len(compiled.fusions)} kernel(s) in {compile_s:.2f}s; ran on {where} "
          f"in {run_s:.2f}s")
    print_outputs(outputs, out_types, out_path)
    if not args.check:
        return 0
    return _check(module, inputs, outputs, out_types)


def _check(module, inputs, outputs, out_types) -> int:

    references = evaluate(module, *inputs)
    comparisons = [compare_output(f"o{n}", ref, out, dtype)
                   for n, (ref, out, dtype) in enumerate(zip(references, outputs, out_types))]
    print("check against the reference evaluator:")
    for comparison in comparisons:
        print("  " + comparison.describe())
    failed = [c.key for c in comparisons if not c.passed]
    if failed:
        print(f"check FAILED for {', '.join(failed)}")
        return CHECK_FAILED
    print("check passed")
    return 0
