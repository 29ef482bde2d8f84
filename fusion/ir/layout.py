"""XLA layouts as data: ``{1,0:T(8,128)(2,1)E(16)S(1)}``.

A layout says how a logical array is laid out in memory: ``minor_to_major`` orders the dims
from fastest to slowest varying, then each ``Tile`` in ``tiles`` is applied in turn (seed
``tiled_layout.pt.txt``).  A tile dim of ``COMBINED`` (printed ``*``) folds that dim into the
next minor one.  The math lives in ``tiling.layouts.tiled_layout``; this module only holds and prints data.

>>> str(Layout((1, 0), (Tile((8, 128)), Tile((2, 1)))))
'{1,0:T(8,128)(2,1)}'
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

COMBINED = -1
"""Tile dim value for ``*``: combine this dim with the next minor one before tiling."""

MAX_TILE_ELEMENTS = 1 << 20
"""Elements of one tile, at most: real tiles are small (``(8,128)``, ``(2,1)``); a tile of a
trillion elements would make every buffer of its shape terabytes of padding."""

MAX_PADDED_ELEMENTS = 1 << 62
"""Elements of a tiled buffer, padding included, at most: offsets must fit an int64."""


@dataclass(frozen=True)
class Tile:
    """One tiling level, ``T(8,128)``; ``COMBINED`` entries print as ``*``."""

    dims: tuple[int, ...]

    def __str__(self) -> str:
        return "(" + ",".join("*" if d == COMBINED else str(d) for d in self.dims) + ")"


@dataclass(frozen=True)
class Layout:
    """An XLA layout.

    ``extras`` keeps, verbatim and in order, the layout fields this project does not interpret
    (``D(...)`` dim level types, ``L(...)`` tail padding, ``#(...)`` index type, ``*(...)``
    pointer type, ``SC(...)`` split configs, ``P(...)`` physical shape, ``M(...)`` dynamic
    metadata), so that printing gives back what XLA printed.
    """

    minor_to_major: tuple[int, ...]
    tiles: tuple[Tile, ...] = ()
    element_size_in_bits: int = 0
    memory_space: int = 0
    extras: tuple[str, ...] = ()

    def __str__(self) -> str:
        text = ",".join(str(d) for d in self.minor_to_major)
        suffix = ""
        if self.tiles:
            suffix += "T" + "".join(str(t) for t in self.tiles)
        if self.element_size_in_bits:
            suffix += f"E({self.element_size_in_bits})"
        if self.memory_space:
            suffix += f"S({self.memory_space})"
        suffix += "".join(self.extras)
        if suffix:
            text += ":" + suffix
        return "{" + text + "}"

    @property
    def is_tiled(self) -> bool:
        return bool(self.tiles)


def default_layout(rank: int) -> Layout:
    """XLA's default (row-major) layout: ``{rank-1, ..., 1, 0}``.

    >>> str(default_layout(3))
    '{2,1,0}'
    """
    return Layout(tuple(range(rank - 1, -1, -1)))


def layout_problem(dims: Sequence[int], layout: Layout) -> str | None:
    """Why ``layout`` cannot lay out an array of ``dims``, or ``None`` when it can.

    Checked up front (by the verifier) so that no later stage indexes past ``minor_to_major``
    or allocates a buffer padded to terabytes: ``minor_to_major`` must be a permutation of
    ``0..rank-1``; tile dims positive or ``*`` (not last); a tile at most
    ``MAX_TILE_ELEMENTS`` elements; the padded buffer at most ``MAX_PADDED_ELEMENTS``, and
    at most ``MAX_TILE_ELEMENTS`` times the logical size (padding grows a shape by a tile).

    >>> layout_problem((2, 3, 4), Layout((2, 11, 0)))
    'minor_to_major {2,11,0} is not a permutation of 0..2'
    >>> layout_problem((16, 16), Layout((1, 0), (Tile((1000000, 1000000)),)))
    'tile (1000000,1000000) has 1000000000000 elements; at most 1048576 are supported'
    >>> layout_problem((37, 300), Layout((1, 0), (Tile((8, 128)), Tile((2, 1))))) is None
    True
    """
    rank = len(dims)
    m2m = tuple(layout.minor_to_major)
    text = "{" + ",".join(str(d) for d in m2m) + "}"
    if len(m2m) != rank:
        return f"minor_to_major {text} has {len(m2m)} entries but the shape has rank {rank}"
    if sorted(m2m) != list(range(rank)):
        return f"minor_to_major {text} is not a permutation of 0..{rank - 1}"
    if layout.element_size_in_bits < 0:
        return f"element_size_in_bits {layout.element_size_in_bits} is negative"
    shape = tuple(dims[d] for d in reversed(m2m))
    for tile in layout.tiles:
        if not tile.dims:
            return f"tile {tile} is empty"
        if any(t != COMBINED and t <= 0 for t in tile.dims):
            return f"tile {tile} has a dim that is not positive; tile dims must be positive or '*'"
        if tile.dims[-1] == COMBINED:
            return f"tile {tile} ends in '*', which has no minor dim to combine with"
        elements = math.prod(t for t in tile.dims if t != COMBINED)
        if elements > MAX_TILE_ELEMENTS:
            return f"tile {tile} has {elements} elements; at most {MAX_TILE_ELEMENTS} are supported"
        shape = _tiled_shape(shape, tile.dims)
    padded = math.prod(shape)
    logical = math.prod(dims)
    if padded > MAX_PADDED_ELEMENTS or padded > max(logical, 1) * MAX_TILE_ELEMENTS:
        return (f"the tiled layout pads {logical} elements to {padded}; at most "
                f"{min(MAX_PADDED_ELEMENTS, max(logical, 1) * MAX_TILE_ELEMENTS)} are supported")
    return None


def _tiled_shape(shape: tuple[int, ...], tile: tuple[int, ...]) -> tuple[int, ...]:
    """The physical shape (major to minor) after one tile, as ``tiling.layouts.tiled_layout`` applies it:
    leading 1s when the tile has more dims, ``*`` dims folded into the next minor one."""
    shape = (1,) * max(0, len(tile) - len(shape)) + shape
    major = shape[: len(shape) - len(tile)]
    combined: list[int] = []
    acc = 1
    for d, t in zip(shape[len(major):], tile):
        acc *= d
        if t != COMBINED:
            combined.append(acc)
            acc = 1
    sizes = tuple(t for t in tile if t != COMBINED)
    return major + tuple(-(-c // t) for c, t in zip(combined, sizes)) + sizes
