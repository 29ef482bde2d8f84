"""``fusion-compile evaluate FILE.hlo [--inputs IN.npz] [--outputs OUT.npz] [--seed N]``.

Runs the module on the reference evaluator (NumPy; never torch or triton) and writes the
outputs ``o0..oM`` to an npz archive (``fusion.npz_io`` convention).

Paths: the outputs go to ``--outputs``, by default ``<FILE stem>.outputs.npz`` in the current
directory.  Without ``--inputs``, deterministic random inputs (``--seed``, default 0) are made
and saved next to the outputs: ``X.outputs.npz`` -> ``X.inputs.npz``, any other ``X.npz`` ->
``X.inputs.npz``; so ``fusion-compile evaluate gelu.hlo`` writes ``gelu.inputs.npz`` and
``gelu.outputs.npz``.  Prints one line per output: shape, dtype, min, max, mean.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from fusion.shape import flatten_shape

HELP = "run an HLO module on the reference evaluator; inputs and outputs as npz"


def add_arguments(parser: argparse.ArgumentParser) -> None:
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


def run(args: argparse.Namespace) -> int:
    from fusion.evaluator import evaluate  # noqa: PLC0415 - only this subcommand needs it
    from fusion.npz_io import (  # noqa: PLC0415
        input_arrays, load_arrays, output_arrays, random_inputs, save_arrays,
    )
    from fusion.verifier import verify_module  # noqa: PLC0415
    from triton_backend.cli.check_command import read_module  # noqa: PLC0415

    module = read_module(args.file)
    verify_module(module)
    out_path, inputs_path = default_paths(args.file, args.outputs)
    param_types = [p.shape for p in module.entry.parameters]
    if args.inputs:
        if not Path(args.inputs).exists():
            raise FileNotFoundError(f"no such inputs file: {args.inputs}")
        inputs = input_arrays(module, load_arrays(args.inputs), args.inputs)
    else:
        inputs = random_inputs(module, seed=args.seed)
        save_arrays(inputs_path, {f"p{n}": a for n, a in enumerate(inputs)},
                    {f"p{n}": s.dtype for n, s in enumerate(param_types)})
        print(f"random inputs (seed {args.seed}) written to {inputs_path}")
    outputs = output_arrays(evaluate(module, *inputs))
    out_types = [s.dtype for s in flatten_shape(module.entry.root.shape)]
    save_arrays(out_path, {f"o{n}": a for n, a in enumerate(outputs)},
                {f"o{n}": t for n, t in enumerate(out_types)})
    for n, (array, dtype) in enumerate(zip(outputs, out_types)):
        dims = ",".join(str(d) for d in array.shape)
        print(f"o{n}: {dtype}[{dims}] {_stats(array)}")
    print(f"outputs written to {out_path}")
    return 0


def _stats(array: np.ndarray) -> str:
    if array.size == 0:
        return "(empty)"
    if array.dtype.kind == "c":
        values = array.astype(np.complex128)
        return f"mean={values.mean():.6g} max|x|={np.abs(values).max():.6g}"
    values = array.astype(np.float64)
    return f"min={values.min():.6g} max={values.max():.6g} mean={values.mean():.6g}"
