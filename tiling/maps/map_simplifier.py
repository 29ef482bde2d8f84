"""Simplification of a whole indexing map: results, constraints and variable bounds.

Repeated until nothing changes (bounded):

1. every constraint and result is rewritten by ``ExprSimplifier`` under the current bounds;
2. constraints are normalized: constants move into the interval (``d0 + 5 in [5, 10]`` ->
   ``d0 in [0, 5]``), a common factor divides out (``d0 * 4 in [1, 9]`` -> ``d0 in [1, 2]``),
   ``x floordiv c in [a, b]`` becomes ``x in [a*c, b*c + c - 1]``, and the leading coefficient
   is made positive;
3. a constraint on a single variable tightens that variable's bounds and disappears;
4. a constraint that always holds (its expression's range lies inside the interval) is dropped;
   one that never holds makes the map ``KNOWN EMPTY``, as does an empty variable range;
5. constraints on the same expression are intersected.

>>> from tiling.maps.affine_expr import d, s
>>> from tiling.maps.indexing_map import IndexingMap
>>> m = IndexingMap.create((d(0),), [(0, 5)], [(1, 3)], constraints={d(0) + s(0): (0, 20)})
>>> print(m.simplify())
(d0)[s0] -> (d0), domain: d0 in [0, 5], s0 in [1, 3]
"""
from __future__ import annotations

from math import gcd

from tiling.maps.affine_expr import (
    AffineExpr,
    Constant,
    DimExpr,
    FloorDivExpr,
    SumExpr,
    SymbolExpr,
    _make_sum,
)
from tiling.maps.affine_map import M, AffineMap, RTVar
from tiling.maps.interval import Interval
from tiling.maps.range_evaluator import RangeEvaluator
from tiling.maps.expr_simplifier import ExprSimplifier


_MAX_ROUNDS = 16


def _ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


def normalize_constraint(e: AffineExpr, iv: Interval) -> tuple[AffineExpr, Interval]:
    """Move constants, common factors, signs and floordivs from ``e`` into ``iv``.

    >>> from tiling.maps.affine_expr import d
    >>> e, iv = normalize_constraint((d(0) * -4 + 8) // 3, Interval(0, 1))
    >>> str(e), str(iv)
    ('d0', '[1, 2]')
    """
    while True:
        if isinstance(e, SumExpr):
            terms, c = e.terms, e.constant
            g = 0
            for _, k in terms:
                g = gcd(g, k)
            sign = 1 if terms[0][1] > 0 else -1
            if c == 0 and g == 1 and sign == 1:
                return e, iv
            lo, hi = iv.lower - c, iv.upper - c
            if sign < 0:
                lo, hi = -hi, -lo
            e = _make_sum(tuple((a, k * sign // g) for a, k in terms), 0)
            iv = Interval(_ceil_div(lo, g), hi // g)
            continue
        if isinstance(e, FloorDivExpr):
            c = e.divisor
            e, iv = e.dividend, Interval(iv.lower * c, iv.upper * c + c - 1)
            continue
        return e, iv


def simplify_indexing_map(m: M) -> M:
    """The simplified, canonical equivalent of ``m`` (same domain points, same values)."""
    if m.is_undefined or m.is_known_empty:
        return m
    dims = list(m.dim_bounds)
    syms = list(m.symbol_bounds)
    results = m.results
    constraints = dict(m.constraints)
    rt_maps = [v.map for v in m.rt_vars]
    for _ in range(_MAX_ROUNDS):
        if any(b.is_empty for b in dims) or any(b.is_empty for b in syms):
            return m.as_known_empty()
        ev = RangeEvaluator(dims, syms)
        simp = ExprSimplifier(ev)
        bounds_changed = False
        new_constraints: dict[AffineExpr, Interval] = {}
        for expr, iv in constraints.items():
            e, iv = normalize_constraint(simp.simplify(expr), iv)
            if iv.is_empty:
                return m.as_known_empty()
            if isinstance(e, Constant):
                if not iv.contains(e.value):
                    return m.as_known_empty()
                continue
            if isinstance(e, (DimExpr, SymbolExpr)):
                box = dims if isinstance(e, DimExpr) else syms
                tightened = box[e.index].intersect(iv)
                if tightened != box[e.index]:
                    box[e.index] = tightened
                    bounds_changed = True
                continue
            r = ev.compute(e)
            if iv.contains_interval(r):
                continue
            iv = iv.intersect(r)
            if e in new_constraints:
                iv = iv.intersect(new_constraints[e])
            if iv.is_empty:
                return m.as_known_empty()
            new_constraints[e] = iv
        new_results = tuple(simp.simplify(r) for r in results)
        new_rt_maps = [
            None if rm is None else AffineMap(
                rm.num_dims, rm.num_symbols, tuple(simp.simplify(r) for r in rm.results))
            for rm in rt_maps
        ]
        done = (not bounds_changed and new_constraints == constraints
                and new_results == results and new_rt_maps == rt_maps)
        constraints, results, rt_maps = new_constraints, new_results, new_rt_maps
        if done:
            break
    if any(b.is_empty for b in dims) or any(b.is_empty for b in syms):
        return m.as_known_empty()
    nr = m.num_range_vars
    rt_vars = tuple(
        RTVar(syms[nr + k], v.hlo, rt_maps[k]) for k, v in enumerate(m.rt_vars)
    )
    return m.replace(
        affine_map=AffineMap(m.num_dims, m.num_symbols, results),
        dim_bounds=tuple(dims),
        range_bounds=tuple(syms[:nr]),
        rt_vars=rt_vars,
        constraints=tuple(constraints.items()),
    )
