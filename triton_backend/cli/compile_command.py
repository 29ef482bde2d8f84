"""``fusion-compile compile FILE.hlo -o DIR [--target sm_80|sm_90] [--device h100] [--tile ...] [--no-fuse]``.

Compiles every fusion the module launches (``triton_backend.compile_hlo``) and writes to DIR:

* ``<fusion>.py`` for each kernel, copied from the kernel cache (each runs on its own:
  ``python DIR/<fusion>.py``);
* ``report.json`` and ``report.txt``: per fusion its emitter kind and why, input and output
  shapes, tiling, grid, ``num_warps``, compulsory bytes (inputs and outputs, each once), and
  the cost model's modeled DRAM bytes, predicted time and % of the HBM roofline on
  ``--device`` (``triton_backend.tuning.device_specs``: h100 by default); per module the
  kernel count, the compulsory bytes of the module's own inputs and outputs, the bytes the
  kernels move and the modeled bytes, each over the compulsory bytes;
* with ``--target``, ``<fusion>.sm_NN.ptx`` and ``<fusion>.sm_NN.cubin`` compiled without a GPU
  (Triton's ``GPUTarget`` and the wheel's ``ptxas``), and the registers, spills and shared
  memory of each kernel in the report.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from triton_backend.cli.run_command import add_compile_options, parse_tiling
from triton_backend.cli.check_command import read_module
from triton_backend.reports.compile_report import (
    build_report,
    compile_for_target,
    render_text,
    write_kernels,
    write_report,
)
from triton_backend.tuning.device_specs import device_spec
from fusion.errors import FusionCompilerError

HELP = "compile an HLO module's fusions to Triton kernel files, with a report (and PTX/cubin)"

TARGETS = {"sm_80": 80, "sm_90": 90}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE.hlo", help="HLO text (as XLA or JAX prints it)")
    parser.add_argument("-o", "--output-dir", required=True, metavar="DIR",
                        help="directory for the kernel files and the report")
    parser.add_argument("--target", choices=sorted(TARGETS),
                        help="also compile to PTX and cubin for this GPU (no GPU needed)")
    parser.add_argument("--device", default="h100", metavar="NAME",
                        help="GPU the cost model predicts each kernel's time on "
                             "(a100-40gb, a100-80gb, h100, h200; default h100)")
    add_compile_options(parser)


def run(args: argparse.Namespace) -> int:
    from triton_backend.driver.module_runner import compile_hlo  # noqa: PLC0415



    try:  # an unknown device is an error before anything is compiled
        device_spec(args.device)
    except ValueError as err:
        raise FusionCompilerError(str(err), where="--device") from None
    module = read_module(args.file)
    compiled = compile_hlo(module, target=args.target, tiling=parse_tiling(args.tile),
                           fuse=not args.no_fuse)
    out_dir = Path(args.output_dir)
    report = build_report(compiled, device=args.device)
    write_kernels(compiled, report, out_dir)
    if args.target:
        report = compile_for_target(report, out_dir, TARGETS[args.target])
    json_path, text_path = write_report(report, out_dir)
    print(render_text(report), end="")
    print(f"{len(report.fusions)} kernel file(s), {json_path.name} and {text_path.name} "
          f"written to {out_dir}")
    return 0
