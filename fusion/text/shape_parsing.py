"""Parsing of HLO shapes and layouts from a ``Lexer``.

Shapes: ``f32[2,<=8]{1,0:T(8,128)(2,1)E(4)S(1)}``, ``pred[]``, ``token[]``, tuples
``(f32[2], (s32[], u8[3]))``.  A layout is read only when its ``{`` touches the closing
``]`` (``-> f32[2] {`` opens a computation body, not a layout).

>>> from fusion.text.lexer import Lexer
>>> str(read_shape(Lexer("bf16[37,300]{1,0:T(8,128)(2,1)}")))
'bf16[37,300]{1,0:T(8,128)(2,1)}'
"""
from __future__ import annotations

import re

from fusion.ir.element_types import ELEMENT_TYPES
from fusion.text.lexer import Lexer
from fusion.ir.layout import COMBINED, Layout, Tile
from fusion.ir.shape import ArrayShape, Shape, TupleShape

_INT = re.compile(r"[0-9]+")
# Fast path for the common static shape, so long modules do not lex every digit as a token.
_STATIC_DIMS = re.compile(r"\[([0-9]+(?:,[0-9]+)*)?\]")
_LAYOUT_FIELD = re.compile(r"[A-Z][A-Z]?|#|\*")
# Deepest tuple (and literal) nesting accepted.  Real modules nest a few levels; the cap keeps
# every recursive walk over shapes (parser, verifier, printer, analyses) far from Python's
# recursion limit, so hostile input gets a located error instead of a RecursionError.
MAX_NESTING = 64


def is_shape_start(lexer: Lexer, k: int = 0) -> bool:
    """Whether the ``k``-th token ahead begins a shape (``f32[`` or ``(``)."""
    tok = lexer.peek(k)
    if tok.kind == "(":
        return True
    return (
        tok.kind == "NAME"
        and tok.text in ELEMENT_TYPES
        and lexer.peek(k + 1).kind == "["
        and lexer.peek(k + 1).pos == tok.end
    )


def read_shape(lexer: Lexer, *, depth: int = 0) -> Shape:
    """Read one shape (array or tuple) at the lexer's position.

    ``depth`` is how many tuples enclose it; tuples nest at most ``MAX_NESTING`` deep.
    """
    tok = lexer.peek()
    if tok.kind == "(":
        if depth >= MAX_NESTING:
            raise lexer.error(f"tuple shape nested deeper than {MAX_NESTING} levels", tok.pos,
                              expected=f"at most {MAX_NESTING} nested tuple shapes")
        lexer.next()
        elements: list[Shape] = []
        if lexer.peek().kind != ")":
            elements.append(read_shape(lexer, depth=depth + 1))
            while lexer.peek().kind == ",":
                lexer.next()
                elements.append(read_shape(lexer, depth=depth + 1))
        close = lexer.next()
        if close.kind != ")":
            raise lexer.error("bad tuple shape", close.pos, expected="',' or ')' in a tuple shape")
        return TupleShape(tuple(elements))
    if tok.kind != "NAME" or tok.text not in ELEMENT_TYPES:
        if tok.kind == "NAME" and lexer.peek(1).kind == "[":
            raise lexer.error(f"unknown element type {tok.text!r}", tok.pos, text=tok.text,
                              expected="one of " + ", ".join(ELEMENT_TYPES))
        raise lexer.error("expected a shape", tok.pos,
                          expected="a shape such as f32[2,3]{1,0} or (f32[], s32[])")
    lexer.next()
    fast = _STATIC_DIMS.match(lexer.text, tok.end)
    if fast is not None:
        dims_text = fast.group(1)
        dims = tuple(int(d) for d in dims_text.split(",")) if dims_text else ()
        return _with_layout(lexer, tok.text, dims, (), fast.end())
    bracket = lexer.next()
    if bracket.kind != "[":
        raise lexer.error(f"expected '[' after element type {tok.text}", bracket.pos,
                          expected=f"{tok.text}[dims]")
    dims: list[int] = []
    dynamic: list[bool] = []
    if lexer.peek().kind != "]":
        while True:
            dyn = lexer.peek().kind == "<="
            if dyn:
                lexer.next()
            d = lexer.next()
            if d.kind != "NUM" or not d.text.isdigit():
                raise lexer.error(f"bad dimension {d.text!r} in shape", d.pos, text=d.text,
                                  expected="a non-negative integer or <=N (bounded dynamic)")
            dims.append(int(d.text))
            dynamic.append(dyn)
            sep = lexer.next()
            if sep.kind == "]":
                break
            if sep.kind != ",":
                raise lexer.error("bad shape dimensions", sep.pos, text=sep.text or None,
                                  expected="',' or ']' in the dimension list")
    else:
        lexer.next()
    return _with_layout(lexer, tok.text, tuple(dims), tuple(dynamic), lexer.pos)


def _with_layout(lexer: Lexer, dtype: str, dims: tuple, dynamic: tuple, end: int) -> ArrayShape:
    layout = None
    if end < len(lexer.text) and lexer.text[end] == "{":
        layout, end = read_layout_at(lexer, end)
    lexer.seek(end)
    return ArrayShape(dtype, dims, layout, dynamic)


def read_layout_at(lexer: Lexer, pos: int) -> tuple[Layout, int]:
    """Read a layout whose ``{`` is at offset ``pos``; return it and the offset after ``}``."""
    text = lexer.text
    i = pos + 1
    minor_to_major: list[int] = []
    i = lexer.skip_space(i)
    while i < len(text) and text[i].isdigit():
        m = _INT.match(text, i)
        minor_to_major.append(int(m.group()))
        i = lexer.skip_space(m.end())
        if text.startswith(",", i):
            i = lexer.skip_space(i + 1)
    tiles: list[Tile] = []
    element_size = 0
    memory_space = 0
    extras: list[str] = []
    if text.startswith(":", i):
        i += 1
        while True:
            i = lexer.skip_space(i)
            m = _LAYOUT_FIELD.match(text, i)
            if m is None or not text.startswith("(", m.end()):
                break
            field = m.group()
            if field == "T":
                i = m.end()
                while text.startswith("(", i):
                    end = lexer.balanced(i)
                    tiles.append(_tile(lexer, i, end))
                    i = end
            elif field in ("E", "S"):
                end = lexer.balanced(m.end())
                value = text[m.end() + 1 : end - 1].strip()
                if not value.isdigit():
                    raise lexer.error(f"bad layout field {field}({value})", i,
                                      text=text[i:end], expected=f"{field}(<integer>)")
                if field == "E":
                    element_size = int(value)
                else:
                    memory_space = int(value)
                i = end
            else:
                end = lexer.balanced(m.end())
                extras.append(text[i:end])
                i = end
    i = lexer.skip_space(i)
    if not text.startswith("}", i):
        raise lexer.error("bad layout", i, text=text[pos : i + 1],
                          expected="minor-to-major dims, then ':' and T(...), E(n), S(n) "
                                   "or another field, then '}'")
    return Layout(tuple(minor_to_major), tuple(tiles), element_size, memory_space,
                  tuple(extras)), i + 1


def _tile(lexer: Lexer, start: int, end: int) -> Tile:
    dims: list[int] = []
    for part in lexer.text[start + 1 : end - 1].split(","):
        part = part.strip()
        if part == "*":
            dims.append(COMBINED)
        elif part.isdigit():
            dims.append(int(part))
        else:
            raise lexer.error(f"bad tile dimension {part!r}", start, text=lexer.text[start:end],
                              expected="a positive integer or '*' in T(...)")
    return Tile(tuple(dims))
