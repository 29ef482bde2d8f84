"""An affine expression's variables: which occur (:func:`used_variables`) and replacing them
(:func:`substitute`).

Both walk a whole expression, which may be a DAG thousands of levels deep (recursion first,
fast on the shallow expressions of every day; bottom-up past the recursion limit), and build
new expressions only through ``affine_expr``'s smart constructors, so a substituted
expression is as canonical as any other.  They are apart from ``affine_expr``, which holds
the nodes, their construction, evaluation and printing: nothing there needs them.

>>> from tiling.maps.affine_expr import d, s
>>> str(substitute(d(0) * 2 + s(0), [d(1) + 1], [d(0)]))
'd0 + d1 * 2 + 2'
>>> used_variables(d(2) + s(1) // 4)
(frozenset({2}), frozenset({1}))
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
    floordiv,
    linear_combination,
    mod,
    post_order,
)


def substitute(
    e: AffineExpr,
    dims: Sequence[AffineExpr] | None,
    symbols: Sequence[AffineExpr] | None,
    memo: dict[int, AffineExpr] | None = None,
) -> AffineExpr:
    """Replace ``d_i`` by ``dims[i]`` and ``s_j`` by ``symbols[j]`` (``None``: keep as is).

    ``memo`` (keyed by node id) shares work across a DAG and across several expressions.

    >>> from tiling.maps.affine_expr import d, s
    >>> str(substitute(d(0) * 2 + s(0), [d(1) + 1], [d(0)]))
    'd0 + d1 * 2 + 2'
    """
    if memo is None:
        memo = {}
    return _substitute(e, dims, symbols, memo)


def _substitute(e, dims, symbols, memo):
    # Recursion first (fast on shallow expressions); past the recursion limit, bottom-up
    # over the nodes the memo does not hold yet (the memo keeps what recursion finished).
    try:
        return _substitute_recursive(e, dims, symbols, memo)
    except RecursionError:
        return _substitute_iterative(e, dims, symbols, memo)


def _substitute_recursive(e, dims, symbols, memo):
    key = id(e)
    hit = memo.get(key)
    if hit is not None:
        return hit
    if isinstance(e, DimExpr):
        out = dims[e.index] if dims is not None else e
    elif isinstance(e, SymbolExpr):
        out = symbols[e.index] if symbols is not None else e
    elif isinstance(e, Constant):
        out = e
    elif isinstance(e, SumExpr):
        out = linear_combination(
            [(_substitute_recursive(a, dims, symbols, memo), c) for a, c in e.terms], e.constant
        )
    elif isinstance(e, FloorDivExpr):
        out = floordiv(_substitute_recursive(e.dividend, dims, symbols, memo), e.divisor)
    elif isinstance(e, ModExpr):
        out = mod(_substitute_recursive(e.dividend, dims, symbols, memo), e.divisor)
    else:
        raise TypeError(f"not an affine expression: {e!r}")
    memo[key] = out
    memo[-key - 1] = e  # keep `e` alive so its id is not reused while the memo lives
    return out


def _substitute_iterative(e, dims, symbols, memo):
    for x in post_order([e], lambda n: id(n) in memo):
        if isinstance(x, DimExpr):
            out = dims[x.index] if dims is not None else x
        elif isinstance(x, SymbolExpr):
            out = symbols[x.index] if symbols is not None else x
        elif isinstance(x, Constant):
            out = x
        elif isinstance(x, SumExpr):
            out = linear_combination([(memo[id(a)], c) for a, c in x.terms], x.constant)
        elif isinstance(x, FloorDivExpr):
            out = floordiv(memo[id(x.dividend)], x.divisor)
        elif isinstance(x, ModExpr):
            out = mod(memo[id(x.dividend)], x.divisor)
        else:
            raise TypeError(f"not an affine expression: {x!r}")
        memo[id(x)] = out
        memo[-id(x) - 1] = x  # keep `x` alive so its id is not reused while the memo lives
    return memo[id(e)]


def used_variables(e: AffineExpr) -> tuple[frozenset[int], frozenset[int]]:
    """The indices of the dims and of the symbols that occur in ``e``.

    >>> from tiling.maps.affine_expr import d, s
    >>> used_variables(d(2) + s(1) // 4)
    (frozenset({2}), frozenset({1}))
    """
    dims: set[int] = set()
    syms: set[int] = set()
    seen: set[int] = set()
    stack = [e]
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, DimExpr):
            dims.add(x.index)
        elif isinstance(x, SymbolExpr):
            syms.add(x.index)
        elif isinstance(x, SumExpr):
            stack.extend(a for a, _ in x.terms)
        elif isinstance(x, (FloorDivExpr, ModExpr)):
            stack.append(x.dividend)
    return frozenset(dims), frozenset(syms)


__all__ = ["substitute", "used_variables"]
