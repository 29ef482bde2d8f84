"""Range evaluation: a sound interval for every affine sub-expression, from variable bounds.

The cache lives in the evaluator, i.e. for one simplification pass over fixed bounds.

>>> from tiling.maps.affine_expr import d
>>> ev = RangeEvaluator([Interval(0, 6), Interval(0, 14)], [])
>>> str(ev.compute(d(0) + d(1) // 16)), str(ev.compute((d(1) - 3) % 7))
('[0, 6]', '[0, 6]')
"""
from __future__ import annotations

from typing import Sequence

from tiling.maps.affine_expr import (
    AffineExpr,
    Constant,
    DimExpr,
    FloorDivExpr,
    ModExpr,
    SumExpr,
    SymbolExpr,
    post_order,
)
from tiling.maps.interval import Interval


class RangeEvaluator:
    """Computes (and memoizes) ``compute(expr) -> Interval`` for fixed dim/symbol bounds."""

    def __init__(self, dim_bounds: Sequence[Interval], symbol_bounds: Sequence[Interval]):
        self.dim_bounds = tuple(dim_bounds)
        self.symbol_bounds = tuple(symbol_bounds)
        self._cache: dict[AffineExpr, Interval] = {}

    def compute(self, e: AffineExpr) -> Interval:
        hit = self._cache.get(e)
        if hit is not None:
            return hit
        try:  # recursion: the fast path for shallow expressions
            out = self._compute(e)
        except RecursionError:  # deeper than the limit: operands first, bottom-up
            for node in post_order([e], self._cache.__contains__):
                if node not in self._cache:
                    self._cache[node] = self._compute(node)
            return self._cache[e]
        self._cache[e] = out
        return out

    def _compute(self, e: AffineExpr) -> Interval:
        if isinstance(e, DimExpr):
            return self.dim_bounds[e.index]
        if isinstance(e, SymbolExpr):
            return self.symbol_bounds[e.index]
        if isinstance(e, Constant):
            return Interval(e.value, e.value)
        if isinstance(e, SumExpr):
            lo = hi = e.constant
            for atom, coeff in e.terms:
                r = self.compute(atom)
                if coeff > 0:
                    lo += coeff * r.lower
                    hi += coeff * r.upper
                else:
                    lo += coeff * r.upper
                    hi += coeff * r.lower
            return Interval(lo, hi)
        if isinstance(e, FloorDivExpr):
            return self.compute(e.dividend).floordiv(e.divisor)
        if isinstance(e, ModExpr):
            r = self.compute(e.dividend)
            k = r.lower // e.divisor
            if r.upper // e.divisor == k:  # within one period: mod is a shift
                return Interval(r.lower - k * e.divisor, r.upper - k * e.divisor)
            return Interval(0, e.divisor - 1)
        raise TypeError(f"not an affine expression: {e!r}")
