"""Reader of the text form of affine maps and indexing maps (see ``indexing_map_printer``);
``IndexingMap.parse`` builds the map from what
``read_indexing_map`` reads, so this module sits below ``indexing_map``.

Accepts the one-line form, the seed's multi-line form (runtime variables as symbols followed
by ``hlo:`` and map lines), ``UNDEFINED`` and ``KNOWN EMPTY``.  Floor division may be written
``floordiv`` (also ``floorDiv``) or ``/`` (XLA since 2026); ``mod`` or ``%``; ``ceildiv``.
A number directly before a variable multiplies it (``100d0``, as the seed writes).  Unary
minus binds tighter than ``*``/``floordiv``/``mod``, as in MLIR: write
``-((x) floordiv 11)`` for the negated quotient.  Variable names are free (``th_x``).

>>> parts = read_indexing_map("(d0)[s0] -> (d0 + s0), domain: d0 in [0, 9], s0 in [0, 3]")
>>> parts.num_dims, parts.num_symbols, [str(b) for b in parts.range_bounds]
(1, 1, ['[0, 3]'])
>>> str(parse_affine_map("(d0, d1) -> (d0 + d1 / 16, d1 % 16)"))
'(d0, d1) -> (d0 + d1 floordiv 16, d1 mod 16)'
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from fusion.errors import IndexingMapParseError
from tiling.maps.affine_expr import (
    AffineExpr,
    Constant,
    DimExpr,
    SymbolExpr,
    as_expr,
    ceildiv,
    floordiv,
    mod,
)
from tiling.maps.expr_variables import substitute
from tiling.maps.affine_map import AffineMap, RTVar
from tiling.maps.interval import Interval


_TOKEN = re.compile(r"\s*(?:(\d+)|([A-Za-z_][A-Za-z0-9_]*)|(->|[()\[\]{},+\-*/%:]))")
_KEYWORDS = {"floordiv": "floordiv", "ceildiv": "ceildiv", "mod": "mod"}


@dataclass
class _Tok:
    kind: str  # "int", "id", "op", "end"
    text: str
    pos: int


class _Parser:
    def __init__(self, text: str, pos: int = 0, end: int | None = None):
        self.text = text
        self.pos = pos
        self.end = len(text) if end is None else end
        self._peeked: _Tok | None = None

    # --- tokens ---------------------------------------------------------------------------
    def error(self, message: str, pos: int | None = None, expected: str | None = None):
        pos = self.pos if pos is None else pos
        line = self.text.count("\n", 0, pos) + 1
        column = pos - (self.text.rfind("\n", 0, pos) + 1) + 1
        snippet = self.text[pos: pos + 40].split("\n")[0]
        return IndexingMapParseError(message, line=line, column=column,
                                     text=snippet or "<end of text>", expected=expected)

    def peek(self) -> _Tok:
        if self._peeked is None:
            m = _TOKEN.match(self.text, self.pos, self.end)
            if m is None:
                rest = self.text[self.pos: self.end]
                if rest.strip() == "":
                    self._peeked = _Tok("end", "", self.end)
                else:
                    start = self.pos + len(rest) - len(rest.lstrip())
                    raise self.error(f"unexpected character {self.text[start]!r}", start)
            else:
                kind = "int" if m.group(1) else "id" if m.group(2) else "op"
                self._peeked = _Tok(kind, m.group(m.lastindex), m.start(m.lastindex))
                self._next_pos = m.end()
        return self._peeked

    def next(self) -> _Tok:
        tok = self.peek()
        if tok.kind != "end":
            self.pos = self._next_pos
        self._peeked = None
        return tok

    def accept(self, text: str) -> bool:
        if self.peek().text == text and self.peek().kind != "end":
            self.next()
            return True
        return False

    def expect(self, text: str, what: str) -> _Tok:
        tok = self.peek()
        if tok.text != text or tok.kind == "end":
            raise self.error(f"expected {text!r} {what}", tok.pos, expected=repr(text))
        return self.next()

    def integer(self, what: str) -> int:
        neg = self.accept("-")
        tok = self.next()
        if tok.kind != "int":
            raise self.error(f"expected an integer {what}", tok.pos, expected="an integer")
        return -int(tok.text) if neg else int(tok.text)

    # --- grammar --------------------------------------------------------------------------
    def name_list(self, close: str) -> list[str]:
        names: list[str] = []
        if self.accept(close):
            return names
        while True:
            tok = self.next()
            if tok.kind != "id":
                raise self.error("expected a variable name", tok.pos, expected="a name like d0")
            names.append(tok.text)
            if self.accept(close):
                return names
            self.expect(",", f"or {close!r} in the variable list")

    def header(self):
        """``(dims)[symbols]{rt vars} -> (results)``; names -> expressions, header order."""
        self.expect("(", "at the start of the map")
        dims = self.name_list(")")
        syms = self.name_list("]") if self.accept("[") else []
        rts = self.name_list("}") if self.accept("{") else []
        env: dict[str, AffineExpr] = {}
        for i, n in enumerate(dims):
            env[n] = DimExpr(i)
        for j, n in enumerate(syms + rts):
            env[n] = SymbolExpr(j)
        if len(env) != len(dims) + len(syms) + len(rts):
            raise self.error("duplicate variable name in the map header", 0)
        self.expect("->", "after the variable lists")
        self.expect("(", "before the results")
        results: list[AffineExpr] = []
        if not self.accept(")"):
            while True:
                results.append(self.expr(env))
                if self.accept(")"):
                    break
                self.expect(",", "or ')' between results")
        return dims, syms, rts, env, results

    def expr(self, env) -> AffineExpr:
        e = self.term(env)
        while True:
            if self.accept("+"):
                e = e + self.term(env)
            elif self.accept("-"):
                e = e - self.term(env)
            else:
                return e

    def term(self, env) -> AffineExpr:
        e = self.unary(env)
        while True:
            tok = self.peek()
            op = tok.text.lower() if tok.kind == "id" else tok.text if tok.kind == "op" else ""
            if op == "*":
                self.next()
                rhs = self.unary(env)
                try:
                    e = e * rhs
                except TypeError as err:
                    raise self.error(str(err), tok.pos) from None
            elif op in ("floordiv", "/", "ceildiv", "mod", "%"):
                self.next()
                rhs = self.unary(env)
                if not isinstance(rhs, Constant) or rhs.value == 0:
                    raise self.error(f"{op} needs a non-zero constant divisor", tok.pos)
                fn = floordiv if op in ("floordiv", "/") else ceildiv if op == "ceildiv" else mod
                e = fn(e, rhs.value)
            else:
                return e

    def unary(self, env) -> AffineExpr:
        if self.accept("-"):
            return -self.unary(env)
        tok = self.next()
        if tok.kind == "int":
            value = Constant(int(tok.text))
            nxt = self.peek()
            # `100d0`: a number glued to a name multiplies it (the seed's notation)
            if nxt.kind == "id" and nxt.pos == tok.pos + len(tok.text) and nxt.text in env:
                return value * self.unary(env)
            return value
        if tok.kind == "id":
            if tok.text not in env:
                raise self.error(f"unknown variable {tok.text!r}", tok.pos,
                                 expected="a variable declared in the map header")
            return env[tok.text]
        if tok.text == "(":
            e = self.expr(env)
            self.expect(")", "closing the parenthesized expression")
            return e
        raise self.error("expected an expression", tok.pos,
                         expected="a variable, a number, '-' or '('")

    def interval(self) -> Interval:
        self.expect("[", "opening the interval")
        lo = self.integer("as the lower bound")
        self.expect(",", "between the bounds")
        hi = self.integer("as the upper bound")
        self.expect("]", "closing the interval")
        return Interval(lo, hi)

    def at_end(self) -> bool:
        return self.peek().kind == "end"


def parse_affine_map(text: str) -> AffineMap:
    """``(d0, d1)[s0] -> (...)`` with no domain (runtime variables count as symbols)."""
    p = _Parser(text)
    dims, syms, rts, _, results = p.header()
    if not p.at_end():
        raise p.error("unexpected text after the affine map", p.peek().pos)
    return AffineMap(len(dims), len(syms) + len(rts), tuple(results))


def _split_items(text: str, start: int) -> list[tuple[int, int]]:
    """(start, end) spans of the domain items: lines if multi-line, else top-level commas."""
    spans: list[tuple[int, int]] = []
    if "\n" in text[start:].strip():
        pos = start
        for line in text[start:].split("\n"):
            if line.strip():
                spans.append((pos, pos + len(line)))
            pos += len(line) + 1
        return spans
    depth, item_start = 0, start
    for i in range(start, len(text)):
        ch = text[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            spans.append((item_start, i))
            item_start = i + 1
    if text[item_start:].strip():
        spans.append((item_start, len(text)))
    return spans


@dataclass(frozen=True)
class ParsedIndexingMap:
    """An indexing map's fields as read from its text.  ``special`` is ``"UNDEFINED"`` or
    ``"KNOWN EMPTY"`` for those two forms (the other fields then unset), else ``None``."""

    special: str | None = None
    num_dims: int = 0
    num_symbols: int = 0
    results: tuple[AffineExpr, ...] = ()
    dim_bounds: tuple[Interval, ...] = ()
    range_bounds: tuple[Interval, ...] = ()
    rt_vars: tuple[RTVar, ...] = ()
    constraints: tuple[tuple[AffineExpr, Interval], ...] = ()


def parse_error(text: str, message: str) -> IndexingMapParseError:
    """The error for ``text`` as a whole (located at its start): a map that reads but is
    not a valid indexing map."""
    return _Parser(text).error(message, 0)


def read_indexing_map(text: str) -> ParsedIndexingMap:
    """Read the one-line or multi-line text form.  Raises ``IndexingMapParseError``."""
    stripped = text.strip()
    if stripped in ("UNDEFINED", "KNOWN EMPTY"):
        return ParsedIndexingMap(special=stripped)
    p = _Parser(text)
    dims, syms, rts, env, results = p.header()
    rest = p.pos
    m = re.compile(r"\s*,?\s*domain:").match(text, rest)
    if m is None:
        if not p.at_end():
            raise p.error("expected ', domain:' after the results", p.peek().pos,
                          expected="', domain:'")
        spans = []
    else:
        spans = _split_items(text, m.end())
    bounds: dict[str, Interval] = {}
    hlos: dict[str, object] = {}
    rt_maps: dict[str, AffineMap] = {}
    constraints: list[tuple[AffineExpr, Interval]] = []
    last_symbol: str | None = None
    symbol_names = set(syms) | set(rts)
    for a, b in spans:
        item = text[a:b].strip()
        offset = a + (len(text[a:b]) - len(text[a:b].lstrip()))
        if item.startswith("hlo:"):
            if last_symbol is None:
                raise _Parser(text, offset).error("'hlo:' line does not follow a symbol")
            hlo = item[len("hlo:"):].strip()
            hlos[last_symbol] = None if hlo == "(unknown)" else hlo
            continue
        if item.startswith("is_simplified:"):
            continue
        if "->" in item and last_symbol in hlos and last_symbol not in rt_maps:
            try:
                rt_maps[last_symbol] = parse_affine_map(item)
            except IndexingMapParseError as err:
                raise _Parser(text, offset).error(f"bad runtime variable map: {err.message}")
            continue
        ip = _Parser(text, offset, a + len(text[a:b].rstrip()))
        name_tok = ip.peek()
        e = ip.expr(env)
        ip.expect("in", "before the interval of a domain item")
        iv = ip.interval()
        if not ip.at_end():
            raise ip.error("unexpected text after the interval", ip.peek().pos)
        single = isinstance(e, (DimExpr, SymbolExpr)) and env.get(name_tok.text) == e
        if single and name_tok.text not in bounds:
            bounds[name_tok.text] = iv
            last_symbol = name_tok.text if name_tok.text in symbol_names else None
        else:
            constraints.append((e, iv))
            last_symbol = None
    for n in dims + syms + rts:
        if n not in bounds:
            raise p.error(f"variable {n!r} has no bound in the domain", 0,
                          expected=f"'{n} in [lo, hi]'")
    # Symbols with an `hlo:` line are runtime variables; they go after the range variables.
    range_names = [n for n in syms if n not in hlos]
    rt_names = [n for n in syms if n in hlos] + rts
    order = {n: k for k, n in enumerate(range_names + rt_names)}
    perm = [SymbolExpr(order[n]) for n in syms + rts]
    memo: dict = {}
    results = [substitute(r, None, perm, memo) for r in results]
    constraints = [(substitute(c, None, perm, memo), iv) for c, iv in constraints]
    rt_vars = tuple(RTVar(bounds[n], hlos.get(n), rt_maps.get(n)) for n in rt_names)
    return ParsedIndexingMap(
        None, len(dims), len(syms) + len(rts), tuple(as_expr(r) for r in results),
        tuple(bounds[n] for n in dims), tuple(bounds[n] for n in range_names), rt_vars,
        tuple(constraints))
