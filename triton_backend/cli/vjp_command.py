"""``fusion-compile vjp FILE.hlo [-o OUT.hlo] [--wrt 0,2]``: the backward module of a module.

Derives ``fusion.autodiff.vjp``: parameters are the forward's parameters followed by one
cotangent per forward output, the result a tuple of one gradient per differentiated
parameter (every floating-point or complex parameter, or those ``--wrt`` lists).  Prints the
module's text, or writes it to ``-o``; ``--json`` prints one document with the text (``hlo``, null with
``-o``) and the differentiated parameters.  An op without a VJP rule is reported with its
line:column.  Never imports torch or triton.
"""
from __future__ import annotations

import argparse
import sys

from fusion.autodiff import default_wrt, vjp
from fusion.errors import BadArgumentError
from fusion.logs import get_logger
from fusion.text.printer import print_hlo
from triton_backend.cli.check_command import read_verified_module
from triton_backend.cli.json_output import emit
from triton_backend.cli.output_files import check_output_path
from triton_backend.runtime.atomic_files import atomic_output

_log = get_logger("triton_backend.cli")

HELP = "derive the backward (VJP) module of an HLO module: gradients from cotangents"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE.hlo",
                        help="HLO text (as XLA or JAX prints it); - reads standard input")
    parser.add_argument("-o", "--output", metavar="OUT.hlo",
                        help="write the backward module here instead of to stdout")
    parser.add_argument("--wrt", metavar="I,J,...",
                        help="the ENTRY parameters to differentiate, by number "
                             "(default: every floating-point or complex parameter)")


def parse_wrt(text: str | None) -> list[int] | None:
    """``"0,2"`` -> ``[0, 2]``; ``None`` stays ``None``.

    >>> parse_wrt("0, 2")
    [0, 2]
    >>> parse_wrt("x")
    Traceback (most recent call last):
    ...
    fusion.errors.BadArgumentError: --wrt: 'x' is not a comma-separated list of parameter numbers
    """
    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise BadArgumentError(f"{text!r} is not a comma-separated list of parameter numbers",
                               where="--wrt") from None


def run(args: argparse.Namespace) -> int:
    output = check_output_path(args.output, "-o") if args.output else None
    wrt = parse_wrt(args.wrt)
    module = read_verified_module(args.file)
    backward = vjp(module, wrt)
    text = print_hlo(backward)
    chosen = list(default_wrt(module) if wrt is None else wrt)
    _log.info("vjp of %s with respect to parameters %s: %d instructions", module.name, chosen,
              len(backward.entry.instructions))
    if output is not None:
        with atomic_output(output, "w") as handle:
            handle.write(text)
    if args.json:
        emit("vjp", {"module": backward.name, "wrt": chosen,
                     "hlo": None if output is not None else text,
                     "output_file": None if output is None else str(output)})
        return 0
    if output is None:
        sys.stdout.write(text)
    return 0
