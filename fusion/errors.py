"""The project's error types.  Every error a user can cause is one of these, with a location.

>>> e = HloParseError("expected ')'", line=3, column=17, text="add(p0, p1",
...                   expected="')' after the operand list")
>>> str(e).splitlines()[0]
"3:17: expected ')'"
"""
from __future__ import annotations


class FusionCompilerError(Exception):
    """Base of every error this project raises on bad input.

    ``line``/``column`` are 1-based positions in the HLO text when known; ``text`` is the
    offending text; ``expected`` says what would have been valid; ``where`` names the
    instruction or computation when there is no text position (e.g. for a built module).
    """

    def __init__(
        self,
        message: str,
        *,
        line: int | None = None,
        column: int | None = None,
        text: str | None = None,
        expected: str | None = None,
        where: str | None = None,
    ) -> None:
        self.message = message
        self.line = line
        self.column = column
        self.text = text
        self.expected = expected
        self.where = where
        super().__init__(self._format())

    def _format(self) -> str:
        prefix = ""
        if self.line is not None:
            prefix = f"{self.line}:{self.column if self.column is not None else 1}: "
        elif self.where:
            prefix = f"{self.where}: "
        out = prefix + self.message
        if self.line is not None and self.where:
            out += f" (in {self.where})"
        if self.text:
            out += f"\n  offending text: {self.text}"
        if self.expected:
            out += f"\n  expected: {self.expected}"
        return out


class HloParseError(FusionCompilerError):
    """The HLO text does not parse."""


class HloVerifyError(FusionCompilerError):
    """The module parses but is not valid HLO (bad shapes, missing operands, cycles, ...)."""


class UnsupportedOpError(FusionCompilerError):
    """A valid op that this phase of the compiler does not handle."""


class EvaluationError(FusionCompilerError):
    """The reference evaluator cannot run the module with the given inputs."""


class MissingAttributeError(FusionCompilerError, KeyError):
    """An instruction lacks an attribute its op needs (also a ``KeyError``, for old callers)."""

    __str__ = FusionCompilerError.__str__  # the located message, not KeyError's repr of it


class UnknownNameError(FusionCompilerError, KeyError):
    """A name that is not in its computation or module (also a ``KeyError``, for old callers)."""

    __str__ = FusionCompilerError.__str__


class NotAnArrayError(FusionCompilerError, TypeError):
    """An array shape was needed but the value is a tuple (also a ``TypeError``)."""


class IndexingError(FusionCompilerError, ValueError):
    """The indexing analysis cannot answer as asked: operands it cannot see, an operand or
    output that does not exist (also a ``ValueError``, for old callers)."""


class LoweringError(FusionCompilerError):
    """An unexpected failure inside one op's lowering rule, re-raised naming the instruction."""


class TilingError(FusionCompilerError):
    """A fusion cannot be tiled as asked (names the fusion and the instruction)."""


class LayoutError(FusionCompilerError):
    """A layout that is not valid for its shape (bad tile dims, bad ``minor_to_major``)."""


class NestedLayoutError(LayoutError):
    """A nested layout that is not well formed, or does not fit its vector."""


class IndexingMapParseError(FusionCompilerError):
    """The text of an indexing map (or affine map) does not parse."""


class BadArgumentError(FusionCompilerError):
    """An argument that names nothing valid or is malformed: an unknown device, fusion or
    instruction name, a malformed ``--tile`` (``fusion-compile`` exits with status 2, a usage
    error, for these; the API raises them for its own arguments too)."""


class OutputPathError(FusionCompilerError):
    """An output path that cannot be written: a directory, a parent that is a file, no
    permission, or a directory ``compile -o`` refuses to overwrite (``where`` names the option)."""


class IndexingCommandError(BadArgumentError):
    """A bad ``indexing`` command line: unknown instruction, missing or bad operand/output."""


class CacheError(FusionCompilerError):
    """A cache path that cannot be used (kernel cache, tuning database): not a directory, not
    writable, full, or an entry that is not a regular file; ``where`` names the path."""


class DistributedError(FusionCompilerError):
    """A module run on several processes (``torch.distributed``) that cannot go on: a world
    size other than the module's devices, a collective whose groups do not cover the ranks, a
    collective that failed or timed out, a process that died (``where`` names the op or rank)."""
