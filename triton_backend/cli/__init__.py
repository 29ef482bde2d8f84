"""``fusion-compile``: the command line.

Each subcommand lives in its own module of this package, exposing ``HELP`` (one line),
``add_arguments(parser)`` and ``run(args) -> int``.  Modules are imported only when their
subcommand runs, so ``check``/``evaluate``/``indexing``/``layout``/``tile`` never import torch
or triton and start in well under a second.

Errors of the project's own types (``fusion.errors.FusionCompilerError``) are printed with
their location and give exit status 1; nothing else is caught, so internal bugs stay visible.
"""
from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

from fusion.errors import FusionCompilerError

# Subcommand name -> module (alphabetical).  A subcommand whose module is not present yet is
# simply not offered.
SUBCOMMANDS: dict[str, str] = {
    "autotune": "triton_backend.cli.autotune_command",
    "check": "triton_backend.cli.check_command",
    "compile": "triton_backend.cli.compile_command",
    "evaluate": "triton_backend.cli.evaluate_command",
    "fuse": "triton_backend.cli.fuse_command",
    "indexing": "triton_backend.cli.indexing_command",
    "layout": "triton_backend.cli.layout_command",
    "run": "triton_backend.cli.run_command",
    "tile": "triton_backend.cli.tile_command",
}


def _available() -> dict[str, str]:
    found = {}
    for name, module in SUBCOMMANDS.items():
        if importlib.util.find_spec(module) is not None:
            found[name] = module
    return found


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The argument parser; with ``only``, imports just that subcommand's module."""
    parser = argparse.ArgumentParser(
        prog="fusion-compile",
        description="A Triton-backed fusion compiler for XLA HLO.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, module_name in _available().items():
        if only is not None and name != only:
            sub.add_parser(name, help="(see fusion-compile %s --help)" % name)
            continue
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``fusion-compile`` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(only=command if command in SUBCOMMANDS else None)
    args = parser.parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except FusionCompilerError as err:
        print(f"fusion-compile {args.command}: error: {err}", file=sys.stderr)
        return 1
    except FileNotFoundError as err:
        print(f"fusion-compile {args.command}: error: {err}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
