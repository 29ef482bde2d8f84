"""``fusion-compile fuse FILE.hlo [--explain] [-o OUT.hlo]``: canonicalize and fuse a module.

Reads an unfused module (as ``jax.jit(f).lower(x).as_text(dialect="hlo")`` prints it), runs
``tiling.priority_fusion.fuse_module`` and prints the fused module (it verifies and parses
back).  ``-o`` writes it to a file instead; ``--explain`` prints every fusion decision with
its reason to stderr (one line each), then a summary line with the kernel count.  Never
imports torch or triton.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fusion.printer import print_hlo
from fusion.verifier import verify_module
from tiling import priority_fusion
from tiling.fusion_traffic_model import count_kernels
from triton_backend.cli.check_command import read_module

HELP = "fuse an unfused HLO module XLA-style (priority fusion); print the fused module"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE.hlo", help="HLO text (as XLA or JAX prints it)")
    parser.add_argument("-o", "--output", metavar="OUT.hlo",
                        help="write the fused module here instead of to stdout")
    parser.add_argument("--explain", action="store_true",
                        help="print each fusion decision and its reason to stderr")
    parser.add_argument("--no-canonicalize", action="store_true",
                        help="fuse the module as written, without canonicalization")
    parser.add_argument("--no-multi-output", action="store_true",
                        help="no multi-output (sibling / producer-consumer) fusion")


def run(args: argparse.Namespace) -> int:
    module = read_module(args.file)
    verify_module(module)
    options = priority_fusion.FusionOptions(canonicalize=not args.no_canonicalize,
                                            multi_output=not args.no_multi_output)
    result = priority_fusion.fuse_module(module, options=options)
    verify_module(result.module)
    text = print_hlo(result.module)
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    if args.explain:
        for decision in result.decisions:
            print(decision, file=sys.stderr)
        print(f"kernels: {count_kernels(module)} unfused -> {count_kernels(result.module)} "
              f"fused ({len(result.module.fusions())} fusions)", file=sys.stderr)
    return 0
