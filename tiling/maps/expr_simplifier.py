"""Rewrite rules for affine expressions that use the known range of every sub-expression.

Every rule is an identity over the integers inside the given variable bounds:

* ``x floordiv c`` / ``x mod c`` where ``x`` stays within one period ``[k*c, k*c + c - 1]``:
  ``k`` / ``x - k*c``;
* terms of a sum whose coefficient is a multiple of ``c`` move out of a floordiv, and drop out
  of a mod: ``(d0 * 16 + d1) floordiv 16 -> d0 + d1 floordiv 16``;
* a common factor ``g`` of ``c`` and all coefficients divides out:
  ``(g*y + b) floordiv (g*k) == (y + b floordiv g) floordiv k``;
* a part ``Q`` of a sum whose range lies inside one multiple of ``g | c`` while the rest ``P``
  is a multiple of ``g`` does not change the quotient: ``(P + Q) floordiv c == P floordiv c``;
* in sums, ``k*c*(x floordiv c) + k*(x mod c) -> k*x`` and
  ``k*x - k*c*(x floordiv c) -> k*(x mod c)``.

>>> from tiling.maps.affine_expr import d
>>> from tiling.maps.interval import Interval
>>> simp = ExprSimplifier(RangeEvaluator([Interval(0, 6), Interval(0, 14)], []))
>>> str(simp.simplify(d(0) + d(1) // 16)), str(simp.simplify(d(1) % 16))
('d0', 'd1')
"""
from __future__ import annotations

from math import gcd

from tiling.maps.affine_expr import (
    AffineExpr,
    Constant,
    FloorDivExpr,
    ModExpr,
    SumExpr,
    _make_sum,
    floordiv,
    linear_combination,
    linear_parts,
    mod,
    post_order,
)
from tiling.maps.range_evaluator import RangeEvaluator


def _trunc_div(a: int, b: int) -> int:
    """Quotient rounded toward zero, so the kept remainder keeps the sign of ``a``."""
    q = abs(a) // b
    return q if a >= 0 else -q


class ExprSimplifier:
    """Simplifies expressions under fixed variable bounds; memoizes results per instance."""

    def __init__(self, evaluator: RangeEvaluator):
        self.ev = evaluator
        self._memo: dict[AffineExpr, AffineExpr] = {}

    def simplify(self, e: AffineExpr) -> AffineExpr:
        hit = self._memo.get(e)
        if hit is not None:
            return hit
        try:  # recursion: the fast path for shallow expressions
            out = self._simplify(e)
        except RecursionError:
            # Deeper than the limit: operands first, bottom-up, so that simplifying a node
            # finds its operands in the memo (the recursion stays a few levels deep).
            for node in post_order([e], self._memo.__contains__):
                if node not in self._memo:
                    self._memo[node] = self._simplify(node)
            return self._memo[e]
        self._memo[e] = out
        return out

    def _simplify(self, e: AffineExpr) -> AffineExpr:
        if isinstance(e, SumExpr):
            new = linear_combination(
                [(self.simplify(a), c) for a, c in e.terms], e.constant
            )
            return self._sum(new)
        if isinstance(e, FloorDivExpr):
            return self._floordiv(self.simplify(e.dividend), e.divisor)
        if isinstance(e, ModExpr):
            return self._mod(self.simplify(e.dividend), e.divisor)
        return e

    # --- floordiv -------------------------------------------------------------------------
    def _floordiv(self, x: AffineExpr, c: int) -> AffineExpr:
        if c == 1:
            return x
        r = self.ev.compute(x)
        k = r.lower // c
        if r.upper // c == k:
            return Constant(k)
        if isinstance(x, FloorDivExpr):
            return self._floordiv(x.dividend, x.divisor * c)
        if not isinstance(x, SumExpr):
            return floordiv(x, c)
        terms, const = x.terms, x.constant
        outside = [(a, coeff // c) for a, coeff in terms if coeff % c == 0]
        q = _trunc_div(const, c)
        if outside or q:
            inside = tuple((a, coeff) for a, coeff in terms if coeff % c != 0)
            rest = self._floordiv(_make_sum(inside, const - q * c), c)
            return self._sum(linear_combination(outside + [(rest, 1)], q))
        g = c
        for _, coeff in terms:
            g = gcd(g, coeff)
        if g > 1:
            reduced = tuple((a, coeff // g) for a, coeff in terms)
            return self._floordiv(_make_sum(reduced, const // g), c // g)
        split = self._split(terms, const, c)
        if split is not None:
            return self._floordiv(split[0], c)
        return floordiv(x, c)

    # --- mod ------------------------------------------------------------------------------
    def _mod(self, x: AffineExpr, c: int) -> AffineExpr:
        if c == 1:
            return Constant(0)
        r = self.ev.compute(x)
        k = r.lower // c
        if r.upper // c == k:
            return linear_combination(((x, 1),), -k * c)
        if isinstance(x, ModExpr) and x.divisor % c == 0:
            return self._mod(x.dividend, c)
        if not isinstance(x, SumExpr):
            return mod(x, c)
        terms, const = x.terms, x.constant
        kept = tuple((a, coeff) for a, coeff in terms if coeff % c != 0)
        q = _trunc_div(const, c)
        if len(kept) != len(terms) or q:
            return self._mod(_make_sum(kept, const - q * c), c)
        g = c
        for _, coeff in terms:
            g = gcd(g, coeff)
        if g > 1:
            reduced = tuple((a, coeff // g) for a, coeff in terms)
            inner = self._mod(_make_sum(reduced, const // g), c // g)
            return self._sum(linear_combination(((inner, g),), const % g))
        split = self._split(terms, const, c)
        if split is not None:
            multiple, remainder = split
            inner = self._mod(multiple, c)
            return self._sum(linear_combination(((inner, 1), (remainder, 1))))
        return mod(x, c)

    def _split(self, terms, const: int, c: int):
        """``(P + m*g, Q - m*g)`` where ``P`` is the part of the sum that is a multiple of some
        ``g | c`` and ``Q`` (the rest, with the constant) stays within ``[m*g, m*g + g - 1]``."""
        candidates = sorted({gcd(c, coeff) for _, coeff in terms} - {1}, reverse=True)
        for g in candidates:
            p = tuple((a, coeff) for a, coeff in terms if coeff % g == 0)
            q_terms = tuple((a, coeff) for a, coeff in terms if coeff % g != 0)
            rest = _make_sum(q_terms, const)
            r = self.ev.compute(rest)
            m = r.lower // g
            if r.upper // g == m:
                return _make_sum(p, m * g), linear_combination(((rest, 1),), -m * g)
        return None

    # --- sums -----------------------------------------------------------------------------
    def _sum(self, x: AffineExpr) -> AffineExpr:
        """Merge ``floordiv``/``mod`` pairs of the same dividend inside a canonical sum."""
        if not isinstance(x, SumExpr):
            return x
        coeffs = dict(x.terms)
        for atom, k in x.terms:
            if isinstance(atom, ModExpr):
                fd = floordiv(atom.dividend, atom.divisor)
                if coeffs.get(fd) == k * atom.divisor:
                    rest = [(a, c) for a, c in x.terms if a is not atom and a != fd]
                    merged = linear_combination(rest + [(atom.dividend, k)], x.constant)
                    return self._sum(self.simplify(merged))
        for atom, m in x.terms:
            if isinstance(atom, FloorDivExpr) and m % atom.divisor == 0:
                k = -m // atom.divisor
                y_terms, _ = linear_parts(atom.dividend)
                if all(a in coeffs for a, _ in y_terms):
                    # x = rest + k*y - k*c*(y floordiv c) + ... == rest' + k*(y mod c)
                    rest = [(a, c) for a, c in x.terms if a is not atom]
                    rest.append((atom.dividend, -k))
                    inner = self._mod(atom.dividend, atom.divisor)
                    return self._sum(linear_combination(rest + [(inner, k)], x.constant))
        return x
