"""Turning HLO names and text into safe pieces of generated Python source.

HLO names may contain anything (``fusion.3``, ``add-1``, unicode, quotes); generated kernels
use them as local variable names and quote the HLO in comments, so both must be made inert:

* :func:`sanitize` keeps ``[A-Za-z0-9_]``, replaces everything else by ``_`` and prefixes
  ``v_`` to names that would start with a digit, be empty, be a keyword (hard or soft), a
  builtin, a dunder, or a name the generated kernel itself uses (``tl``, ``triton``, ...).
* :class:`IdentifierAllocator` makes the names of one kernel distinct: the first name to
  claim an identifier keeps it, later ones get ``_1``, ``_2``, ... (deterministic in call
  order), and the same original name always maps to the same identifier.
* :func:`comment_block` embeds arbitrary text as ``# `` comment lines.  The Python tokenizer
  ends a comment only at ``\\n`` or ``\\r`` (it reads lines with universal newlines), but
  ``str.splitlines`` (used by ``inspect``/``textwrap``, which Triton calls on kernel source)
  also splits at ``\\x0b \\x0c \\x1c \\x1d \\x1e \\x85 \\u2028 \\u2029``, and NUL makes the
  file unparsable.  So the text is split with ``splitlines`` and every remaining
  non-printable character (those line breaks can only remain inside a line if they were
  not line breaks) is written as a backslash escape: no line of the comment can escape.
* :func:`string_literal` is ``ascii()``: a pure-ASCII literal that evaluates to the text.

>>> sanitize("fusion.3"), sanitize("3d"), sanitize("print"), sanitize("__class__")
('fusion_3', 'v_3d', 'v_print', 'v___class__')
"""
from __future__ import annotations

import builtins
import keyword
import re

#: Names a generated kernel module binds itself; an HLO value may never shadow them.
KERNEL_RESERVED_NAMES = frozenset({
    "tl", "triton", "torch", "np", "libdevice", "xla_math", "bit_packing", "math", "ordered_sums",
})

_NOT_IDENTIFIER_CHAR = re.compile(r"[^A-Za-z0-9_]")
_FORBIDDEN = frozenset(keyword.kwlist) | frozenset(keyword.softkwlist) | frozenset(dir(builtins))


def sanitize(name: str, reserved: frozenset[str] = KERNEL_RESERVED_NAMES) -> str:
    """A valid, non-shadowing Python identifier derived from ``name`` (not necessarily unique).

    >>> sanitize("add-1.2"), sanitize("héllo"), sanitize(""), sanitize("tl"), sanitize("class")
    ('add_1_2', 'h_llo', 'v_', 'v_tl', 'v_class')
    """
    candidate = _NOT_IDENTIFIER_CHAR.sub("_", name)
    if (not candidate or candidate[0].isdigit() or candidate in _FORBIDDEN
            or candidate in reserved or candidate.startswith("__")):
        candidate = "v_" + candidate
    return candidate


class IdentifierAllocator:
    """Unique identifiers for the names of one kernel.

    >>> names = IdentifierAllocator()
    >>> names.allocate("a.1"), names.allocate("a-1"), names.allocate("a.1"), names.allocate("a_1_1")
    ('a_1', 'a_1_1', 'a_1', 'a_1_1_1')
    """

    def __init__(self, reserved: frozenset[str] = KERNEL_RESERVED_NAMES) -> None:
        self._reserved = frozenset(reserved)
        self._by_original: dict[str, str] = {}
        self._taken: set[str] = set()
        self._next: dict[str, int] = {}

    def allocate(self, original: str) -> str:
        """The identifier for ``original``, allocating a fresh one on first use."""
        existing = self._by_original.get(original)
        if existing is not None:
            return existing
        candidate = self.fresh(original)
        self._by_original[original] = candidate
        return candidate

    def fresh(self, hint: str) -> str:
        """A new identifier never returned before (for temporaries), based on ``hint``.

        >>> names = IdentifierAllocator()
        >>> names.fresh("t"), names.fresh("t")
        ('t', 't_1')
        """
        base = sanitize(hint, self._reserved)
        # Counting on from the last suffix this base got: a value emitted at many indices
        # asks for the same hint thousands of times (probing from 0 was quadratic).
        counter = self._next.get(base, 0)
        candidate = base if counter == 0 else f"{base}_{counter}"
        while candidate in self._taken:
            counter += 1
            candidate = f"{base}_{counter}"
        self._next[base] = counter + 1
        self._taken.add(candidate)
        return candidate

    def mapping(self) -> dict[str, str]:
        """A copy of the original-name to identifier map, in allocation order."""
        return dict(self._by_original)


def _escape_char(char: str) -> str:
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _inert_line(line: str) -> str:
    return "".join(c if c.isprintable() or c == "\t" else _escape_char(c) for c in line)


def comment_block(text: str, indent: str = "") -> str:
    """``text`` as comment lines (``# `` prefixed), one per line of ``text``, ending in ``\\n``.

    >>> print(comment_block("ROOT %x = f32[] add(%a, %b)\\u2028print('owned')"), end="")
    # ROOT %x = f32[] add(%a, %b)
    # print('owned')
    >>> comment_block("a\\x00b")
    '# a\\\\x00b\\n'
    """
    lines = text.splitlines() or [""]
    return "".join(f"{indent}# {_inert_line(line)}".rstrip() + "\n" for line in lines)


def string_literal(text: str) -> str:
    """A pure-ASCII Python string literal that evaluates to ``text``.

    >>> print(string_literal("it's\\u2028"))
    "it's\\u2028"
    """
    return ascii(text)
