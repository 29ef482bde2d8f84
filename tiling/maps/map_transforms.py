"""Structural transformations of indexing maps: removing unused symbols and dims.

>>> from tiling.maps.affine_expr import d, s
>>> from tiling.maps.indexing_map import IndexingMap
>>> m = IndexingMap.from_sizes((d(0) + s(1),), (4,), (2, 3))
>>> print(m.remove_unused_symbols())
(d0)[s0] -> (d0 + s0), domain: d0 in [0, 3], s0 in [0, 2]
"""
from __future__ import annotations

from typing import Sequence

from tiling.maps.affine_expr import AffineExpr, DimExpr, SymbolExpr
from tiling.maps.expr_variables import substitute, used_variables
from tiling.maps.affine_map import M, AffineMap, RTVar



def _used(exprs: Sequence[AffineExpr]) -> tuple[set[int], set[int]]:
    dims: set[int] = set()
    syms: set[int] = set()
    for e in exprs:
        de, se = used_variables(e)
        dims |= de
        syms |= se
    return dims, syms


def remove_unused_symbols(m: M) -> M:
    if m.is_undefined or m.is_known_empty:
        return m
    _, used = _used(m.results)
    for v in m.rt_vars:
        if v.map is not None:
            used |= _used(v.map.results)[1]
    var_sets = [(c, iv, used_variables(c)) for c, iv in m.constraints]
    changed = True
    while changed:  # a constraint linking a used variable to a symbol makes that symbol used
        changed = False
        for _, _, (cd, cs) in var_sets:
            if (cd or cs & used) and not cs <= used:
                used |= cs
                changed = True
    if len(used) == m.num_symbols:
        return m
    kept = sorted(used)
    new_index = {old: new for new, old in enumerate(kept)}
    repl = [SymbolExpr(new_index.get(j, 0)) for j in range(m.num_symbols)]
    memo: dict = {}
    nr = m.num_range_vars
    range_bounds = tuple(m.range_bounds[j] for j in kept if j < nr)
    rt_vars = []
    for j in kept:
        if j >= nr:
            v = m.rt_vars[j - nr]
            rt_vars.append(RTVar(v.feasible_values, v.hlo, _remap(v.map, None, repl, len(kept))))
    constraints = [
        (substitute(c, None, repl, memo), iv)
        for c, iv, (cd, cs) in var_sets if cs <= used and (cd or cs)
    ]
    return m.replace(
        affine_map=AffineMap(m.num_dims, len(kept),
                             tuple(substitute(r, None, repl, memo) for r in m.results)),
        range_bounds=range_bounds, rt_vars=tuple(rt_vars), constraints=constraints,
    )


def _remap(am: AffineMap | None, dims, syms, num_symbols: int, num_dims: int | None = None):
    if am is None:
        return None
    results = tuple(substitute(r, dims, syms[: am.num_symbols] if syms else None)
                    for r in am.results)
    return AffineMap(am.num_dims if num_dims is None else num_dims,
                     num_symbols if am.num_symbols else 0, results)


def remove_unused_dims(m: M) -> tuple[M, tuple[int, ...]]:
    if m.is_undefined or m.is_known_empty:
        return m, ()
    exprs = list(m.results) + [c for c, _ in m.constraints]
    for v in m.rt_vars:
        if v.map is not None:
            exprs += list(v.map.results)
    used, _ = _used(exprs)
    removed = tuple(i for i in range(m.num_dims) if i not in used)
    if not removed:
        return m, ()
    kept = [i for i in range(m.num_dims) if i in used]
    new_index = {old: new for new, old in enumerate(kept)}
    repl = [DimExpr(new_index.get(i, 0)) for i in range(m.num_dims)]
    memo: dict = {}
    rt_vars = tuple(
        RTVar(v.feasible_values, v.hlo, _remap(v.map, repl, None, m.num_symbols, len(kept)))
        for v in m.rt_vars
    )
    new = m.replace(
        affine_map=AffineMap(len(kept), m.num_symbols,
                             tuple(substitute(r, repl, None, memo) for r in m.results)),
        dim_bounds=tuple(m.dim_bounds[i] for i in kept), rt_vars=rt_vars,
        constraints=[(substitute(c, repl, None, memo), iv) for c, iv in m.constraints],
    )
    return new, removed
