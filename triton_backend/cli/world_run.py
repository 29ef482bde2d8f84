"""``fusion-compile run FILE --world-size N``: a partitioned module on N local processes.

Each rank gets its own arguments.  From ``--inputs IN.npz``: ``pK_rankR`` is parameter K on
rank R, and a plain ``pK`` is parameter K on every rank (a replicated value); without
``--inputs``, rank R's random inputs use seed ``--seed + R``.  The processes
(``driver.process_launch``: gloo on CPU, a free localhost port) compile and run the module;
their outputs are written as one npz, ``oK_rankR`` (``--outputs``; ``--save-inputs`` writes
``pK_rankR``).  ``--check`` compares every rank's outputs with the lockstep evaluator
(``fusion.evaluator.spmd.evaluate_spmd``).  A rank that fails stops the others; the error
names it.

>>> per_rank_keys("p", 2, 2)
['p0_rank0', 'p1_rank0', 'p0_rank1', 'p1_rank1']
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from fusion.errors import BadArgumentError
from fusion.evaluator.npz_io import load_arrays, random_inputs, save_arrays
from fusion.evaluator.spmd import evaluate_spmd
from fusion.ir.hlo_module import HloModule
from fusion.transforms.dot_algorithm import with_f32_dot_precision
from triton_backend.cli.npz_files import output_types, summary
from fusion.analysis.summation_length import output_summation_lengths
from triton_backend.host.output_check import OutputComparison, compare_output
from triton_backend.runtime.atomic_files import atomic_output


def per_rank_keys(prefix: str, count: int, world_size: int) -> list[str]:
    """``prefixK_rankR`` for every rank R, then every K."""
    return [f"{prefix}{k}_rank{r}" for r in range(world_size) for k in range(count)]


def rank_inputs(module: HloModule, args: argparse.Namespace) -> list[list[np.ndarray]]:
    """Each rank's arguments (module docstring)."""
    world, params = args.world_size, module.entry.parameters
    if not args.inputs:
        return [random_inputs(module, seed=args.seed + r) for r in range(world)]
    if not Path(args.inputs).exists():
        raise FileNotFoundError(f"no such inputs file: {args.inputs}")
    arrays = load_arrays(args.inputs)
    out = []
    for r in range(world):
        row = []
        for k, p in enumerate(params):
            key = f"p{k}_rank{r}" if f"p{k}_rank{r}" in arrays else f"p{k}"
            if key not in arrays:
                raise BadArgumentError(f"{args.inputs} has neither p{k}_rank{r} nor p{k} "
                                       f"(parameter {k}, %{p.name}, on rank {r})",
                                       where="--inputs")
            row.append(arrays[key])
        out.append(row)
    return out


def write_rank_files(module: HloModule, paths, inputs: list, outputs: list) -> None:
    """``--save-inputs`` (``pK_rankR``) and ``--outputs`` (``oK_rankR``), when asked."""
    world = len(inputs)
    if paths.inputs is not None:
        types = [p.shape.dtype for p in module.entry.parameters]
        write_npz_keys(paths.inputs, per_rank_keys("p", len(types), world),
                       [a for row in inputs for a in row], types * world)
    if paths.outputs is not None:
        types = output_types(module)
        write_npz_keys(paths.outputs, per_rank_keys("o", len(types), world),
                       [a for row in outputs for a in row], types * world)


def write_npz_keys(path: Path, keys: list[str], arrays: list, types: list[str]) -> None:
    with atomic_output(path) as handle:
        save_arrays(handle, dict(zip(keys, arrays)), dict(zip(keys, types)))


def compare_ranks(module: HloModule, inputs: list, outputs: list,
                  f32_dot_precision: str = "ieee") -> list[OutputComparison]:
    """Every rank's outputs against ``evaluate_spmd``'s, keyed ``oK_rankR``."""
    types, lengths = output_types(module), output_summation_lengths(module)
    return [compare_output(f"o{k}_rank{r}", ref, out, dtype, f32_dot_precision=f32_dot_precision,
                           summation_length=length)
            for r, (refs, outs) in enumerate(zip(evaluate_spmd(module, inputs), outputs))
            for k, (ref, out, dtype, length) in enumerate(zip(refs, outs, types, lengths))]


def run_world(module: HloModule, args: argparse.Namespace, paths, tiling) -> tuple:
    """Run on ``args.world_size`` processes: (inputs, outputs, comparisons or None)."""
    from triton_backend.driver.process_launch import run_processes  # noqa: PLC0415

    inputs = rank_inputs(module, args)
    # The file's own text, so that an error's line is the file's line.
    text = Path(args.file).read_text() if args.file != "-" else module
    if args.f32_dot_precision != "ieee":  # the ranks compile the module with its algorithms
        text = with_f32_dot_precision(module, args.f32_dot_precision)
    (outputs,) = run_processes([text], [inputs], args.world_size, fuse=not args.no_fuse,
                               tiling=tiling)
    write_rank_files(module, paths, inputs, outputs)
    return inputs, outputs, \
        compare_ranks(module, inputs, outputs, args.f32_dot_precision) if args.check else None


def print_ranks(module: HloModule, outputs: list, paths) -> None:
    types = output_types(module)
    for r, row in enumerate(outputs):
        for k, (array, dtype) in enumerate(zip(row, types)):
            dims = ",".join(str(d) for d in array.shape)
            print(f"o{k}_rank{r}: {dtype}[{dims}] {summary(array)}")
    for label, path in (("inputs", paths.inputs), ("outputs", paths.outputs)):
        if path is not None:
            print(f"{label} written to {path}")


__all__ = ["compare_ranks", "per_rank_keys", "print_ranks", "rank_inputs", "run_world",
           "write_rank_files"]
