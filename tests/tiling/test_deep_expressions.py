"""Affine expressions deeper than Python's recursion limit: printing, evaluation,
substitution, ranges and simplification walk them with explicit stacks.

The truth is brute force: the value of the expression built step by step with Python's own
floor division and modulo, at every point of a small domain.
"""
from __future__ import annotations

import sys

import pytest

from tiling.maps.affine_expr import d
from tiling.maps.expr_variables import substitute
from tiling.maps.interval import Interval
from tiling.maps.range_evaluator import RangeEvaluator
from tiling.maps.expr_simplifier import ExprSimplifier

DEPTH = 1500
DOMAIN = [(i, j) for i in range(4) for j in range(3)]


@pytest.fixture(autouse=True)
def default_recursion_limit():
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    yield
    sys.setrecursionlimit(old)


def _deep():
    """``(e, f)``: a DEPTH-deep expression over d0, d1 and the function computing it."""
    e = d(0)
    steps = []
    for i in range(DEPTH):
        if i % 3 == 0:
            e, step = (e + d(1)) % 7, ("mod",)
        elif i % 3 == 1:
            e, step = (e * 3) // 2, ("div",)
        else:
            e, step = e + 1 + d(0), ("add",)
        steps.append(step)

    def value(x0: int, x1: int) -> int:
        v = x0
        for (kind,) in steps:
            v = (v + x1) % 7 if kind == "mod" else (v * 3) // 2 if kind == "div" else v + 1 + x0
        return v

    return e, value


def test_deep_expression_prints_and_evaluates():
    e, value = _deep()
    assert str(e).count("mod 7") == DEPTH // 3
    for x in DOMAIN:
        assert e.evaluate(x) == value(*x)


def test_deep_expression_substitutes_ranges_and_simplifies():
    e, value = _deep()
    swapped = substitute(e, [d(1), d(0)], None)
    assert swapped != e and substitute(e, [d(0), d(1)], None) == e
    bounds = [Interval(0, 3), Interval(0, 2)]
    evaluator = RangeEvaluator(bounds, [])
    rng = evaluator.compute(e)
    simplified = ExprSimplifier(evaluator).simplify(e)
    for x0, x1 in DOMAIN:
        assert swapped.evaluate((x0, x1)) == value(x1, x0)
        assert rng.lower <= value(x0, x1) <= rng.upper
        assert simplified.evaluate((x0, x1)) == value(x0, x1)
