"""``fusion-compile run FILE.hlo [--inputs IN.npz] [--outputs OUT.npz] [--save-inputs PATH] [--check] [--seed N]``.

Compiles the module with ``triton_backend.compile_hlo`` and runs it: fusions as generated
Triton kernels (on the GPU, or under the Triton interpreter on CPU tensors without one), the
ops between them on the host.  Inputs and outputs follow ``fusion-compile evaluate``'s npz
convention (random inputs from ``--seed`` without ``--inputs``; files written only when asked,
``--outputs`` and ``--save-inputs``).  ``--check`` also runs the reference evaluator and prints,
per output, the maximum absolute and relative error and whether it is within the element
type's tolerance (``triton_backend.host.output_check``); a failed check exits with status 3.

``--world-size N`` runs a module partitioned for N devices (``num_partitions`` times
``replica_count``) as N local processes, one per rank, each on its own inputs, collectives
through ``torch.distributed``; inputs, outputs and ``--check`` per rank (``world_run``).

``--tile NAME=T0,T1,...`` (repeatable) sets the tile sizes of fusion NAME; ``--no-fuse`` runs an
unfused module op by op (one-op fusions) instead of fusing it first.  ``--f32-dot-precision
tf32`` (or ``tf32x3``) runs f32 dots as TF32 (``compile_hlo``'s ``f32_dot_precision``); with
``tf32``, ``--check`` compares f32 outputs at ``output_check.TF32_TOLERANCE``.
"""
from __future__ import annotations

import argparse
import time

from fusion.analysis.spmd_groups import device_counts, world_size_problem
from fusion.errors import BadArgumentError
from fusion.logs import get_logger
from triton_backend.cli.diagnostics import ExitStatus
from triton_backend.cli.json_output import emit
from triton_backend.cli.npz_files import (
    add_npz_arguments,
    inputs_description,
    output_paths,
    output_types,
    outputs_json,
    print_outputs,
    read_inputs,
    save_requested,
)
from triton_backend.cli.check_command import read_verified_module
from triton_backend.cli.world_run import print_ranks, run_world
from triton_backend.host.output_check import OutputComparison, compare_with_evaluator

HELP = "compile an HLO module to Triton kernels and run it; npz inputs/outputs, --check"

#: Exit status of a run whose --check found an output out of tolerance.
CHECK_FAILED = int(ExitStatus.CHECK_FAILED)

_log = get_logger("triton_backend.cli")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_npz_arguments(parser)
    parser.add_argument("--max-iterations", type=int, metavar="N",
                        help="stop a while loop still running after N iterations (an error)")
    parser.add_argument("--check", action="store_true",
                        help="compare with the reference evaluator (exit 3 when out of tolerance)")
    parser.add_argument("--world-size", type=int, default=1, metavar="N",
                        help="run a module partitioned for N devices as N local processes; "
                             "per-rank npz keys pK_rankR / oK_rankR")
    add_compile_options(parser)


def add_compile_options(parser: argparse.ArgumentParser) -> None:
    """Options shared with ``fusion-compile compile``: ``--tile``, ``--no-fuse``,
    ``--f32-dot-precision`` and ``--dot-library``."""
    parser.add_argument("--tile", action="append", default=[], metavar="NAME=T0,T1,...",
                        help="tile sizes of fusion NAME (powers of two, one per output dim)")
    parser.add_argument("--no-fuse", action="store_true",
                        help="do not fuse an unfused module; run its ops as one-op fusions")
    parser.add_argument("--f32-dot-precision", choices=("ieee", "tf32", "tf32x3"),
                        default="ieee",
                        help="f32 dots without an algorithm or HIGHEST precision: exact (ieee, "
                             "the default) or on TF32 tensor cores (tf32, tf32x3)")
    parser.add_argument("--dot-library", choices=("auto", "never", "always"), default="auto",
                        help="plain dot fusions (nothing fused) as one torch.einsum call "
                             "(cuBLAS on a GPU): auto (large dots on a GPU), never, always")


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
            raise BadArgumentError(f"malformed --tile {spec!r}", where="--tile",
                                      expected="NAME=T0,T1,... with integer tile sizes")
        out[name] = values
    return out


def run(args: argparse.Namespace) -> int:
    from triton_backend.host.input_validation import tensor_from_numpy, tensor_to_numpy  # noqa: PLC0415
    from triton_backend.driver.module_compiler import compile_hlo  # noqa: PLC0415

    paths = output_paths(args)  # an unusable output path fails before any work
    tiling = parse_tiling(args.tile)
    module = read_verified_module(args.file)
    if args.world_size != 1:
        return _run_world(module, args, paths, tiling)
    start = time.perf_counter()
    compiled = compile_hlo(module, tiling=tiling, fuse=not args.no_fuse,
                           f32_dot_precision=args.f32_dot_precision,
                           dot_library=args.dot_library)
    compile_s = time.perf_counter() - start
    _log.info("compiled %d kernel(s) in %.2fs (fusion mode %s)", len(compiled.fusions),
              compile_s, compiled.fusion_mode)
    params = module.entry.parameters
    inputs = read_inputs(module, args)
    tensors = [tensor_from_numpy(a, p.shape.dtype, compiled.device) for a, p in zip(inputs, params)]
    start = time.perf_counter()
    results = compiled(*tensors, max_while_iterations=args.max_iterations)
    run_s = time.perf_counter() - start
    outputs = [tensor_to_numpy(t) for t in results]
    save_requested(module, paths, inputs, outputs)
    out_types = output_types(module)
    where = "Triton interpreter (CPU)" if compiled.device.type == "cpu" else str(compiled.device)
    comparisons = compare_with_evaluator(module, inputs, outputs, out_types,
                                         args.max_iterations, args.f32_dot_precision) if args.check else None
    failed = [c.key for c in comparisons or () if not c.passed]
    if args.json:
        emit("run", {"module": module.name, "inputs": inputs_description(args),
                     "outputs": outputs_json(outputs, out_types),
                     "outputs_file": None if paths.outputs is None else str(paths.outputs),
                     "inputs_file": None if paths.inputs is None else str(paths.inputs),
                     "kernels": len(compiled.fusions), "device": where,
                     "compile_s": round(compile_s, 6), "run_s": round(run_s, 6),
                     "check": None if comparisons is None else _check_json(comparisons)})
    else:
        print(f"compiled {len(compiled.fusions)} kernel(s) in {compile_s:.2f}s; ran on {where} "
              f"in {run_s:.2f}s")
        print_outputs(outputs, out_types, paths)
        if comparisons is not None:
            _print_check(comparisons, failed)
    return CHECK_FAILED if failed else 0


def _run_world(module, args, paths, tiling) -> int:
    if args.world_size < 1:
        raise BadArgumentError(f"--world-size {args.world_size}: expected 1 or more",
                               where="--world-size")
    # Said here, a usage error, rather than by every rank after N processes imported torch.
    problem = world_size_problem(device_counts(module), args.world_size)
    if problem is not None:
        raise BadArgumentError(problem, where="--world-size",
                               expected=f"--world-size {device_counts(module).world}")
    start = time.perf_counter()
    inputs, outputs, comparisons = run_world(module, args, paths, tiling)
    wall_s = time.perf_counter() - start
    failed = [c.key for c in comparisons or () if not c.passed]
    if args.json:
        emit("run", {"module": module.name, "world_size": args.world_size,
                     "inputs": inputs_description(args),
                     "outputs": [outputs_json(row, output_types(module)) for row in outputs],
                     "outputs_file": None if paths.outputs is None else str(paths.outputs),
                     "wall_s": round(wall_s, 6),
                     "check": None if comparisons is None else _check_json(comparisons)})
    else:
        print(f"ran on {args.world_size} processes in {wall_s:.2f}s")
        print_ranks(module, outputs, paths)
        if comparisons is not None:
            _print_check(comparisons, failed)
    return CHECK_FAILED if failed else 0


def _check_json(comparisons: list[OutputComparison]) -> dict:
    return {"passed": all(c.passed for c in comparisons),
            "outputs": [{"name": c.key, "type": c.dtype, "passed": c.passed,
                         "max_abs_error": float(c.max_abs_error),
                         "max_rel_error": float(c.max_rel_error),
                         "atol": c.tolerance.atol, "rtol": c.tolerance.rtol,
                         "mismatches": int(c.mismatches), "size": int(c.size),
                         "against_f64": None if c.exact is None else {
                             "max_error": c.exact.max_error, "mean_error": c.exact.mean_error,
                             "reference_max_error": c.exact.reference_max_error,
                             "reference_mean_error": c.exact.reference_mean_error,
                             "passed": c.exact.passed}}
                        for c in comparisons]}


def _print_check(comparisons: list[OutputComparison], failed: list[str]) -> None:
    print("check against the reference evaluator:")
    for comparison in comparisons:
        print("  " + comparison.describe())
    if failed:
        print(f"check FAILED for {', '.join(failed)}")
    else:
        print("check passed")
