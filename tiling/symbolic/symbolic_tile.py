"""The symbolic tile of one indexing map (XLA's ``SymbolicTile``).

Given an output-to-operand map ``(d0..dn)[s..]{rt..} -> (e0..em)``, a block of the output
covers ``d_i = o_i + t_i`` with ``t_i`` in ``[0, ts_i)``: ``o_i`` is the tile origin
(``block_id_i * ts_i``), ``ts_i`` the tile size.  Range variables (reduced dims) get a size
``rs_l`` (the whole range, or a chunk) and an origin ``ro_l``.  The operand elements one block
needs are described per operand dim ``j`` by

* an **offset**: an affine expression of the origins (dims ``o0..``, then ``ro0..``) and of
  the runtime variables (symbols: dynamic-slice offsets read at run time),
* a **size** and a **stride**: expressions of the tile sizes (``ts0..``, then ``rs0..``),

so that the elements are ``{offset_j + k * stride_j : 0 <= k < size_j}`` per dim, intersected
with the operand's bounds (out-of-bounds elements are masked: pad and concatenate).  The
description is exact only under ``constraints`` on the tile sizes (e.g. a collapsing reshape
``d0 -> (d0 floordiv 8, d0 mod 8)`` needs ``ts0`` to divide 8 or be a multiple of 8).  A map
that no tile size makes exact gives a ``NotTileable`` with the reason.

>>> from tiling.maps.affine_expr import d
>>> from tiling.maps.indexing_map import IndexingMap
>>> collapse = IndexingMap.from_sizes((d(0) // 8, d(0) % 8), (32,))
>>> t = symbolic_tile(collapse)
>>> print(t)
offsets: (o0 floordiv 8, o0 mod 8)
sizes: ((ts0 - 1) floordiv 8 + 1, (ts0 - 1) mod 8 + 1)
strides: (1, 1)
constraints: 8 mod ts0 == 0 || ts0 mod 8 == 0
>>> c = t.instantiate((16,))
>>> c.sizes, c.strides, str(c.offsets_map)
((2, 8), (1, 1), '(d0) -> (d0 * 2, 0), domain: d0 in [0, 1]')
>>> print(symbolic_tile(IndexingMap.from_sizes((d(0) * 8 + d(1) % 8,), (4, 16))))
not tileable: `d0 * 8 + d1 mod 8` mixes a mod with other dims
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Sequence

from tiling.maps.affine_expr import (
    AffineExpr,
    Constant,
    DimExpr,
    FloorDivExpr,
    ModExpr,
    SumExpr,
    SymbolExpr,
    const,
    floordiv,
    linear_combination,
    linear_parts,
)
from tiling.maps.expr_variables import substitute, used_variables
from tiling.maps.indexing_map import AffineMap, IndexingMap
from tiling.maps.interval import Interval
from tiling.symbolic.tile_constraints import (
    FALSE,
    TRUE,
    Constraints,
    SizeExpr,
    ceil_div_size,
    const_size,
    divides,
    equals,
    multiple_of,
    param,
    wrap_size,
)
from tiling.maps.indexing_map import RTVar


@dataclass(frozen=True)
class NotTileable:
    """A map whose operand elements per block are not a strided hyper-rectangle."""

    reason: str

    def __str__(self) -> str:
        return f"not tileable: {self.reason}"


@dataclass(frozen=True)
class ConcreteTile:
    """A symbolic tile at fixed tile sizes.

    ``offsets_map``: ``(block ids)[chunk iterations]{rt} -> offsets``, the first element of
    each block's tile; ``element_map``: ``(block ids, in-tile indices)[..] -> element
    indices``, with the in-tile index ``k_j`` in ``[0, size_j)`` and (when the operand's dims
    are known) each element constrained to lie in the operand (masked elements are outside).
    """

    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    offsets_map: IndexingMap
    element_map: IndexingMap


@dataclass(frozen=True)
class SymbolicTile:
    """Offsets, sizes and strides of an operand tile as functions of the tile parameters.

    ``offsets`` use dims ``o0..o{n-1}, ro0..`` (tile origins of output dims, then range
    variables) and symbols = the map's runtime variables; ``sizes``/``strides`` use
    parameters ``ts0..ts{n-1}, rs0..``.  ``source`` is the map the tile describes.
    """

    source: IndexingMap
    num_dims: int
    offsets: tuple[AffineExpr, ...]
    sizes: tuple[SizeExpr, ...]
    strides: tuple[SizeExpr, ...]
    constraints: Constraints
    operand_dims: tuple[int, ...] | None = None

    @property
    def num_range_vars(self) -> int:
        return self.source.num_range_vars

    def full_range_sizes(self) -> tuple[int, ...]:
        return self._range_sizes

    @cached_property
    def _range_sizes(self) -> tuple[int, ...]:
        # Asked for by every legality and cost check of every candidate tiling.
        return tuple(b.size for b in self.source.range_bounds)

    def params(self, tile_sizes: Sequence[int], range_chunks: Sequence[int] | None = None):
        chunks = self.full_range_sizes() if range_chunks is None else tuple(range_chunks)
        return tuple(tile_sizes) + chunks

    def is_satisfied(self, tile_sizes: Sequence[int],
                     range_chunks: Sequence[int] | None = None) -> bool:
        """Whether the description is exact at these tile sizes."""
        return self.constraints.holds(self.params(tile_sizes, range_chunks))

    def instantiate(self, tile_sizes: Sequence[int], output_dims: Sequence[int] | None = None,
                    range_chunks: Sequence[int] | None = None) -> ConcreteTile:
        """Sizes, strides and offset/element maps at concrete tile sizes.

        ``output_dims`` default to the map's dim bounds; ``range_chunks`` to whole ranges.
        """
        n = self.num_dims
        if len(tile_sizes) != n:
            raise ValueError(f"expected {n} tile sizes, got {len(tile_sizes)}")
        out_dims = _dim_sizes(self.source) if output_dims is None else tuple(output_dims)
        p = self.params(tile_sizes, range_chunks)
        sizes = tuple(s.evaluate(p) for s in self.sizes)
        strides = tuple(s.evaluate(p) for s in self.strides)
        src = self.source
        full = self.full_range_sizes()
        chunks = p[n:]
        num_chunk_syms = len(chunks)
        origins = [DimExpr(i) * int(tile_sizes[i]) for i in range(n)]
        origins += [  # a whole range has one chunk: no loop variable
            const(src.range_bounds[l].lower)
            + (SymbolExpr(l) * chunks[l] if chunks[l] < full[l] else const(0))
            for l in range(num_chunk_syms)
        ]
        block_bounds = [(0, -(-out_dims[i] // tile_sizes[i]) - 1) for i in range(n)]
        chunk_bounds = [(0, -(-full[l] // chunks[l]) - 1) for l in range(num_chunk_syms)]
        rt_syms = [SymbolExpr(num_chunk_syms + q) for q in range(src.num_rt_vars)]
        offsets = tuple(substitute(e, origins, rt_syms) for e in self.offsets)
        rt_vars = _rt_vars_over_blocks(src, origins[:n], n)
        offsets_map = IndexingMap.create(offsets, block_bounds, chunk_bounds, rt_vars)
        offsets_map = offsets_map.remove_unused_symbols().simplify()
        m = len(sizes)
        in_tile = [DimExpr(n + j) for j in range(m)]
        shifted = [substitute(e, list(DimExpr(i) for i in range(n)), None) for e in offsets]
        elements = tuple(shifted[j] + in_tile[j] * strides[j] for j in range(m))
        constraints = []
        if self.operand_dims is not None:
            constraints = [(elements[j], (0, self.operand_dims[j] - 1)) for j in range(m)]
        element_map = IndexingMap.create(
            elements, block_bounds + [(0, s - 1) for s in sizes], chunk_bounds,
            _rt_vars_over_blocks(src, origins[:n], n + m), constraints,
        )
        return ConcreteTile(sizes, strides, offsets_map, element_map.simplify())

    def to_str(self) -> str:
        n = self.num_dims
        names = [f"o{i}" for i in range(n)] + [f"ro{l}" for l in range(self.num_range_vars)]
        rt_names = [f"rt{q}" for q in range(self.source.num_rt_vars)]
        offs = ", ".join(e.to_str(names, rt_names) for e in self.offsets)
        sizes = ", ".join(s.to_str(n) for s in self.sizes)
        strides = ", ".join(s.to_str(n) for s in self.strides)
        return (f"offsets: ({offs})\nsizes: ({sizes})\nstrides: ({strides})\n"
                f"constraints: {self.constraints.to_str(n)}")

    def __str__(self) -> str:
        return self.to_str()


def _dim_sizes(m: IndexingMap) -> tuple[int, ...]:
    return tuple(b.upper + 1 for b in m.dim_bounds)


def _rt_vars_over_blocks(m: IndexingMap, origins: Sequence[AffineExpr], num_dims: int):
    """Runtime variables re-expressed over the block ids: a runtime offset that depends on
    the output index is read at the block's origin (uniform per block, as for dynamic-slice
    offsets, which do not depend on the index at all)."""
    out = []
    for v in m.rt_vars:
        am = v.map
        if am is not None:
            am = AffineMap(num_dims, 0, tuple(
                substitute(r, list(origins), [const(0)] * am.num_symbols) for r in am.results))
        out.append(RTVar(v.feasible_values, v.hlo, am))
    return out


# --- derivation ---------------------------------------------------------------------------
@dataclass(frozen=True)
class _Run:
    """One operand dim's elements ``{offset + k*stride}``: ``exact`` says when this is the
    exact image, ``aligned`` when moreover ``offset`` is a multiple of ``size * |stride|``
    (needed to push the run through a floordiv or mod)."""

    offset: AffineExpr
    size: SizeExpr
    stride: int
    exact: Constraints
    aligned: Constraints
    variables: frozenset
    base: AffineExpr | None  # the linear dividend under floordiv/mod chains
    digits: tuple[int, int] | None  # [lo, hi) place values selected from ``base``


class _Fail(Exception):
    pass


class _Deriver:
    def __init__(self, m: IndexingMap, output_dims: Sequence[int]):
        self.m = m
        self.n = m.num_dims
        self.r = m.num_range_vars
        self.output_dims = tuple(output_dims)

    # variable v: ("d", i) or ("s", l)
    def size_of(self, v) -> SizeExpr:
        return param(v[1]) if v[0] == "d" else param(self.n + v[1])

    def full_of(self, v) -> int:
        return self.output_dims[v[1]] if v[0] == "d" else self.m.range_bounds[v[1]].size

    def origin_of(self, v) -> AffineExpr:
        return DimExpr(v[1]) if v[0] == "d" else DimExpr(self.n + v[1])

    def var_of(self, atom: AffineExpr):
        if isinstance(atom, DimExpr):
            return ("d", atom.index)
        if isinstance(atom, SymbolExpr) and atom.index < self.r:
            return ("s", atom.index)
        return None

    def is_runtime(self, e: AffineExpr) -> bool:
        dims, syms = used_variables(e)
        return not dims and all(j >= self.r for j in syms)

    def rt_shift(self, e: AffineExpr) -> AffineExpr:
        """Runtime symbols renumbered from after the range variables to from 0."""
        return substitute(e, None, [SymbolExpr(0)] * self.r + [
            SymbolExpr(q) for q in range(self.m.num_rt_vars)])

    def run(self, e: AffineExpr) -> _Run:
        terms, c = linear_parts(e)
        runtime = [(a, k) for a, k in terms if self.is_runtime(a)]
        rest = [(a, k) for a, k in terms if not self.is_runtime(a)]
        rt_part = self.rt_shift(linear_combination(runtime)) if runtime else const(0)
        nested = [(a, k) for a, k in rest if isinstance(a, (FloorDivExpr, ModExpr))]
        plain = [(a, k) for a, k in rest if not isinstance(a, (FloorDivExpr, ModExpr))]
        for a, _ in plain:
            if self.var_of(a) is None:
                raise _Fail(f"`{e}` uses `{a}`, which is neither a dim nor a range variable")
        if not nested:
            out = self.linear_run([(self.var_of(a), k) for a, k in plain], c, e)
        elif len(nested) > 1:
            raise _Fail(f"`{e}` sums several floordiv/mod terms")
        else:
            atom, k = nested[0]
            if plain:
                if isinstance(atom, ModExpr) or any(pk % k for _, pk in plain):
                    raise _Fail(f"`{e}` mixes a {'mod' if isinstance(atom, ModExpr) else 'floordiv'}"
                                " with other dims")
                # k*(X floordiv K) + sum(k*q_j*v_j) == k*((X + sum(q_j*K*v_j)) floordiv K)
                inner = linear_combination(
                    [(atom.dividend, 1)] + [(a, pk // k * atom.divisor) for a, pk in plain])
                atom = floordiv(inner, atom.divisor)
            out = self.scale(self.nested_run(atom), k, c)
        if runtime:
            if out.base is not None:
                raise _Fail(f"`{e}` adds a runtime offset to a floordiv/mod")
            out = _Run(out.offset + rt_part, out.size, out.stride, out.exact,
                       out.exact & equals(out.size, 1), out.variables, None, None)
        return out

    def scale(self, run: _Run, k: int, c: int) -> _Run:
        if k == 1 and c == 0:
            return run
        mag = run.size * abs(run.stride * k)
        aligned = run.aligned & divides(mag, c) if run.stride else run.aligned
        return _Run(run.offset * k + c, run.size, run.stride * k, run.exact, aligned,
                    run.variables, None, None)

    def nested_run(self, atom: AffineExpr) -> _Run:
        if isinstance(atom, (FloorDivExpr, ModExpr)):
            inner = self.nested_run(atom.dividend)
            return self.divide(inner, atom.divisor, isinstance(atom, FloorDivExpr))
        return self.run(atom)

    def divide(self, x: _Run, k: int, is_floordiv: bool) -> _Run:
        offset = floordiv(x.offset, k) if is_floordiv else x.offset % k
        base = x.base if x.base is not None else x.offset
        lo, hi = x.digits if x.digits is not None else (1, None)
        digits = (lo * k, hi) if is_floordiv else (lo, lo * k if hi is None else min(hi, lo * k))
        if x.stride == 0:
            return _Run(offset, const_size(1), 0, x.exact, x.exact, x.variables, base, digits)
        if x.stride != 1:
            ok = x.exact & equals(x.size, 1)
            return _Run(offset, const_size(1), 0, ok, ok, x.variables, base, digits)
        ok = x.aligned & (divides(x.size, k) | multiple_of(x.size, k))
        size = ceil_div_size(x.size, k) if is_floordiv else wrap_size(x.size, k)
        return _Run(offset, size, 1, ok, ok, x.variables, base, digits)

    def linear_run(self, vars_, c: int, e: AffineExpr) -> _Run:
        offset = linear_combination([(self.origin_of(v), k) for v, k in vars_], c)
        for v, k in vars_:
            if v[0] == "s":
                c += k * self.m.range_bounds[v[1]].lower
        if not vars_:
            return _Run(offset, const_size(1), 0, TRUE, TRUE, frozenset(), None, None)
        variables = frozenset(v for v, _ in vars_)
        if len(vars_) == 1:
            (v, k), = vars_
            size = self.size_of(v)
            return _Run(offset, size, k, TRUE, divides(size * abs(k), c), variables, None, None)
        if len({k > 0 for _, k in vars_}) > 1:
            raise _Fail(f"`{e}` adds dims with coefficients of both signs")
        ordered = sorted(vars_, key=lambda t: abs(t[1]))
        for (v, k), (_, k_next) in zip(ordered, ordered[1:]):
            if abs(k_next) != abs(k) * self.full_of(v):
                raise _Fail(f"`{e}`: the strides of its dims do not nest (a block would not"
                            " be a strided hyper-rectangle)")
        size: SizeExpr = const_size(1)
        for v, _ in ordered:
            size = size * self.size_of(v)
        exact = aligned = FALSE
        for t, (vt, kt) in enumerate(ordered):
            conj = TRUE
            for v, _ in ordered[:t]:
                conj = conj & equals(self.size_of(v), self.full_of(v))
            for v, _ in ordered[t + 1:]:
                conj = conj & equals(self.size_of(v), 1)
            exact = exact | conj
            unit = self.size_of(vt) * abs(kt)
            align = conj & divides(unit, c)
            for _, kj in ordered[t + 1:]:
                align = align & divides(unit, kj)
            aligned = aligned | align
        return _Run(offset, size, ordered[0][1], exact, aligned, variables, None, None)


def symbolic_tile(m: IndexingMap, operand_dims: Sequence[int] | None = None,
                  output_dims: Sequence[int] | None = None) -> SymbolicTile | NotTileable:
    """The symbolic tile of the operand read through ``m`` (module docstring).

    ``operand_dims`` lets the tile check that the map's own constraints (pad, concatenate)
    are just the operand's bounds, and adds those bounds to the element map.

    >>> from tiling.maps.affine_expr import d, s
    >>> reduce = IndexingMap.from_sizes((d(0), s(0)), (4,), (8,))
    >>> print(symbolic_tile(reduce))
    offsets: (o0, ro0)
    sizes: (ts0, rs0)
    strides: (1, 1)
    constraints: true
    """
    if m.is_undefined:
        return NotTileable("the indexing is undefined (an op the analysis cannot see through)")
    out_dims = _dim_sizes(m) if output_dims is None else tuple(output_dims)
    n = m.num_dims
    if m.is_known_empty:
        zeros = tuple(const(0) for _ in range(m.num_results))
        return SymbolicTile(m, n, zeros, tuple(const_size(0) for _ in zeros),
                            tuple(const_size(0) for _ in zeros), TRUE,
                            None if operand_dims is None else tuple(operand_dims))
    m = pin_point_variables(m.simplify(), out_dims)
    deriver = _Deriver(m, out_dims)
    try:
        runs = [deriver.run(e) for e in m.results]
        _check_shared_variables(m, runs)
        _check_domain(m, out_dims, operand_dims)
    except _Fail as err:
        return NotTileable(str(err))
    constraints = TRUE
    for r in runs:
        constraints = constraints & r.exact
    if constraints.is_unsatisfiable:
        return NotTileable(
            "no tile sizes make the tile exact: " + "; ".join(
                f"`{e}` needs {r.exact.to_str(n) if not r.exact.is_unsatisfiable else 'impossible sizes'}"
                for e, r in zip(m.results, runs) if not r.exact.is_always_true))
    return SymbolicTile(
        m, n, tuple(r.offset for r in runs), tuple(r.size for r in runs),
        tuple(const_size(r.stride) for r in runs), constraints,
        None if operand_dims is None else tuple(operand_dims),
    )


def pin_point_variables(m: IndexingMap, out_dims: Sequence[int]) -> IndexingMap:
    """``m`` with every variable that takes a single value replaced by that value.

    The simplifier keeps point-range dims (``(d0, d1) -> (d0 + d1)``, ``d1 in [0, 0]``, a
    reshape adding a unit dim), but they must not count as dims with a stride of their own
    (``d0 + d1`` would not nest).  Only dims that are the whole output dim are pinned (a
    point that narrows a longer output dim is a mask, checked by ``_check_domain``); the
    variables stay in the map, unused, so the tile parameters keep their numbering.

    >>> from tiling.maps.affine_expr import d
    >>> m = IndexingMap.create((d(0) + d(1),), [(0, 3), (0, 0)])
    >>> str(pin_point_variables(m, (4, 1)).results[0])
    'd0'
    """
    dims = [DimExpr(i) for i in range(m.num_dims)]
    syms = [SymbolExpr(j) for j in range(m.num_symbols)]
    pinned = False
    for i, b in enumerate(m.dim_bounds):
        if b.lower == b.upper and b == Interval(0, out_dims[i] - 1):
            dims[i], pinned = const(b.lower), True
    for l, b in enumerate(m.range_bounds):
        if b.lower == b.upper:
            syms[l], pinned = const(b.lower), True
    if not pinned:
        return m
    results = tuple(substitute(e, dims, syms) for e in m.results)
    constraints = tuple((substitute(e, dims, syms), iv) for e, iv in m.constraints)
    kept = tuple((e, iv) for e, iv in constraints if not isinstance(e, Constant))
    if any(not iv.contains(e.value) for e, iv in constraints if isinstance(e, Constant)):
        return m  # an empty domain: leave it to the checks that report it
    return m.replace(affine_map=AffineMap(m.num_dims, m.num_symbols, results),
                     constraints=kept)


def _check_shared_variables(m: IndexingMap, runs: list[_Run]) -> None:
    """Two results may depend on the same dims only as disjoint digits of one linear index
    (``x floordiv 8``, ``x mod 8``); otherwise (``(d0, d0)``) the block is not a product."""
    for i, a in enumerate(runs):
        for j in range(i + 1, len(runs)):
            b = runs[j]
            if not a.variables & b.variables:
                continue
            why = (f"results `{m.results[i]}` and `{m.results[j]}` depend on the same dims;"
                   " the block's elements are not a hyper-rectangle")
            if a.base is None or b.base is None or a.base != b.base:
                raise _Fail(why)
            (alo, ahi), (blo, bhi) = a.digits, b.digits
            if not ((ahi is not None and ahi <= blo) or (bhi is not None and bhi <= alo)):
                raise _Fail(why)


def _check_domain(m: IndexingMap, out_dims, operand_dims) -> None:
    """The map's domain may narrow the output only where that equals masking by the operand's
    bounds (pad and concatenate); anything else (interior padding) selects a sparse set.
    Constraints on runtime variables alone are clamps of the values read, not masks."""
    r = m.num_range_vars
    for i, b in enumerate(m.dim_bounds):
        if b != Interval(0, out_dims[i] - 1):
            _require_bounds_like(m, DimExpr(i), b, operand_dims)
    for expr, iv in m.constraints:
        dims, syms = used_variables(expr)
        if not dims and all(j >= r for j in syms):
            continue
        _require_bounds_like(m, expr, iv, operand_dims)


def _as_multiple(res: AffineExpr, expr: AffineExpr) -> tuple[int, int] | None:
    """``(c, C)`` with ``res == c * expr + C``, if there are such integers."""
    et, _ = linear_parts(expr)
    rt, _ = linear_parts(res)
    if not et or not rt:
        return None
    lead = dict(rt).get(et[0][0])
    if lead is None or lead % et[0][1]:
        return None
    c = lead // et[0][1]
    diff = linear_combination([(res, 1), (expr, -c)])
    return (c, diff.value) if isinstance(diff, Constant) else None


def _require_bounds_like(m: IndexingMap, expr: AffineExpr, iv: Interval, operand_dims) -> None:
    for j, res in enumerate(m.results):
        found = _as_multiple(res, expr)
        if found is None:
            continue
        if operand_dims is None:
            return
        c, shift = found
        a, b = c * iv.lower + shift, c * iv.upper + shift
        if min(a, b) <= 0 and max(a, b) >= operand_dims[j] - 1:
            return
    raise _Fail(f"the map's domain `{expr} in {iv}` selects elements that are not a"
                " hyper-rectangle cut by the operand's bounds")
