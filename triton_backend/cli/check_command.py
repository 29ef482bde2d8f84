"""``fusion-compile check FILE.hlo [--json] [--triton]``: parse and verify an HLO module, and summarize it.

Prints the computations, the fusions grouped by kind and how often each op is used; exits 0
when the module is valid.  An invalid module is reported with the error's line:column and exit
status 1 (with ``--json``, as the ``error`` field of the JSON object).  ``-`` reads standard
input.  ``read_module``/``read_verified_module`` are how every subcommand reads its module.  ``--triton`` also lists
the ops of a valid module the Triton path does not cover (``triton_backend.driver.op_coverage``), with
line:column and reason (JSON: ``triton_uncovered``), and the library calls it runs on the host
(FFT, linear algebra, top-k; JSON: ``triton_library_calls``); neither changes the exit status.
"""
from __future__ import annotations

import argparse
from collections import Counter
from typing import Any

from fusion.errors import FusionCompilerError
from fusion.ir.hlo_module import HloModule
from fusion.logs import get_logger
from fusion.text.parser import parse_hlo
from fusion.shapes.verifier import verify_module
from triton_backend.cli.diagnostics import error_record, read_source, sources_read
from triton_backend.cli.json_output import emit
from triton_backend.driver.op_coverage import describe, library_call_sites, uncovered_ops

_log = get_logger("triton_backend.cli")

HELP = "parse and verify an HLO module; list its computations, fusions and ops"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE.hlo",
                        help="HLO text (as XLA or JAX prints it); - reads standard input")
    parser.add_argument("--triton", action="store_true",
                        help="also list the ops the Triton path does not cover, and why")


def read_text(path: str) -> str:
    """The text of ``path`` (``-``: standard input); an unreadable file is a located error."""
    return read_source(path).text


def read_module(path: str) -> HloModule:
    """Read and parse ``path``; an unreadable file is a located error, not a traceback."""
    return parse_hlo(read_text(path))


def read_verified_module(path: str) -> HloModule:
    """``read_module`` and the verifier: every subcommand works on a valid module only."""
    module = read_module(path)
    verify_module(module)
    _log.info("%s: module %s parsed and verified (%d computations)", path, module.name,
              len(module.computations))
    return module


def summarize(module: HloModule) -> dict[str, Any]:
    """Computations, fusions by kind (``{"kLoop": [names]}``) and op counts of ``module``."""
    fusions: dict[str, list[str]] = {}
    for _, instr in module.fusions():
        fusions.setdefault(str(instr.attr("kind", "?")), []).append(instr.name)
    ops = Counter(i.opcode for c in module.computations for i in c.instructions)
    return {
        "module": module.name,
        "computations": [c.name for c in module.computations],
        "fusions": {k: fusions[k] for k in sorted(fusions)},
        "ops": dict(sorted(ops.items())),
    }


def run(args: argparse.Namespace) -> int:
    if not args.json:
        module = read_verified_module(args.file)
        _print_text(module)
        if getattr(args, "triton", False):
            _print_uncovered(module)
        return 0
    report: dict[str, Any] = {"module": None, "valid": False, "computations": [],
                              "fusions": {}, "ops": {}}
    error = None
    try:
        module = read_module(args.file)
        report.update(summarize(module))
        verify_module(module)
        report["valid"] = True
        if getattr(args, "triton", False):
            report["triton_uncovered"] = _uncovered_json(module)
            report["triton_library_calls"] = _library_calls_json(module)
    except (FusionCompilerError, OSError) as err:
        error = error_record(err, sources_read())
    emit("check", report, error=error)
    return 0 if report["valid"] else 1


def _print_text(module: HloModule) -> None:
    summary = summarize(module)
    entry = module.entry
    print(f"module {module.name}: valid")
    print(f"computations ({len(module.computations)}):")
    for comp in module.computations:
        marker = " (ENTRY)" if comp.name == entry.name else ""
        print(f"  {comp.name}{marker}: {len(comp.instructions)} instructions, root {comp.root_name}")
    print(f"fusions ({sum(len(v) for v in summary['fusions'].values())}):")
    for kind, names in summary["fusions"].items():
        print(f"  {kind}: {', '.join(names)}")
    print("ops:")
    for op, count in summary["ops"].items():
        print(f"  {op}: {count}")


def _uncovered_json(module: HloModule) -> list[dict[str, Any]]:
    out = []
    for item in uncovered_ops(module):
        loc = item.instruction.location
        out.append({"op": item.instruction.opcode, "instruction": item.instruction.name,
                    "line": loc.line if loc else None, "column": loc.column if loc else None,
                    "reason": item.reason})
    return out


def _library_calls_json(module: HloModule) -> list[dict[str, Any]]:
    out = []
    for site in library_call_sites(module):
        loc = site.instruction.location
        out.append({"op": site.instruction.opcode, "instruction": site.instruction.name,
                    "line": loc.line if loc else None, "column": loc.column if loc else None,
                    "routine": site.routine, "target": site.target})
    return out


def _print_library_calls(module: HloModule) -> None:
    sites = library_call_sites(module)
    if sites:
        print(f"triton: {len(sites)} library call(s), run by torch on the host between kernels:")
    for site in sites:
        loc = site.instruction.location
        print(f"  {loc if loc is not None else '?'} {site.instruction.opcode} "
              f"%{site.instruction.name}: {site.routine} ({site.target})")


def _print_uncovered(module: HloModule) -> None:
    _print_library_calls(module)
    uncovered = uncovered_ops(module)
    if not uncovered:
        print("triton: every op is covered")
        return
    print(f"triton: {len(uncovered)} op(s) not covered:")
    for item in uncovered:
        print(f"  {describe(item)}")
