"""The pieces of an indexing map below the map itself: the affine map (variables -> results)
and a runtime variable.  ``tiling.maps.indexing_map`` builds ``IndexingMap`` from them; the modules
that rewrite maps (``map_simplifier``, ``map_transforms``) and read them (``parser``) use them
without importing ``indexing_map``, which calls them: the rewriters see the map as a
:class:`MapLike`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol, Sequence, TypeVar

from tiling.maps.affine_expr import AffineExpr, as_expr
from tiling.maps.printer import format_affine_map
from tiling.maps.interval import Interval


@dataclass(frozen=True)
class AffineMap:
    """``(d0..d{num_dims-1})[s0..s{num_symbols-1}] -> (results)``.

    >>> from tiling.maps.affine_expr import d
    >>> str(AffineMap(2, 1, (d(1), d(0) + 1)))
    '(d0, d1)[s0] -> (d1, d0 + 1)'
    """

    num_dims: int
    num_symbols: int
    results: tuple[AffineExpr, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "results", tuple(as_expr(r) for r in self.results))

    def evaluate(self, dims: Sequence[int], symbols: Sequence[int] = ()) -> tuple[int, ...]:
        return tuple(r.evaluate(dims, symbols) for r in self.results)

    def __str__(self) -> str:
        return format_affine_map(self)


@dataclass(frozen=True)
class RTVar:
    """A runtime variable: its feasible values, the HLO instruction that produces it (an
    ``HloInstruction``, its text as parsed, or ``None``), and the map from the indexing map's
    iteration space (its dims, and symbols if any) to the element of ``hlo`` to read."""

    feasible_values: Interval
    hlo: Any = None
    map: AffineMap | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "feasible_values", Interval.of(self.feasible_values))


class MapLike(Protocol):
    """An ``IndexingMap`` as the rewriters below it see it: its parts, its domain, and the
    methods that rebuild it (``replace`` keeps the type, so a rewriter returns what it got)."""

    @property
    def results(self) -> tuple[AffineExpr, ...]: ...
    @property
    def num_dims(self) -> int: ...
    @property
    def num_symbols(self) -> int: ...
    @property
    def num_range_vars(self) -> int: ...
    @property
    def dim_bounds(self) -> tuple[Interval, ...]: ...
    @property
    def range_bounds(self) -> tuple[Interval, ...]: ...
    @property
    def symbol_bounds(self) -> tuple[Interval, ...]: ...
    @property
    def rt_vars(self) -> tuple[RTVar, ...]: ...
    @property
    def constraints(self) -> tuple[tuple[AffineExpr, Interval], ...]: ...
    @property
    def is_undefined(self) -> bool: ...
    @property
    def is_known_empty(self) -> bool: ...

    def replace(self, **changes: Any) -> Any: ...
    def as_known_empty(self) -> Any: ...
    def simplify(self) -> Any: ...
    def remove_unused_symbols(self) -> Any: ...


#: A map type the rewriters take and give back unchanged (``IndexingMap``).
M = TypeVar("M", bound=MapLike)

