"""The npz convention of ``fusion-compile evaluate`` and ``run``: inputs ``p0..pN`` in, outputs
``o0..oM`` out (``fusion.npz_io``), with the same arguments, default paths and summaries.

Without ``--inputs``, deterministic random inputs (``--seed``) are made and saved next to the
outputs (``default_paths``).  Never imports torch or triton: ``evaluate`` is an analysis
subcommand.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from fusion.hlo_module import HloModule
from fusion.shape import flatten_shape
from fusion.npz_io import input_arrays, load_arrays, random_inputs, save_arrays


def add_npz_arguments(parser: argparse.ArgumentParser) -> None:
    """``FILE.hlo``, ``--inputs``, ``--outputs`` and ``--seed``."""
    parser.add_argument("file", metavar="FILE.hlo", help="HLO text (as XLA or JAX prints it)")
    parser.add_argument("--inputs", metavar="IN.npz",
                        help="inputs p0..pN (default: random, saved next to the outputs)")
    parser.add_argument("--outputs", metavar="OUT.npz",
                        help="where to write o0..oM (default: <FILE stem>.outputs.npz here)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs")


def default_paths(hlo_file: str, outputs: str | None) -> tuple[Path, Path]:
    """(outputs path, path where generated inputs are saved).

    >>> [str(p) for p in default_paths("dir/gelu.hlo", None)]
    ['gelu.outputs.npz', 'gelu.inputs.npz']
    >>> [str(p) for p in default_paths("gelu.hlo", "run/out.npz")]
    ['run/out.npz', 'run/out.inputs.npz']
    """
    out = Path(outputs) if outputs else Path(Path(hlo_file).stem + ".outputs.npz")
    name = out.name
    if name.endswith(".outputs.npz"):
        stem = name[: -len(".outputs.npz")]
    elif name.endswith(".npz"):
        stem = name[: -len(".npz")]
    else:
        stem = name
    return out, out.with_name(stem + ".inputs.npz")


def read_inputs(module: HloModule, args: argparse.Namespace, inputs_path: Path) -> list[np.ndarray]:
    """The entry's arguments: from ``args.inputs``, or random (``args.seed``) and saved to
    ``inputs_path``."""
    if args.inputs:
        if not Path(args.inputs).exists():
            raise FileNotFoundError(f"no such inputs file: {args.inputs}")
        return input_arrays(module, load_arrays(args.inputs), args.inputs)
    inputs = random_inputs(module, seed=args.seed)
    save_arrays(inputs_path, {f"p{n}": a for n, a in enumerate(inputs)},
                {f"p{n}": p.shape.dtype for n, p in enumerate(module.entry.parameters)})
    print(f"random inputs (seed {args.seed}) written to {inputs_path}")
    return inputs


def save_outputs(module: HloModule, out_path: Path, outputs: list[np.ndarray]) -> list[str]:
    """Write ``o0..oM`` to ``out_path``; returns their HLO element types."""
    out_types = [s.dtype for s in flatten_shape(module.entry.root.shape)]
    save_arrays(out_path, {f"o{n}": a for n, a in enumerate(outputs)},
                {f"o{n}": t for n, t in enumerate(out_types)})
    return out_types


def print_outputs(outputs: list[np.ndarray], out_types: list[str], out_path: Path) -> None:
    """One line per output (type, shape and ``summary``), then where they were written."""
    for n, (array, dtype) in enumerate(zip(outputs, out_types)):
        dims = ",".join(str(d) for d in array.shape)
        print(f"o{n}: {dtype}[{dims}] {summary(array)}")
    print(f"outputs written to {out_path}")


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
