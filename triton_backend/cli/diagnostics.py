"""How ``fusion-compile`` reads its input and reports errors: exit statuses, compiler-style
messages (``FILE:LINE:COL: error: MESSAGE``, the source line, a caret), did-you-mean hints.

The HLO files a command reads are recorded (``read_source``) while ``recording_sources`` is
active, so that an error located by line and column anywhere later (the verifier, the fusion
pass, a lowering rule) is printed with its file name and source line; ``-`` is standard input,
named ``<stdin>``.

>>> src = SourceFile("m.hlo", "HloModule m\\nENTRY e {\\n  ROOT x = f32[] foo()\\n}\\n")
>>> from fusion.errors import HloParseError
>>> print(format_error(HloParseError("unknown opcode 'foo'", line=3, column=18, text="foo"),
...                    [src], "check"))
m.hlo:3:18: error: unknown opcode 'foo'
  ROOT x = f32[] foo()
                 ^~~
>>> did_you_mean("fusoin", ["fusion", "fusion.1", "add"])
'; did you mean fusion, fusion.1?'
"""
from __future__ import annotations

import contextlib
import difflib
import enum
import sys
from collections.abc import Iterable, Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fusion.errors import FusionCompilerError, HloParseError

#: The name a module read from standard input (``-``) gets in messages.
STDIN_NAME = "<stdin>"


class ExitStatus(enum.IntEnum):
    """``fusion-compile``'s exit statuses (``docs/cli.md``)."""

    OK = 0
    #: The input cannot be read, parsed, verified, evaluated or compiled, or an output file
    #: cannot be written.
    ERROR = 1
    #: A usage error: a malformed command line, or an option that names nothing valid.
    USAGE = 2
    #: ``--check`` ran and found an output out of tolerance.
    CHECK_FAILED = 3


@dataclass(frozen=True)
class SourceFile:
    """A text a command read: its display name (a path, or ``<stdin>``) and its content."""

    name: str
    text: str

    def line(self, number: int) -> str | None:
        """Line ``number`` (1-based) without its newline, or None past the end."""
        lines = self.text.splitlines()
        return lines[number - 1] if 1 <= number <= len(lines) else None


_SOURCES: ContextVar[list[SourceFile] | None] = ContextVar("fusion_compile_sources", default=None)


@contextlib.contextmanager
def recording_sources() -> Iterator[list[SourceFile]]:
    """Record every ``read_source`` inside the block into the yielded list."""
    recorded: list[SourceFile] = []
    token = _SOURCES.set(recorded)
    try:
        yield recorded
    finally:
        _SOURCES.reset(token)


def sources_read() -> list[SourceFile]:
    """The texts read so far inside ``recording_sources`` (empty outside it)."""
    return list(_SOURCES.get() or ())


def read_source(path: str) -> SourceFile:
    """The text of ``path`` (``-``: standard input); an unreadable file is a located error.

    >>> read_source("/nonexistent/x.hlo")
    Traceback (most recent call last):
    ...
    FileNotFoundError: no such file: /nonexistent/x.hlo
    """
    if path == "-":
        source = SourceFile(STDIN_NAME, sys.stdin.read())
    else:
        try:
            source = SourceFile(path, Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise FileNotFoundError(f"no such file: {path}") from None
        except IsADirectoryError:
            raise HloParseError(f"cannot read {path}: it is a directory", where=path) from None
        except (OSError, UnicodeDecodeError) as err:
            raise HloParseError(f"cannot read {path}: {err}", where=path) from None
    recorded = _SOURCES.get()
    if recorded is not None:
        recorded.append(source)
    return source


def did_you_mean(name: str, candidates: Iterable[str], n: int = 3) -> str:
    """``"; did you mean a, b?"`` for the closest ``candidates`` (difflib), else ``""``."""
    close = difflib.get_close_matches(name, list(candidates), n=n, cutoff=0.6)
    return f"; did you mean {', '.join(close)}?" if close else ""


def _source_for(err: FusionCompilerError, sources: Sequence[SourceFile]) -> SourceFile | None:
    # A line:column always refers to the HLO module, the first text a command reads.
    return sources[0] if sources and err.line is not None else None


def _caret_lines(source: SourceFile, err: FusionCompilerError) -> list[str]:
    text = source.line(err.line or 0)
    if text is None:
        return []
    column = max(1, err.column or 1)
    # Keep tabs before the column so the caret lines up in any editor.
    pad = "".join(c if c == "\t" else " " for c in text[: column - 1])
    width = 1
    snippet = (err.text or "").split("\n")[0]
    if snippet and text[column - 1:].startswith(snippet):
        width = max(1, len(snippet))
    return [text, f"{pad}^" + "~" * (width - 1)]


def format_error(err: FusionCompilerError, sources: Sequence[SourceFile], command: str) -> str:
    """The compiler-style message: ``FILE:LINE:COL: error: MESSAGE`` then the source line and
    a caret when the error is located, else ``fusion-compile COMMAND: error: ...``."""
    source = _source_for(err, sources)
    if source is None:
        return f"fusion-compile {command}: error: {err}"
    message = err.message
    if err.where:
        message += f" (in {err.where})"
    lines = [f"{source.name}:{err.line}:{err.column or 1}: error: {message}"]
    lines += _caret_lines(source, err)
    if err.expected:
        lines.append(f"  expected: {err.expected}")
    return "\n".join(lines)


def error_record(err: BaseException, sources: Sequence[SourceFile], kind: str | None = None
                 ) -> dict[str, Any]:
    """The ``error`` object of a JSON document: file, line, column, message, kind (the error
    class), where and expected (``docs/cli.md``)."""
    if isinstance(err, FusionCompilerError):
        source = _source_for(err, sources)
        return {"file": source.name if source else (sources[0].name if sources else None),
                "line": err.line, "column": err.column, "message": err.message,
                "kind": kind or type(err).__name__, "where": err.where,
                "expected": err.expected}
    return {"file": sources[0].name if sources else None, "line": None, "column": None,
            "message": str(err), "kind": kind or type(err).__name__, "where": None,
            "expected": None}
