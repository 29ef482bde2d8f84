"""XLA layouts as data: ``{1,0:T(8,128)(2,1)E(16)S(1)}``.

A layout says how a logical array is laid out in memory: ``minor_to_major`` orders the dims
from fastest to slowest varying, then each ``Tile`` in ``tiles`` is applied in turn (seed
``tiled_layout.pt.txt``).  A tile dim of ``COMBINED`` (printed ``*``) folds that dim into the
next minor one.  The math lives in ``tiling.layout``; this module only holds and prints data.

>>> str(Layout((1, 0), (Tile((8, 128)), Tile((2, 1)))))
'{1,0:T(8,128)(2,1)}'
"""
from __future__ import annotations

from dataclasses import dataclass

COMBINED = -1
"""Tile dim value for ``*``: combine this dim with the next minor one before tiling."""


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
