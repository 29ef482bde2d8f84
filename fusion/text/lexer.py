"""A hand-written lexer for HLO text.

The tokens are deliberately coarse: a ``NUM`` token is any word that starts with a digit (or a
sign then a digit, ``inf`` or ``nan``), so ``2x3``, ``0_0x1_-2_1``, ``1e-05`` and ``-inf`` are
single tokens that the parser interprets according to the attribute it is reading, as XLA's
parser does.  Every pattern is a single pass with no nested quantifiers, so lexing is linear.

Some HLO syntax is easier to read as characters than as tokens (layouts, opaque attribute
values such as ``metadata={...}``); the lexer exposes its position for that and can be
re-synchronised with ``seek``.

>>> lx = Lexer('ROOT add.1 = f32[2]{0} add(p0, p1) // sum')
>>> [(t.kind, t.text) for t in lx.tokens()][:5]
[('NAME', 'ROOT'), ('NAME', 'add.1'), ('=', '='), ('NAME', 'f32'), ('[', '[')]
"""
from __future__ import annotations

import bisect
import re
from typing import Iterator, NamedTuple

from fusion.errors import HloParseError
from fusion.ir.hlo_module import SourceLocation

# Whitespace and comments; an unterminated /* is caught separately to give a good message.
_SKIP = re.compile(r"(?:[ \t\r\n]+|//[^\n]*|/\*(?:[^*]|\*(?!/))*\*/)*")
#: A name after its optional ``%``: dashes inside, but not before ``>`` (``->`` is a token).
NAME_BODY = r"[A-Za-z_][A-Za-z0-9_.]*(?:-(?!>)[A-Za-z0-9_.]*)*"
#: The blanks between tokens (comments aside).
BLANKS = r"[ \t\r\n]*"
_TOKENS = r"""
    (?P<STRING>"[^"\\\n]*(?:\\.[^"\\\n]*)*")
  | (?P<ARROW>->)
  | (?P<LE><=)
  | (?P<ELLIPSIS>\.\.\.)
  | (?P<NUM>[-+]?(?:[0-9][0-9A-Za-z_.]*(?:(?<=[eEx_])[-+][0-9A-Za-z_.]+)*|inf\b|nan\b))
  | (?P<NAME>%?""" + NAME_BODY + r""")
  | (?P<PUNCT>[=,(){}\[\]:*])
"""
_TOKEN = re.compile(_TOKENS, re.VERBOSE)
# Blanks then a token in one match, the common case (parsing is lexing-bound); anything else
# (a comment, the end, an error) takes the general path.  No token starts with a blank, so
# backtracking into the blanks cannot make a token of them.
_BLANKS_TOKEN = re.compile(BLANKS + "(?:" + _TOKENS + ")", re.VERBOSE)
_KINDS = {"ARROW": "->", "LE": "<=", "ELLIPSIS": "..."}


class Token(NamedTuple):
    """One token: ``kind`` is ``NAME``, ``NUM``, ``STRING``, ``->``, ``<=``, ``...``, ``EOF``
    or the punctuation character itself; ``pos`` is its offset in the text.

    (A named tuple: a module of a few thousand lines is tens of thousands of tokens, and a
    frozen dataclass costs twice as much to build.)
    """

    kind: str
    text: str
    pos: int
    end: int


class Lexer:
    """Tokens of an HLO text, read on demand with arbitrary look-ahead."""

    def __init__(self, text: str) -> None:
        self.text = text
        self._pos = 0
        self._buffer: list[Token] = []
        self._line_starts: list[int] | None = None

    # -- positions ---------------------------------------------------------------------------

    def location(self, pos: int) -> SourceLocation:
        """1-based line and column of offset ``pos``."""
        if self._line_starts is None:
            self._line_starts = [0] + [m.end() for m in _NEWLINE.finditer(self.text)]
        line = bisect.bisect_right(self._line_starts, pos)
        return SourceLocation(line, pos - self._line_starts[line - 1] + 1)

    def error(self, message: str, pos: int, *, text: str | None = None,
              expected: str | None = None) -> HloParseError:
        """An ``HloParseError`` at offset ``pos``; ``text`` defaults to the rest of that line."""
        loc = self.location(pos)
        if text is None:
            end = self.text.find("\n", pos)
            text = self.text[pos : end if end >= 0 else len(self.text)][:80]
        return HloParseError(message, line=loc.line, column=loc.column, text=text or "<end of input>",
                             expected=expected)

    # -- tokens ------------------------------------------------------------------------------

    def _lex_one(self, pos: int) -> Token:
        text = self.text
        m = _BLANKS_TOKEN.match(text, pos)
        if m is not None:
            kind = m.lastgroup
            end = m.end()
            tok_text = m.group(kind)
            if kind == "PUNCT":
                kind = tok_text
            elif kind in _KINDS:
                kind = _KINDS[kind]
            return Token(kind, tok_text, end - len(tok_text), end)
        pos = _SKIP.match(text, pos).end()
        if pos < len(text) and text[pos] == "/" and text.startswith("/*", pos):
            raise self.error("unterminated /* comment", pos, expected="'*/' closing the comment")
        if pos >= len(text):
            return Token("EOF", "", pos, pos)
        m = _TOKEN.match(text, pos)
        if m is None:
            if text[pos] == '"':
                raise self.error("unterminated string", pos, expected='a closing \'"\' on the same line')
            raise self.error(f"unexpected character {text[pos]!r}", pos, text=text[pos : pos + 20],
                             expected="a name, number, string, shape or punctuation")
        kind = m.lastgroup
        tok_text = m.group()
        if kind == "PUNCT":
            kind = tok_text
        elif kind == "ARROW":
            kind = "->"
        elif kind == "LE":
            kind = "<="
        elif kind == "ELLIPSIS":
            kind = "..."
        return Token(kind, tok_text, pos, m.end())

    def peek(self, k: int = 0) -> Token:
        """The ``k``-th token ahead without consuming it."""
        buffer = self._buffer
        while len(buffer) <= k:
            buffer.append(self._lex_one(buffer[-1].end if buffer else self._pos))
        return buffer[k]

    def next(self) -> Token:
        buffer = self._buffer
        tok = buffer.pop(0) if buffer else self._lex_one(self._pos)
        self._pos = tok.end
        return tok

    def expect(self, kind: str, expected: str) -> Token:
        """The next token, which must be of ``kind``; else an error saying ``expected``.

        >>> Lexer("{1}").expect("{", "'{' opening a list").text
        '{'
        >>> Lexer("1}").expect("{", "'{' opening a list")
        Traceback (most recent call last):
        fusion.errors.HloParseError: 1:1: expected '{' but found '1'...
        """
        tok = self.next()
        if tok.kind != kind:
            raise self.error(f"expected {kind!r} but found {tok.text or 'end of input'!r}",
                             tok.pos, expected=expected)
        return tok

    def tokens(self) -> Iterator[Token]:
        """All remaining tokens up to (not including) EOF."""
        while self.peek().kind != "EOF":
            yield self.next()

    # -- character-level access --------------------------------------------------------------

    @property
    def pos(self) -> int:
        """Offset just after the last consumed token (look-ahead is not consumed)."""
        return self._pos

    def seek(self, pos: int) -> None:
        """Continue lexing at ``pos``, dropping any look-ahead."""
        self._pos = pos
        self._buffer.clear()

    def skip_space(self, pos: int) -> int:
        """Offset of the first non-blank, non-comment character at or after ``pos``."""
        return _SKIP.match(self.text, pos).end()

    def balanced(self, pos: int) -> int:
        """End offset of the bracketed text opening at ``pos`` (``{``, ``(`` or ``[``).

        Strings inside are skipped whole, so ``{op_name="a}b"}`` is one unit.
        """
        text = self.text
        closers = {"{": "}", "(": ")", "[": "]"}
        stack = [closers[text[pos]]]
        i = pos + 1
        n = len(text)
        while i < n:
            c = text[i]
            if c == '"':
                i = self._string_end(i)
                continue
            if c in closers:
                stack.append(closers[c])
            elif c in ")]}":
                if c != stack[-1]:
                    raise self.error(f"mismatched {c!r}", i, expected=f"{stack[-1]!r}")
                stack.pop()
                if not stack:
                    return i + 1
            i += 1
        raise self.error(f"unbalanced {text[pos]!r}", pos, expected=f"a matching {stack[-1]!r}")

    def _string_end(self, pos: int) -> int:
        """End offset of the quoted string opening at ``pos``."""
        m = _STRING_BODY.match(self.text, pos)
        if m is None:
            raise self.error("unterminated string", pos, expected='a closing \'"\'')
        return m.end()

    def raw_value(self, pos: int) -> int:
        """End offset of an attribute value of unknown syntax starting at ``pos``.

        The value runs to the first ``,`` or line break outside brackets and strings, or to an
        unmatched closing bracket.
        """
        text = self.text
        i = pos
        n = len(text)
        while i < n:
            c = text[i]
            if c in "{([":
                i = self.balanced(i)
                continue
            if c == '"':
                i = self._string_end(i)
                continue
            if c in ",\n)]}" or text.startswith("//", i) or text.startswith("/*", i):
                break
            i += 1
        while i > pos and text[i - 1] in " \t\r":
            i -= 1
        return i


_STRING_BODY = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NEWLINE = re.compile("\n")
