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

from triton_backend.cli.npz_files import (
    add_npz_arguments,
    default_paths,
    print_outputs,
    read_inputs,
    save_outputs,
)
from fusion.evaluator import evaluate
from fusion.npz_io import output_arrays
from fusion.verifier import verify_module
from triton_backend.cli.check_command import read_module

HELP = "run an HLO module on the reference evaluator; inputs and outputs as npz"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_npz_arguments(parser)


def run(args: argparse.Namespace) -> int:

    module = read_module(args.file)
    verify_module(module)
    out_path, inputs_path = default_paths(args.file, args.outputs)
    inputs = read_inputs(module, args, inputs_path)
    outputs = output_arrays(evaluate(module, *inputs))
    print_outputs(outputs, save_outputs(module, out_path, outputs), out_path)
    return 0
