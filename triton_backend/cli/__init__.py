"""``fusion-compile``: the command line.

Each subcommand lives in its own module of this package, exposing ``HELP`` (one line),
``add_arguments(parser)`` and ``run(args) -> int``.  Modules are imported only when their
subcommand runs, so ``cache``/``check``/``evaluate``/``fuse``/``indexing``/``layout``/``tile``/
``tuning`` never import torch or triton and start in well under a second.

Common options, on the main parser and on every subcommand: ``--json`` (one JSON document on
standard output, ``json_output``), ``-v``/``-vv`` (INFO/DEBUG logging to stderr,
``fusion.logs``); ``--version`` on the main parser.

Errors of the project's own types (``fusion.errors.FusionCompilerError``) are printed
compiler-style with their file, line and column (``diagnostics``), or as the ``error`` object
of the JSON document; exit statuses are ``diagnostics.ExitStatus``: 1 for the input, 2 for
usage (argparse's own errors and ``BadArgumentError``), 3 for a failed ``--check``.  Nothing
else is caught, so internal bugs stay visible.
"""
from __future__ import annotations

import argparse
import functools
import importlib
import importlib.util
import sys
from typing import NoReturn

from triton_backend.runtime.version import __version__

# Nothing else at the top: ``--version`` answers after argparse and the version alone (the
# logging, diagnostics and JSON modules cost a third of its start-up); ``dispatch``, which
# imports them, is imported once the arguments are parsed.

# Subcommand name -> module (alphabetical).  A subcommand whose module is not present yet is
# simply not offered.
SUBCOMMANDS: dict[str, str] = {
    "autotune": "triton_backend.cli.autotune_command",
    "cache": "triton_backend.cli.cache_command",
    "check": "triton_backend.cli.check_command",
    "compile": "triton_backend.cli.compile_command",
    "evaluate": "triton_backend.cli.evaluate_command",
    "fuse": "triton_backend.cli.fuse_command",
    "indexing": "triton_backend.cli.indexing_command",
    "layout": "triton_backend.cli.layout_command",
    "run": "triton_backend.cli.run_command",
    "tile": "triton_backend.cli.tile_command",
    "tuning": "triton_backend.cli.tuning_command",
    "vjp": "triton_backend.cli.vjp_command",
}


@functools.cache
def _available() -> dict[str, str]:
    # Once per process: ``find_spec`` walks sys.path for each subcommand (a test suite or a
    # notebook calls ``main`` many times).
    found = {}
    for name, module in SUBCOMMANDS.items():
        if importlib.util.find_spec(module) is not None:
            found[name] = module
    return found


class _Parser(argparse.ArgumentParser):
    """argparse with usage errors as JSON documents when ``--json`` was given."""

    def __init__(self, *args, json_mode: bool = False, command: str = "", **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.json_mode = json_mode
        self.command = command

    def error(self, message: str) -> NoReturn:
        if self.json_mode:
            from triton_backend.cli.dispatch import usage_error_json

            self.exit(usage_error_json(self.command, message))
        super().error(message)


def _common_options(parser: argparse.ArgumentParser, *, top: bool) -> None:
    # On the main parser and on each subcommand, so ``fusion-compile run x.hlo -v`` works too;
    # SUPPRESS keeps a subcommand's absent flag from resetting the main parser's.
    default = 0 if top else argparse.SUPPRESS
    parser.add_argument("-v", "--verbose", action="count", default=default,
                        help="log decisions to stderr: -v INFO, -vv DEBUG (or FUSION_LOG)")
    if "--json" not in parser._option_string_actions:
        parser.add_argument("--json", action="store_true",
                            default=False if top else argparse.SUPPRESS,
                            help="print one JSON document (docs/cli.md), errors included")


def build_parser(only: str | None = None, json_mode: bool = False) -> argparse.ArgumentParser:
    """The argument parser; with ``only``, imports just that subcommand's module."""
    parser = _Parser(json_mode=json_mode, command=only or "",
        prog="fusion-compile",
        description="A Triton-backed fusion compiler for XLA HLO.",
        epilog="Exit status: 0 success, 1 error in the input or its compilation, 2 usage "
               "error, 3 a --check found a mismatch.  Environment: FUSION_LOG, "
               "FUSION_KERNEL_CACHE_DIR, FUSION_KERNEL_CACHE_MAX_BYTES, FUSION_TUNING_DB "
               "(docs/cli.md).",
    )
    parser.add_argument("--version", action="version", version=f"fusion-compile {__version__}")
    _common_options(parser, top=True)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, module_name in _available().items():
        if only is not None and name != only:
            sub.add_parser(name, help="(see fusion-compile %s --help)" % name,
                           json_mode=json_mode, command=name)
            continue
        module = importlib.import_module(module_name)
        p = sub.add_parser(name, help=module.HELP, description=module.HELP,
                           json_mode=json_mode, command=name)
        module.add_arguments(p)
        _common_options(p, top=False)
        # The module, not its ``run``: the parser is reused (``_parser``), the function
        # is looked up per call.
        p.set_defaults(_module=module_name)
    return parser


@functools.cache
def _parser(only: str | None, json_mode: bool) -> argparse.ArgumentParser:
    # Built once per process and arguments: building costs about 9 ms (argparse looks up a
    # translation of every help string), and a notebook or a test suite calls main often.
    return build_parser(only=only, json_mode=json_mode)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``fusion-compile`` console script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    only = command if command in SUBCOMMANDS else None
    if only is None and "--version" in argv:
        only = ""  # no subcommand module imported: --version works without numpy or torch
    parser = _parser(only, "--json" in argv)
    args = parser.parse_args(argv)
    from triton_backend.cli.dispatch import run_parsed

    return run_parsed(args, argv)


if __name__ == "__main__":
    sys.exit(main())
