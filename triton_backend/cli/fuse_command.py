"""``fusion-compile fuse FILE.hlo [--explain] [-o OUT.hlo]``: canonicalize and fuse a module.

Reads an unfused module (as ``jax.jit(f).lower(x).as_text(dialect="hlo")`` prints it), writes
XLA's wrappers as the plain ops they run, as ``compile`` does first
(``fusion.transforms.plain_ops``: cuBLAS calls, ``rng``, scaled and ragged dots, batch
norms...), runs ``tiling.fusion_pass.priority_fusion.fuse_module`` and prints the fused module
(it verifies and parses back), so its kernels are the ones ``compile`` builds.
``--no-canonicalize`` fuses the module exactly as written.  ``-o`` writes it to a file
instead; ``--explain`` prints every fusion decision with its reason to stderr (one line
each), then a summary line with the kernel count; ``--json`` prints one document with the
fused module (``hlo``, null with ``-o``), the decisions and the kernel counts.  Never imports
torch or triton.
"""
from __future__ import annotations

import argparse
import sys

from fusion.logs import get_logger
from fusion.text.printer import print_hlo
from fusion.shapes.verifier import verify_module
from fusion.transforms.plain_ops import plain_ops
from fusion.transforms.scan_tree import rewrite_tree_scans
from tiling.fusion_pass import priority_fusion
from tiling.fusion_pass.traffic_model import count_kernels
from triton_backend.cli.check_command import read_verified_module
from triton_backend.cli.json_output import emit
from triton_backend.cli.output_files import check_output_path
from triton_backend.runtime.atomic_files import atomic_output

_log = get_logger("triton_backend.cli")

HELP = "fuse an unfused HLO module XLA-style (priority fusion); print the fused module"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE.hlo",
                        help="HLO text (as XLA or JAX prints it); - reads standard input")
    parser.add_argument("-o", "--output", metavar="OUT.hlo",
                        help="write the fused module here instead of to stdout")
    parser.add_argument("--explain", action="store_true",
                        help="print each fusion decision and its reason to stderr")
    parser.add_argument("--no-canonicalize", action="store_true",
                        help="fuse the module as written, without canonicalization")
    parser.add_argument("--no-multi-output", action="store_true",
                        help="no multi-output (sibling / producer-consumer) fusion")


def run(args: argparse.Namespace) -> int:
    output = check_output_path(args.output, "-o") if args.output else None
    module = read_verified_module(args.file)
    if not args.no_canonicalize:
        module = rewrite_tree_scans(plain_ops(module))
    options = priority_fusion.FusionOptions(canonicalize=not args.no_canonicalize,
                                            multi_output=not args.no_multi_output)
    result = priority_fusion.fuse_module(module, options=options)
    verify_module(result.module)
    text = print_hlo(result.module)
    before, after = count_kernels(module), count_kernels(result.module)
    _log.info("fused module %s: %d kernels unfused -> %d fused", module.name, before, after)
    if output is not None:
        with atomic_output(output, "w") as handle:
            handle.write(text)
    if args.json:
        emit("fuse", {"module": result.module.name,
                      "hlo": None if output is not None else text,
                      "output_file": None if output is None else str(output),
                      "decisions": [str(d) for d in result.decisions],
                      "kernels_before": before, "kernels_after": after,
                      "fusions": len(result.module.fusions())})
        return 0
    if output is None:
        sys.stdout.write(text)
    if args.explain:
        for decision in result.decisions:
            print(decision, file=sys.stderr)
        print(f"kernels: {before} unfused -> {after} fused ({len(result.module.fusions())} "
              "fusions)", file=sys.stderr)
    return 0
