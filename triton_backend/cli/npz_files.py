"""The npz convention of ``fusion-compile evaluate`` and ``run``: inputs ``p0..pN`` in, outputs
``o0..oM`` out (``fusion.evaluator.npz_io``), with the same arguments, files and summaries.

Files are written only when asked: ``--outputs PATH`` and ``--save-inputs PATH``, each path used
exactly as given (no ``.npz`` appended), checked before any work and written atomically
(``output_files``).  Without ``--inputs``, deterministic random inputs (``--seed``) are made.
Never imports torch or triton: ``evaluate`` is an analysis subcommand.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fusion.ir.hlo_module import HloModule
from fusion.logs import get_logger
from fusion.evaluator.npz_io import input_arrays, load_arrays, random_inputs, save_arrays
from fusion.ir.shape import flatten_shape
from triton_backend.cli.output_files import check_output_path
from triton_backend.runtime.atomic_files import atomic_output

_log = get_logger("triton_backend.cli")


def add_npz_arguments(parser: argparse.ArgumentParser) -> None:
    """``FILE.hlo``, ``--inputs``, ``--outputs``, ``--save-inputs`` and ``--seed``."""
    parser.add_argument("file", metavar="FILE.hlo",
                        help="HLO text (as XLA or JAX prints it); - reads standard input")
    parser.add_argument("--inputs", metavar="IN.npz",
                        help="inputs p0..pN (default: random, see --seed)")
    parser.add_argument("--outputs", metavar="OUT.npz",
                        help="write the outputs o0..oM to this path, exactly as given "
                             "(default: write nothing)")
    parser.add_argument("--save-inputs", metavar="PATH",
                        help="write the inputs used (p0..pN) to this path (default: nothing)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")


@dataclass(frozen=True)
class OutputPaths:
    """Where a run writes, checked before any work: None means the file is not written."""

    outputs: Path | None
    inputs: Path | None


def output_paths(args: argparse.Namespace) -> OutputPaths:
    """``--outputs`` and ``--save-inputs``, checked (``check_output_path``) up front."""
    outputs = check_output_path(args.outputs, "--outputs") if args.outputs else None
    inputs = check_output_path(args.save_inputs, "--save-inputs") if args.save_inputs else None
    return OutputPaths(outputs, inputs)


def read_inputs(module: HloModule, args: argparse.Namespace) -> list[np.ndarray]:
    """The entry's arguments: from ``args.inputs``, or random (``args.seed``)."""
    if args.inputs:
        if not Path(args.inputs).exists():
            raise FileNotFoundError(f"no such inputs file: {args.inputs}")
        _log.info("inputs read from %s", args.inputs)
        return input_arrays(module, load_arrays(args.inputs), args.inputs)
    _log.info("random inputs, seed %d", args.seed)
    return random_inputs(module, seed=args.seed)


def inputs_description(args: argparse.Namespace) -> str:
    """``"IN.npz"`` or ``"random (seed 0)"``: where the inputs came from."""
    return args.inputs if args.inputs else f"random (seed {args.seed})"


def write_npz(path: Path, prefix: str, arrays: list[np.ndarray], types: list[str]) -> None:
    """``prefix0..prefixN`` with their HLO types to exactly ``path``, atomically."""
    with atomic_output(path) as handle:
        save_arrays(handle, {f"{prefix}{n}": a for n, a in enumerate(arrays)},
                    {f"{prefix}{n}": t for n, t in enumerate(types)})


def output_types(module: HloModule) -> list[str]:
    """The HLO element types of the entry's outputs ``o0..oM``."""
    return [s.dtype for s in flatten_shape(module.entry.root.shape)]


def save_requested(module: HloModule, paths: OutputPaths, inputs: list[np.ndarray],
                   outputs: list[np.ndarray]) -> None:
    """Write what was asked for: the outputs and the inputs used."""
    if paths.inputs is not None:
        write_npz(paths.inputs, "p", inputs, [p.shape.dtype for p in module.entry.parameters])
    if paths.outputs is not None:
        write_npz(paths.outputs, "o", outputs, output_types(module))


def outputs_json(outputs: list[np.ndarray], out_types: list[str]) -> list[dict[str, Any]]:
    """One object per output: name, HLO type, shape and ``summary``."""
    return [{"name": f"o{n}", "type": dtype, "shape": [int(d) for d in array.shape],
             "summary": summary(array)}
            for n, (array, dtype) in enumerate(zip(outputs, out_types))]


def print_outputs(outputs: list[np.ndarray], out_types: list[str], paths: OutputPaths) -> None:
    """One line per output (type, shape and ``summary``), then the files written."""
    for n, (array, dtype) in enumerate(zip(outputs, out_types)):
        dims = ",".join(str(d) for d in array.shape)
        print(f"o{n}: {dtype}[{dims}] {summary(array)}")
    if paths.inputs is not None:
        print(f"inputs written to {paths.inputs}")
    if paths.outputs is not None:
        print(f"outputs written to {paths.outputs}")


def summary(array: np.ndarray) -> str:
    """min, max and mean (complex: mean and largest magnitude).

    >>> summary(np.array([1.0, 3.0])), summary(np.zeros((0,)))
    ('min=1 max=3 mean=2', '(empty)')
    """
    if array.size == 0:
        return "(empty)"
    if array.dtype.kind == "c":
        values = array.astype(np.complex128)
        return f"mean={values.mean():.6g} max|x|={np.abs(values).max():.6g}"
    values = array.astype(np.float64)
    return f"min={values.min():.6g} max={values.max():.6g} mean={values.mean():.6g}"
