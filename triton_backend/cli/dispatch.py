"""Running a parsed ``fusion-compile`` command: logging, the subcommand, its errors reported
compiler-style or as JSON (``diagnostics``, ``json_output``).

Apart from the package's ``main``, which parses the arguments: ``--version`` is answered
during parsing and never imports this module, nor the logging, diagnostics and JSON modules
it brings (a third of ``--version``'s start-up).
"""
from __future__ import annotations

import argparse
import importlib
import logging
import sys

from fusion import logs
from fusion.errors import BadArgumentError, FusionCompilerError
from triton_backend.cli.diagnostics import (
    ExitStatus,
    SourceFile,
    error_record,
    format_error,
    recording_sources,
)
from triton_backend.cli.json_output import emit
from triton_backend.runtime.version import __version__

_log = logs.get_logger("triton_backend.cli")


def usage_error_json(command: str, message: str) -> int:
    """Print argparse's usage error as the JSON document of ``command``; the exit status."""
    emit(command, {}, error={"file": None, "line": None, "column": None, "message": message,
                             "kind": "usage", "where": None, "expected": None})
    return int(ExitStatus.USAGE)


def _enable_logging(verbose: int) -> None:
    if verbose >= 2:
        logs.enable(logging.DEBUG)
    elif verbose == 1:
        logs.enable(logging.INFO)


def _report(args: argparse.Namespace, err: BaseException, sources: list[SourceFile],
            status: ExitStatus) -> int:
    if getattr(args, "json", False):
        emit(args.command, {}, error=error_record(err, sources))
    elif isinstance(err, FusionCompilerError):
        print(format_error(err, sources, args.command), file=sys.stderr)
    else:
        print(f"fusion-compile {args.command}: error: {err}", file=sys.stderr)
    return int(status)


def run_parsed(args: argparse.Namespace, argv: list[str]) -> int:
    """Run the subcommand ``args`` names (parsed from ``argv``); returns the exit status.

    Errors of the project's own types are reported with their location; nothing else is
    caught, so internal bugs stay visible."""
    _enable_logging(args.verbose)
    _log.info("fusion-compile %s %s: %s", __version__, args.command, " ".join(argv))
    with recording_sources() as sources:
        try:
            return int(importlib.import_module(args._module).run(args) or 0)
        except BadArgumentError as err:
            return _report(args, err, sources, ExitStatus.USAGE)
        except FusionCompilerError as err:
            return _report(args, err, sources, ExitStatus.ERROR)
        except OSError as err:  # a missing file, a full disk: the message, not a traceback
            return _report(args, err, sources, ExitStatus.ERROR)
        except KeyboardInterrupt:
            print(f"fusion-compile {args.command}: interrupted", file=sys.stderr)
            return 130


__all__ = ["run_parsed", "usage_error_json"]
