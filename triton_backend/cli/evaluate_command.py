"""``fusion-compile evaluate FILE.hlo [--inputs IN.npz] [--outputs OUT.npz] [--save-inputs PATH] [--seed N]``.

Runs the module on the reference evaluator (NumPy; never torch or triton) and prints one line
per output: type, shape, min, max, mean.  Without ``--inputs``, deterministic random inputs
(``--seed``, default 0) are made.  Files are written only when asked: ``--outputs`` (the
outputs ``o0..oM``, ``fusion.evaluator.npz_io`` convention) and ``--save-inputs`` (the inputs used), each
path exactly as given.
"""
from __future__ import annotations

import argparse

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
from fusion.evaluator import evaluate
from fusion.evaluator.npz_io import output_arrays
from triton_backend.cli.check_command import read_verified_module
from triton_backend.cli.json_output import emit

HELP = "run an HLO module on the reference evaluator; inputs and outputs as npz"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_npz_arguments(parser)
    parser.add_argument("--max-iterations", type=int, metavar="N",
                        help="stop a while loop still running after N iterations (an error)")


def run(args: argparse.Namespace) -> int:
    paths = output_paths(args)  # an unusable output path fails before any work
    module = read_verified_module(args.file)
    inputs = read_inputs(module, args)
    outputs = output_arrays(evaluate(module, *inputs,
                                         max_while_iterations=args.max_iterations))
    save_requested(module, paths, inputs, outputs)
    types = output_types(module)
    if args.json:
        emit("evaluate", {"module": module.name, "inputs": inputs_description(args),
                          "outputs": outputs_json(outputs, types),
                          "outputs_file": None if paths.outputs is None else str(paths.outputs),
                          "inputs_file": None if paths.inputs is None else str(paths.inputs)})
        return 0
    print_outputs(outputs, types, paths)
    return 0
