"""Indexing maps: an affine map plus the domain of its variables (XLA's ``IndexingMap``).

A map ``(d0, ..)[s0, ..]{rt0, ..} -> (e0, ..)`` takes the dimension variables ``d`` (indices of
tensor A) and symbols -- range variables first, then runtime variables -- to indices of tensor
B.  Its domain is a box (``dim_bounds``, ``range_bounds``, each runtime variable's
``feasible_values``) intersected with constraints ``expr in [lo, hi]``.  In expressions, symbol
``s(j)`` is the j-th range variable for ``j < num_range_vars`` and runtime variable
``j - num_range_vars`` after that.

The seed's transpose ``f32[3,12288,6,128] -> f32[3,6,128,12288], dimensions={0,2,3,1}``
(output -> input) and reduce ``f32[256,10] -> f32[10], dimensions={0}`` (output -> input):

>>> from tiling.maps.affine_expr import d, s
>>> transpose = IndexingMap.from_sizes((d(0), d(3), d(1), d(2)), (3, 6, 128, 12288))
>>> print(transpose.to_string(multiline=True))
(d0, d1, d2, d3) -> (d0, d3, d1, d2)
domain:
d0 in [0, 2]
d1 in [0, 5]
d2 in [0, 127]
d3 in [0, 12287]
>>> reduce = IndexingMap.from_sizes((s(0), d(0)), dim_sizes=(10,), range_sizes=(256,))
>>> print(reduce)
(d0)[s0] -> (s0, d0), domain: d0 in [0, 9], s0 in [0, 255]
>>> IndexingMap.parse(str(reduce)) == reduce
True

Composition: ``compose(f, g)`` is ``f ∘ g`` (apply ``g`` first).  For a fusion, with ``g`` the
consumer's output -> operand map and ``f`` the producer's output -> operand map, the fusion's
output -> producer-operand map is ``compose(f, g)`` (XLA: ``ComposeIndexingMaps(g, f)``, also
available here as ``compose_indexing_maps(first=g, second=f)``).

>>> collapse = IndexingMap.from_sizes((d(0) // 8, d(0) % 8), (32,))          # f32[32] <- [4,8]
>>> expand = IndexingMap.from_sizes((d(0) * 8 + d(1),), (4, 8))              # [4,8] <- f32[32]
>>> print(compose(collapse, expand))
(d0, d1) -> (d0, d1), domain: d0 in [0, 3], d1 in [0, 7]

Equality and hashing are up to simplification (``m == m.simplify()``); compare ``str(m)`` for
an exact textual match.  ``IndexingMap.undefined()`` marks unknown indexing
(``is_undefined``); a map whose domain is infeasible simplifies to one with
``is_known_empty`` set, printed ``KNOWN EMPTY``.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from typing import Any, Iterable, Iterator, Mapping, Sequence

from tiling.maps.affine_expr import AffineExpr, Constant, DimExpr, SymbolExpr, as_expr, d
from tiling.maps.expr_variables import substitute, used_variables
from tiling.maps.affine_map import AffineMap, RTVar  # defined below the map; re-exported here
from tiling.maps.parser import parse_error, read_indexing_map
from tiling.maps.printer import format_indexing_map
from tiling.maps.interval import Interval
from tiling.maps.map_simplifier import simplify_indexing_map
from tiling.maps.map_transforms import remove_unused_dims, remove_unused_symbols


def _canonical_constraints(
    constraints: Mapping[AffineExpr, Any] | Iterable[tuple[AffineExpr, Any]],
) -> tuple[tuple[AffineExpr, Interval], ...]:
    items = constraints.items() if isinstance(constraints, Mapping) else constraints
    merged: dict[AffineExpr, Interval] = {}
    for expr, iv in items:
        expr, iv = as_expr(expr), Interval.of(iv)
        merged[expr] = merged[expr].intersect(iv) if expr in merged else iv
    return tuple(sorted(merged.items(), key=lambda t: t[0]._order))


@dataclass(frozen=True, eq=False)
class IndexingMap:
    """An affine map with a domain.  See the module docstring for the conventions."""

    affine_map: AffineMap
    dim_bounds: tuple[Interval, ...]
    range_bounds: tuple[Interval, ...] = ()
    rt_vars: tuple[RTVar, ...] = ()
    constraints: tuple[tuple[AffineExpr, Interval], ...] = ()
    is_known_empty: bool = False
    is_undefined: bool = False
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        set_ = object.__setattr__
        set_(self, "dim_bounds", tuple(Interval.of(b) for b in self.dim_bounds))
        set_(self, "range_bounds", tuple(Interval.of(b) for b in self.range_bounds))
        set_(self, "rt_vars", tuple(self.rt_vars))
        set_(self, "constraints", _canonical_constraints(self.constraints))
        am = self.affine_map
        if len(self.dim_bounds) != am.num_dims:
            raise ValueError(
                f"indexing map has {am.num_dims} dims but {len(self.dim_bounds)} dim bounds"
            )
        if len(self.range_bounds) + len(self.rt_vars) != am.num_symbols:
            raise ValueError(
                f"indexing map has {am.num_symbols} symbols but {len(self.range_bounds)} range"
                f" and {len(self.rt_vars)} runtime variables"
            )
        for e in itertools.chain(am.results, (c for c, _ in self.constraints)):
            dims, syms = used_variables(e)
            if any(i >= am.num_dims for i in dims) or any(j >= am.num_symbols for j in syms):
                raise ValueError(f"expression {e} uses a variable outside {am}")

    # --- construction ---------------------------------------------------------------------
    @staticmethod
    def create(
        results: Sequence[AffineExpr | int],
        dim_bounds: Sequence[Interval | tuple[int, int]],
        range_bounds: Sequence[Interval | tuple[int, int]] = (),
        rt_vars: Sequence[RTVar] = (),
        constraints: Mapping | Iterable = (),
    ) -> "IndexingMap":
        """A map from its results and inclusive bounds, e.g. ``dim_bounds=[(0, 9)]``."""
        am = AffineMap(len(dim_bounds), len(range_bounds) + len(rt_vars), tuple(results))
        return IndexingMap(am, tuple(dim_bounds), tuple(range_bounds), tuple(rt_vars),
                           constraints)

    @staticmethod
    def from_sizes(
        results: Sequence[AffineExpr | int],
        dim_sizes: Sequence[int],
        range_sizes: Sequence[int] = (),
    ) -> "IndexingMap":
        """Bounds ``[0, size - 1]`` for every dim and range variable (XLA's FromTensorSizes)."""
        return IndexingMap.create(
            results, [(0, n - 1) for n in dim_sizes], [(0, n - 1) for n in range_sizes]
        )

    @staticmethod
    def identity(sizes: Sequence[int]) -> "IndexingMap":
        """``(d0, .., dn) -> (d0, .., dn)`` over a tensor of shape ``sizes``."""
        return _identity(tuple(sizes))

    @staticmethod
    def undefined() -> "IndexingMap":
        """The distinguished 'unknown indexing' value."""
        return IndexingMap(AffineMap(0, 0, ()), (), is_undefined=True)

    def as_known_empty(self) -> "IndexingMap":
        """This map's signature with an empty domain."""
        am = self.affine_map
        return IndexingMap(
            AffineMap(am.num_dims, am.num_symbols, tuple(0 for _ in am.results)),
            tuple(Interval(0, -1) for _ in self.dim_bounds),
            tuple(Interval(0, -1) for _ in self.range_bounds),
            tuple(RTVar(Interval(0, -1), v.hlo, v.map) for v in self.rt_vars),
            is_known_empty=True,
        )

    @staticmethod
    def parse(text: str) -> "IndexingMap":
        """Read the text form (one-line or the seed's multi-line form; see
        ``indexing_map_parser``).  Raises ``IndexingMapParseError``."""
        parts = read_indexing_map(text)
        if parts.special == "UNDEFINED":
            return IndexingMap.undefined()
        if parts.special == "KNOWN EMPTY":
            return IndexingMap(AffineMap(0, 0, ()), (), is_known_empty=True)
        try:
            return IndexingMap(AffineMap(parts.num_dims, parts.num_symbols, parts.results),
                               parts.dim_bounds, parts.range_bounds, parts.rt_vars,
                               parts.constraints)
        except ValueError as err:
            raise parse_error(text, str(err)) from None

    # --- accessors ------------------------------------------------------------------------
    @property
    def results(self) -> tuple[AffineExpr, ...]:
        return self.affine_map.results

    @property
    def num_dims(self) -> int:
        return self.affine_map.num_dims

    @property
    def num_symbols(self) -> int:
        return self.affine_map.num_symbols

    @property
    def num_range_vars(self) -> int:
        return len(self.range_bounds)

    @property
    def num_rt_vars(self) -> int:
        return len(self.rt_vars)

    @property
    def num_results(self) -> int:
        return len(self.affine_map.results)

    @property
    def symbol_bounds(self) -> tuple[Interval, ...]:
        """Bounds of all symbols: range variables, then runtime variables' feasible values."""
        return self.range_bounds + tuple(v.feasible_values for v in self.rt_vars)

    @property
    def constraint_dict(self) -> dict[AffineExpr, Interval]:
        return dict(self.constraints)

    # --- evaluation -----------------------------------------------------------------------
    def evaluate(self, dims: Sequence[int], symbols: Sequence[int] = ()) -> tuple[int, ...]:
        """The result tuple at a point (whether or not it lies in the domain).

        >>> IndexingMap.from_sizes((d(0) // 8, d(0) % 8), (32,)).evaluate((13,))
        (1, 5)
        """
        return self.affine_map.evaluate(dims, symbols)

    def contains(self, dims: Sequence[int], symbols: Sequence[int] = ()) -> bool:
        """Whether the point lies in the box and satisfies every constraint."""
        if self.is_known_empty:
            return False
        if len(dims) != self.num_dims or len(symbols) != self.num_symbols:
            return False
        for v, b in zip(itertools.chain(dims, symbols),
                        itertools.chain(self.dim_bounds, self.symbol_bounds)):
            if not b.contains(v):
                return False
        return all(iv.contains(e.evaluate(dims, symbols)) for e, iv in self.constraints)

    # --- transformations ------------------------------------------------------------------
    def simplify(self) -> "IndexingMap":
        """Simplify results and constraints using variable bounds (see ``map_simplifier``)."""
        hit = self._cache.get("simplified")
        if hit is None:
            hit = simplify_indexing_map(self)
            hit._cache["simplified"] = hit
            self._cache["simplified"] = hit
        return hit

    def add_constraint(self, expr: AffineExpr, interval: Interval | tuple[int, int]) -> "IndexingMap":
        return self.replace(constraints=self.constraints + ((expr, Interval.of(interval)),))

    def replace(self, **changes: Any) -> "IndexingMap":
        fields = dict(
            affine_map=self.affine_map, dim_bounds=self.dim_bounds,
            range_bounds=self.range_bounds, rt_vars=self.rt_vars,
            constraints=self.constraints, is_known_empty=self.is_known_empty,
            is_undefined=self.is_undefined,
        )
        fields.update(changes)
        return IndexingMap(**fields)

    def remove_unused_symbols(self) -> "IndexingMap":
        """Drop symbols used neither by the results, by runtime-variable maps, nor by a
        constraint that also involves a dim or a used symbol (constraints over unused symbols
        only are dropped with them, as XLA does)."""
        return remove_unused_symbols(self)

    def remove_unused_dims(self) -> tuple["IndexingMap", tuple[int, ...]]:
        """Drop dims that occur nowhere; returns the new map and the removed dim indices."""
        return remove_unused_dims(self)

    # --- identity and text ----------------------------------------------------------------
    def structural_key(self) -> tuple:
        """Exact identity of this representation (no simplification)."""
        if self.is_undefined:
            return ("undefined",)
        if self.is_known_empty:
            return ("empty", self.num_dims, self.num_symbols, self.num_results)
        return (self.affine_map, self.dim_bounds, self.range_bounds, self.rt_vars,
                self.constraints)

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, IndexingMap):
            return NotImplemented
        return self.simplify().structural_key() == other.simplify().structural_key()

    def __hash__(self) -> int:
        # Cached: the tile analysis keys its nodes by (instruction, map), hashing each map
        # many times; the hash of the simplified form never changes.
        hit = self._cache.get("hash")
        if hit is None:
            hit = self._cache["hash"] = hash(self.simplify().structural_key())
        return hit

    def to_string(self, multiline: bool = False) -> str:
        return format_indexing_map(self, multiline)

    def __str__(self) -> str:
        return format_indexing_map(self, False)


def _renumber_symbols(outer: IndexingMap, inner: IndexingMap):
    """Symbol positions in ``compose(outer, inner)``: range(outer), range(inner), rt(outer),
    rt(inner) -- XLA's order, keeping range variables before runtime variables."""
    ro, ri, to = outer.num_range_vars, inner.num_range_vars, outer.num_rt_vars
    outer_syms = [SymbolExpr(j if j < ro else ro + ri + (j - ro)) for j in range(outer.num_symbols)]
    inner_syms = [SymbolExpr(ro + j if j < ri else ro + ri + to + (j - ri))
                  for j in range(inner.num_symbols)]
    return outer_syms, inner_syms


def _compose_rt_map(m: AffineMap | None, dims, syms, memo, num_dims: int, num_symbols: int):
    if m is None:
        return None
    results = tuple(substitute(r, dims, syms[: m.num_symbols], memo) for r in m.results)
    uses_symbols = any(used_variables(r)[1] for r in results)
    return AffineMap(num_dims, num_symbols if uses_symbols else 0, results)


def compose(outer: IndexingMap, inner: IndexingMap, simplify: bool = True) -> IndexingMap:
    """``outer ∘ inner``: apply ``inner`` first, then ``outer`` to its results.

    The result's dims are ``inner``'s; its symbols are outer's range vars, inner's range vars,
    outer's runtime vars, inner's runtime vars.  Constraints of both maps are kept (outer's
    rewritten in inner's variables) and inner's results are constrained to outer's dim bounds.

    >>> from tiling.maps.affine_expr import s
    >>> transpose = IndexingMap.from_sizes((d(1), d(0)), (20, 10))
    >>> reduce = IndexingMap.from_sizes((s(0), d(0)), (10,), (20,))
    >>> print(compose(transpose, reduce))
    (d0)[s0] -> (d0, s0), domain: d0 in [0, 9], s0 in [0, 19]
    """
    if outer.is_undefined or inner.is_undefined:
        return IndexingMap.undefined()
    if inner.num_results != outer.num_dims:
        raise ValueError(
            f"cannot compose: inner map has {inner.num_results} results, outer map has"
            f" {outer.num_dims} dims"
        )
    if simplify:
        # Most compositions in a fusion pass through an elementwise op's identity: answer
        # them without substituting and simplifying again (the only thing composing adds is
        # a bound the simplifier drops, since it already holds).
        same = _identity_composition(outer, inner)
        if same is not None:
            return same.simplify()
    outer_syms, inner_syms = _renumber_symbols(outer, inner)
    inner_memo: dict = {}
    inner_results = tuple(substitute(r, None, inner_syms, inner_memo) for r in inner.results)
    outer_memo: dict = {}
    results = tuple(substitute(r, inner_results, outer_syms, outer_memo) for r in outer.results)
    num_dims = inner.num_dims
    num_symbols = outer.num_symbols + inner.num_symbols
    constraints: list[tuple[AffineExpr, Interval]] = []
    constraints += [(substitute(e, None, inner_syms, inner_memo), iv) for e, iv in inner.constraints]
    constraints += [(substitute(e, inner_results, outer_syms, outer_memo), iv)
                    for e, iv in outer.constraints]
    constraints += list(zip(inner_results, outer.dim_bounds))
    dim_identity = [DimExpr(i) for i in range(num_dims)]
    rt_outer = tuple(
        RTVar(v.feasible_values, v.hlo,
              _compose_rt_map(v.map, inner_results, outer_syms, {}, num_dims, num_symbols))
        for v in outer.rt_vars
    )
    rt_inner = tuple(
        RTVar(v.feasible_values, v.hlo,
              _compose_rt_map(v.map, dim_identity, inner_syms, {}, num_dims, num_symbols))
        for v in inner.rt_vars
    )
    composed = IndexingMap(
        AffineMap(num_dims, num_symbols, results),
        inner.dim_bounds,
        outer.range_bounds + inner.range_bounds,
        rt_outer + rt_inner,
        constraints,
        is_known_empty=outer.is_known_empty or inner.is_known_empty,
    )
    if composed.is_known_empty:
        return composed.as_known_empty()
    return composed.simplify() if simplify else composed


@lru_cache(maxsize=1024)
def _identity(sizes: tuple[int, ...]) -> IndexingMap:
    # Every elementwise op of every fusion asks for one: a map is immutable (its ``_cache``
    # only memoizes), so one instance per shape serves them all.
    return IndexingMap.from_sizes(tuple(d(i) for i in range(len(sizes))), sizes)


def _is_identity(m: IndexingMap) -> bool:
    """``(d0, .., dn) -> (d0, .., dn)`` with a box domain and no symbols."""
    hit = m._cache.get("is_identity")
    if hit is None:
        hit = m._cache["is_identity"] = (
            not m.is_known_empty and not m.constraints and m.affine_map.num_symbols == 0
            and m.num_results == m.num_dims
            and all(type(e) is DimExpr and e.index == i for i, e in enumerate(m.results)))
    return hit


def _within(e: AffineExpr, m: IndexingMap, bound: Interval) -> bool:
    """Whether ``e``, a result of ``m``, surely lies in ``bound``: a dim whose bound is
    inside it, or a constant in it (what an identity step ever needs to see)."""
    if type(e) is DimExpr:
        iv = m.dim_bounds[e.index]
    elif type(e) is Constant:
        iv = Interval(e.value, e.value)
    else:
        return False
    return bound.lower <= iv.lower and iv.upper <= bound.upper


def _identity_composition(outer: IndexingMap, inner: IndexingMap) -> IndexingMap | None:
    """The map ``compose(outer, inner)`` simplifies to when one side is an identity whose
    bounds the other already respects (None: compose in full).

    ``identity ∘ inner`` adds only ``inner.results[i] in outer.dim_bounds[i]``, and
    ``outer ∘ identity`` only ``d_i in inner.dim_bounds[i]`` = outer's own bounds: bounds
    that already hold, which the simplifier drops.  Maps with runtime variables are
    composed in full (their maps are rebuilt on composition)."""
    if outer.rt_vars or inner.rt_vars or inner.is_known_empty or outer.is_known_empty:
        return None
    if _is_identity(outer):
        if all(_within(e, inner, b) for e, b in zip(inner.results, outer.dim_bounds)):
            return inner
        return None
    if _is_identity(inner) and inner.dim_bounds == outer.dim_bounds:
        return outer
    return None


def compose_indexing_maps(first: IndexingMap, second: IndexingMap) -> IndexingMap:
    """XLA's ``ComposeIndexingMaps(first, second)``: ``second ∘ first`` (``first`` applies
    first).  Same as ``compose(second, first)``."""
    return compose(second, first)


def enumerate_points(
    m: IndexingMap, limit: int = 1_000_000
) -> Iterator[tuple[tuple[int, ...], tuple[int, ...]]]:
    """Every ``(dims, symbols)`` of the domain (box filtered by constraints), brute force.

    >>> m = IndexingMap.create((d(0) // 2,), [(0, 5)], constraints={d(0) % 2: (0, 0)})
    >>> [p for p, _ in enumerate_points(m)]
    [(0,), (2,), (4,)]
    """
    if m.is_undefined:
        raise ValueError("cannot enumerate the points of an undefined indexing map")
    if m.is_known_empty:
        return
    bounds = m.dim_bounds + m.symbol_bounds
    total = 1
    for b in bounds:
        total *= b.size
    if total > limit:
        raise ValueError(f"domain box of {total} points exceeds the limit of {limit}")
    nd = m.num_dims
    ranges = [range(b.lower, b.upper + 1) for b in bounds]
    for point in itertools.product(*ranges):
        dims, syms = point[:nd], point[nd:]
        if all(iv.contains(e.evaluate(dims, syms)) for e, iv in m.constraints):
            yield dims, syms
