"""Parsing of constant literals: ``constant(1.5)``, ``constant({ {1, 2}, {3, 4} })``,
``constant(-inf)``, ``constant(true)``, ``constant((1, -2))`` (complex), tuple constants.

Values are rounded to the element type, as XLA's parser stores them, so a ``bf16``
``constant(0.79785)`` holds ``0.796875``.  NaNs are the shared objects ``NAN`` / ``NEG_NAN`` so
that literals holding them still compare equal.

>>> from fusion.text.lexer import Lexer
>>> from fusion.ir.shape import ArrayShape
>>> read_literal(Lexer("{ {1, 2}, {3, 4} }"), ArrayShape("s32", (2, 2)))
Literal(dims=(2, 2), values=(1, 2, 3, 4), elements=None)
"""
from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from fusion.ir.attributes import Literal
from fusion.ir.element_types import ELEMENT_TYPES
from fusion.text.lexer import Lexer, Token
from fusion.ir.shape import ArrayShape, Shape, TupleShape
from fusion.text.shape_parsing import MAX_NESTING, is_shape_start, read_shape

NAN = math.nan
_INTEGER_TOKEN = re.compile(r"[-+]?[0-9]+")
NEG_NAN = -math.nan

ELIDED_MESSAGE = (
    "constant value was elided by the HLO printer ('{...}'); re-dump the module with the "
    "full constant: XLA_FLAGS=--xla_dump_large_constants, or print_large_constants=true "
    "in HloPrintOptions"
)


def read_literal(lexer: Lexer, shape: Shape) -> Literal:
    """Read the literal of a constant of ``shape`` (the text inside ``constant(...)``)."""
    if isinstance(shape, TupleShape):
        return _read_tuple_literal(lexer, shape)
    etype = ELEMENT_TYPES[shape.dtype]
    if not etype.has_values:
        raise lexer.error(f"a constant of type {shape.dtype} cannot hold a value",
                          lexer.peek().pos, expected="an array or scalar element type")
    tok = lexer.peek()
    if tok.kind == "{" and lexer.peek(1).kind == "...":
        raise lexer.error(ELIDED_MESSAGE, tok.pos, text="{...}",
                          expected="the constant's values")
    values: list[Any] = []
    if tok.kind == "{":
        found = _read_nested(lexer, etype.kind, values)
        if math.prod(found) != len(values) or (
            found != shape.dims and not (len(values) == 0 and shape.num_elements == 0)
        ):
            raise lexer.error(
                f"constant has dims {list(found)} but its shape is {shape}", tok.pos,
                text=lexer.text[tok.pos : lexer.pos][:80],
                expected=f"{shape.num_elements} values nested as {list(shape.dims)}",
            )
    else:
        if shape.rank != 0 and shape.num_elements != 1:
            raise lexer.error(f"a scalar value cannot fill shape {shape}", tok.pos,
                              expected="a nested array literal '{...}'")
        values.append(_read_scalar(lexer, etype.kind))
    return Literal(shape.dims, _round_to_type(lexer, tok, values, shape.dtype, etype.kind))


def _read_tuple_literal(lexer: Lexer, shape: TupleShape) -> Literal:
    open_ = lexer.next()
    if open_.kind != "(":
        raise lexer.error("expected '(' opening a tuple constant", open_.pos,
                          expected=f"a tuple literal for {shape}")
    elements: list[Literal] = []
    for i, element_shape in enumerate(shape.elements):
        if i:
            lexer.expect(",", "',' between tuple constant elements")
        if is_shape_start(lexer) and lexer.peek().kind != "(":
            read_shape(lexer)  # XLA prints each element's shape before its value
        elements.append(read_literal(lexer, element_shape))
    lexer.expect(")", f"')' closing the tuple constant ({len(shape.elements)} elements)")
    return Literal((), (), tuple(elements))


def _read_nested(lexer: Lexer, kind: str, out: list, depth: int = 0) -> tuple[int, ...]:
    """Read one ``{...}`` level; return the dims found from this level down."""
    if depth >= MAX_NESTING:
        raise lexer.error(f"array literal nested deeper than {MAX_NESTING} levels",
                          lexer.peek().pos, expected="one '{' level per dimension of the shape")
    lexer.expect("{", "'{' opening an array literal")
    count = 0
    inner: tuple[int, ...] | None = None
    while lexer.peek().kind != "}":
        if count:
            lexer.expect(",", "',' or '}' in an array literal")
            if lexer.peek().kind == "}":  # trailing comma
                break
        if lexer.peek().kind == "{":
            row_pos = lexer.peek().pos
            dims = _read_nested(lexer, kind, out, depth + 1)
            if inner is not None and dims != inner:
                raise lexer.error("ragged array literal", row_pos, text=lexer.text[row_pos:lexer.pos],
                                  expected=f"every row to have dims {list(inner)}")
            inner = dims
        else:
            out.append(_read_scalar(lexer, kind))
        count += 1
    lexer.next()
    return (count,) + (inner or ())


def _read_scalar(lexer: Lexer, kind: str) -> Any:
    tok = lexer.next()
    if kind == "complex":
        if tok.kind != "(":
            raise lexer.error("expected a complex value '(real, imag)'", tok.pos,
                              text=tok.text or None, expected="(real, imag)")
        real = _number(lexer, lexer.next(), "float")
        lexer.expect(",", "',' between real and imaginary parts")
        imag = _number(lexer, lexer.next(), "float")
        lexer.expect(")", "')' closing the complex value")
        return complex(real, imag)
    return _number(lexer, tok, kind)


def _number(lexer: Lexer, tok: Token, kind: str) -> Any:
    text = tok.text
    if kind == "pred":
        if text in ("true", "false"):
            return text == "true"
        if tok.kind == "NUM" and text in ("0", "1"):
            return text == "1"
        raise lexer.error(f"bad pred value {text!r}", tok.pos, text=text or None,
                          expected="true or false")
    if kind in ("signed", "unsigned"):
        if tok.kind == "NUM":
            try:
                return int(text, 0)
            except ValueError:
                pass
            try:  # hand-written tests sometimes give integer constants as 1e3 or 2.0
                value = float(text)
                if value.is_integer():
                    return int(value)
            except ValueError:
                pass
        if text in ("true", "false"):
            return int(text == "true")
        raise lexer.error(f"bad integer value {text!r}", tok.pos, text=text or None,
                          expected="an integer")
    if tok.kind in ("NUM", "NAME"):
        stripped = text.lstrip("+-")
        if stripped == "nan" or stripped.startswith("nan("):
            return NEG_NAN if text.startswith("-") else NAN
        if stripped == "inf":
            return -math.inf if text.startswith("-") else math.inf
        if text in ("true", "false"):
            return 1.0 if text == "true" else 0.0
        if _INTEGER_TOKEN.fullmatch(text):
            # XLA's lexer makes ``-0`` an integer token and its parser converts the integer,
            # so a float ``-0`` is +0 there (XLA prints -0.0 as ``-0`` and reads back +0).
            return float(int(text))
        try:
            return float(text)
        except ValueError:
            pass
        try:
            return float(int(text, 0))
        except ValueError:
            pass
    raise lexer.error(f"bad floating-point value {text!r}", tok.pos, text=text or None,
                      expected="a number, inf, -inf or nan")


def _round_to_type(lexer: Lexer, tok: Token, values: list, dtype: str, kind: str) -> tuple:
    if kind in ("signed", "unsigned"):
        info = np.iinfo(ELEMENT_TYPES[dtype].numpy_dtype()) if dtype not in _SMALL_INTS \
            else _SMALL_INTS[dtype]
        for v in values:
            if not info.min <= v <= info.max:
                raise lexer.error(f"value {v} out of range for {dtype}", tok.pos,
                                  expected=f"integers in [{info.min}, {info.max}]")
        return tuple(values)
    if kind not in ("float", "complex") or dtype == "f64" or dtype == "c128" or not values:
        return tuple(values)
    np_dtype = ELEMENT_TYPES[dtype].numpy_dtype()
    with np.errstate(all="ignore"):
        rounded = np.asarray(values).astype(np_dtype).astype(
            np.complex128 if kind == "complex" else np.float64).tolist()
    if kind == "complex":
        return tuple(rounded)
    return tuple(_canonical_nan(r, v) for r, v in zip(rounded, values))


def _canonical_nan(rounded: float, original: float) -> float:
    # Types without NaN (e.g. f8e4m3fn's saturating cousins) may map nan elsewhere; keep the
    # shared NaN objects so that equal literals compare equal.
    if math.isnan(rounded):
        return NEG_NAN if math.copysign(1.0, original) < 0 else NAN
    return rounded


class _IntRange:
    def __init__(self, lo: int, hi: int) -> None:
        self.min, self.max = lo, hi


_SMALL_INTS = {"s2": _IntRange(-2, 1), "s4": _IntRange(-8, 7), "u2": _IntRange(0, 3),
               "u4": _IntRange(0, 15)}
