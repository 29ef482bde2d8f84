"""Affine index expressions printed as Triton integer arithmetic.

Dimensions and symbols are named by the caller (index tensors or runtime scalars bound earlier
in the kernel).  ``floordiv``/``mod`` print as ``//`` and ``%``, which truncate toward zero in
Triton: they agree with floordiv/mod on the non-negative dividends whose values a kernel uses;
other lanes are masked, and ``ValueEmitter.bounds`` follows truncation so the masks hold there.

>>> from tiling.maps.affine_expr import d, s
>>> render_affine(d(0) * 4 + (d(1) // 3) % 2 - 1, ("i0", "i1"))
'i0 * 4 + ((i1 // 3) % 2) - 1'
>>> render_affine(d(0) + s(0), ("i0",), ("start0",))
'i0 + start0'
"""
from __future__ import annotations

import math
from collections.abc import Sequence

from tiling.maps.affine_expr import (
    AffineExpr,
    Constant,
    DimExpr,
    FloorDivExpr,
    ModExpr,
    SumExpr,
    SymbolExpr,
)


def render_affine(expr: AffineExpr, dim_names: Sequence[str], symbol_names: Sequence[str] = ()) -> str:
    """Python/Triton text evaluating ``expr`` with ``d_i -> dim_names[i]``, ``s_j -> symbol_names[j]``.

    >>> from tiling.maps.affine_expr import d
    >>> render_affine(-d(0) + 7, ("x",))
    '-x + 7'
    """
    if isinstance(expr, Constant):
        return str(expr.value)
    if isinstance(expr, DimExpr):
        return dim_names[expr.index]
    if isinstance(expr, SymbolExpr):
        return symbol_names[expr.index]
    if isinstance(expr, (FloorDivExpr, ModExpr)):
        op = "//" if isinstance(expr, FloorDivExpr) else "%"
        return f"({_atom(expr.dividend, dim_names, symbol_names)} {op} {expr.divisor})"
    if isinstance(expr, SumExpr):
        parts: list[str] = []
        for atom, coeff in expr.terms:
            text = _atom(atom, dim_names, symbol_names)
            magnitude = abs(coeff)
            term = text if magnitude == 1 else f"{text} * {magnitude}"
            if not parts:
                parts.append(term if coeff > 0 else f"-{term}")
            else:
                parts.append(f" + {term}" if coeff > 0 else f" - {term}")
        if expr.constant:
            parts.append(f" + {expr.constant}" if expr.constant > 0 else f" - {-expr.constant}")
        return "".join(parts)
    raise TypeError(f"not an affine expression: {expr!r}")


def _atom(expr: AffineExpr, dim_names: Sequence[str], symbol_names: Sequence[str]) -> str:
    text = render_affine(expr, dim_names, symbol_names)
    if isinstance(expr, SumExpr) or (isinstance(expr, Constant) and expr.value < 0):
        return f"({text})"
    return text


def row_major_coordinates(flat: AffineExpr, sizes: Sequence[int]) -> list[AffineExpr]:
    """Row-major coordinates of a flat index over ``sizes``.  The slowest one has no mod: lanes
    past the end are masked by the kernel, not wrapped.

    >>> from tiling.maps.affine_expr import d
    >>> [str(c) for c in row_major_coordinates(d(0), (2, 3, 4))]
    ['d0 floordiv 12', '(d0 floordiv 4) mod 3', 'd0 mod 4']
    """
    coords: list[AffineExpr] = []
    for i, size in enumerate(sizes):
        stride = math.prod(sizes[i + 1:])
        q = flat // stride if stride != 1 else flat
        coords.append(q % size if i else q)
    return coords
