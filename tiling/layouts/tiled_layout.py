"""The math of XLA tiled layouts (seed ``tiled_layout.pt.txt``): where each element lives.

A layout first orders the logical dims by ``minor_to_major`` (giving the *physical* dims, listed
here major to minor), then applies each tile in turn.  One tile ``t`` on a shape ``d``:

* a tile with more dims than the shape pads the shape with leading size-1 dims;
* a tile applies to the minor-most ``len(t)`` dims; the major ones stay as they are;
* a ``*`` (``COMBINED``) entry folds its dim into the next minor one (``d[i] * d[i+1]``);
* the remaining dims are padded to multiples of ``t``, split into ``(ceil(d/t), t)`` and the
  tile dims moved to the minor end: the shape becomes ``(major..., ceil(d/t)..., t...)``.

A later tile applies to the shape the previous one produced, so it may reach inside the tile
(``(8,128)(2,1)``) or into the tile-count dims.  The linear index of an element is its row-major
index in the final shape, counted in elements as XLA's ``LinearIndex`` counts them.

>>> f = TiledLayout.of((3, 5), parse_tiles("1,0", "(2,2)"))
>>> f.physical_shape, f.linear_index((2, 3))
((2, 3, 2, 2), 17)

The functions work on Python ints and, unchanged, on NumPy integer arrays, so the offset of
every element of an array is one vectorized call (``offsets_array``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence, Union

import numpy as np

from fusion.ir.element_types import element_type
from fusion.errors import LayoutError  # defined there with every user error; re-exported here
from fusion.ir.layout import COMBINED, Layout, Tile
from tiling.maps.affine_expr import d
from tiling.maps.indexing_map import IndexingMap, compose

Index = Any  # an int or a NumPy integer array; the same arithmetic serves both


# --- the pad / reshape / transpose steps that realize a layout --------------------------------


@dataclass(frozen=True)
class Transpose:
    """Result dim ``i`` is input dim ``permutation[i]`` (NumPy's ``transpose`` convention)."""

    permutation: tuple[int, ...]


@dataclass(frozen=True)
class Reshape:
    """A row-major reshape (a bitcast) to ``dims``."""

    dims: tuple[int, ...]


@dataclass(frozen=True)
class PadHigh:
    """Pad each dim at its end up to ``dims`` (same rank); new positions are padding."""

    dims: tuple[int, ...]


Step = Union[Transpose, Reshape, PadHigh]


@dataclass(frozen=True)
class TileLevel:
    """One tile applied to one shape.

    ``input_dims`` is the shape the tile sees, already padded with leading 1s; ``combined_dims``
    its tiled part after folding ``*`` dims (``major_dims`` are left alone); ``tile`` the tile
    with the ``*`` entries removed.
    """

    input_dims: tuple[int, ...]
    raw_tile: tuple[int, ...]
    leading_ones: int
    major_dims: tuple[int, ...]
    combined_dims: tuple[int, ...]
    tile: tuple[int, ...]

    @property
    def counts(self) -> tuple[int, ...]:
        return tuple(-(-d // t) for d, t in zip(self.combined_dims, self.tile))

    @property
    def output_dims(self) -> tuple[int, ...]:
        return self.major_dims + self.counts + self.tile

    def steps(self) -> tuple[Step, ...]:
        """This tile as pad, reshape and transpose, as the seed describes it."""
        m, k = len(self.major_dims), len(self.tile)
        interleaved: list[int] = []
        for c, t in zip(self.counts, self.tile):
            interleaved += [c, t]
        padded = self.major_dims + tuple(c * t for c, t in zip(self.counts, self.tile))
        perm = tuple(range(m)) + tuple(m + 2 * i for i in range(k)) + tuple(
            m + 2 * i + 1 for i in range(k)
        )
        return (
            Reshape(self.major_dims + self.combined_dims),
            PadHigh(padded),
            Reshape(self.major_dims + tuple(interleaved)),
            Transpose(perm),
        )

    def forward(self, index: Sequence[Index]) -> tuple[Index, ...]:
        """The element's coordinates in ``output_dims`` given those in the shape before."""
        index = (0,) * self.leading_ones + tuple(index)
        m = len(self.major_dims)
        combined: list[Index] = []
        acc: Index = 0
        for e, d, t in zip(index[m:], self.input_dims[m:], self.raw_tile):
            acc = acc * d + e
            if t != COMBINED:
                combined.append(acc)
                acc = 0
        return (
            tuple(index[:m])
            + tuple(e // t for e, t in zip(combined, self.tile))
            + tuple(e % t for e, t in zip(combined, self.tile))
        )

    def backward(
        self, index: Sequence[Index]
    ) -> tuple[tuple[Index, ...], tuple[tuple[Index, int], ...]]:
        """The inverse of ``forward``: the coordinates before, and the ``(e, bound)`` pairs
        with ``e < bound`` exactly when the position is a real element, not padding."""
        m, k = len(self.major_dims), len(self.tile)
        combined = []
        checks = []
        for c, r, t, d in zip(index[m : m + k], index[m + k :], self.tile, self.combined_dims):
            e = c * t + r
            if -(-d // t) * t != d:
                checks.append((e, d))
            combined.append(e)
        # Unfold each combined group, minor-most member first.
        tiled: list[Index] = []
        groups = _combine_groups(self.input_dims[m:], self.raw_tile)
        for e, group in zip(combined, groups):
            parts = []
            for d in reversed(group[1:]):
                parts.append(e % d)
                e = e // d
            parts.append(e)
            tiled += reversed(parts)
        before = tuple(index[:m]) + tuple(tiled)
        return before[self.leading_ones :], tuple(checks)


def _combine_groups(dims: Sequence[int], tile: Sequence[int]) -> list[tuple[int, ...]]:
    groups, current = [], []
    for d, t in zip(dims, tile):
        current.append(d)
        if t != COMBINED:
            groups.append(tuple(current))
            current = []
    return groups


# --- validation ------------------------------------------------------------------------------


def validate_layout(dims: Sequence[int], layout: Layout, where: str | None = None) -> None:
    """Raise ``LayoutError`` naming the problem when ``layout`` is not valid for ``dims``.

    >>> validate_layout((3, 5), Layout((1, 1)))
    Traceback (most recent call last):
    ...
    fusion.errors.LayoutError: minor_to_major {1,1} is not a permutation of 0..1
    """
    rank = len(dims)
    m2m = tuple(layout.minor_to_major)
    text = "{" + ",".join(str(d) for d in m2m) + "}"
    if len(m2m) != rank:
        raise LayoutError(
            f"minor_to_major {text} has {len(m2m)} entries but the shape has rank {rank}",
            where=where, expected=f"a permutation of 0..{rank - 1}" if rank else "{}",
        )
    if sorted(m2m) != list(range(rank)):
        raise LayoutError(
            f"minor_to_major {text} is not a permutation of 0..{rank - 1}", where=where
        )
    for n, tile in enumerate(layout.tiles):
        if not tile.dims:
            raise LayoutError(f"tile {n} is empty", where=where, text=str(tile))
        for d in tile.dims:
            if d != COMBINED and d <= 0:
                raise LayoutError(
                    f"tile {n} {tile} has dim {d}; tile dims must be positive or '*'",
                    where=where, text=str(tile),
                )
        if tile.dims[-1] == COMBINED:
            raise LayoutError(
                f"tile {n} {tile} ends in '*', which has no minor dim to combine with",
                where=where, text=str(tile),
            )
    if layout.element_size_in_bits < 0:
        raise LayoutError(
            f"element_size_in_bits {layout.element_size_in_bits} is negative", where=where
        )


# --- the tiled layout of one shape -----------------------------------------------------------


@dataclass(frozen=True)
class TiledLayout:
    """A validated layout applied to logical ``dims``: its physical shape and index math."""

    dims: tuple[int, ...]
    layout: Layout
    levels: tuple[TileLevel, ...]

    @staticmethod
    def of(dims: Sequence[int], layout: Layout, where: str | None = None) -> "TiledLayout":
        """Validate ``layout`` for ``dims`` and resolve its tiles (raises ``LayoutError``)."""
        dims = tuple(int(d) for d in dims)
        validate_layout(dims, layout, where)
        shape = tuple(dims[d] for d in reversed(layout.minor_to_major))
        levels = []
        for tile in layout.tiles:
            level = _tile_level(shape, tile.dims)
            levels.append(level)
            shape = level.output_dims
        return TiledLayout(dims, layout, tuple(levels))

    @property
    def major_to_minor(self) -> tuple[int, ...]:
        return tuple(reversed(self.layout.minor_to_major))

    @property
    def untiled_physical_dims(self) -> tuple[int, ...]:
        """The logical dims reordered major to minor, before any tiling."""
        return tuple(self.dims[d] for d in self.major_to_minor)

    @property
    def physical_shape(self) -> tuple[int, ...]:
        """The shape after every tile, major to minor; its row-major order is memory order."""
        return self.levels[-1].output_dims if self.levels else self.untiled_physical_dims

    @property
    def padded_elements(self) -> int:
        """Elements in the buffer, padding included."""
        return math.prod(self.physical_shape)

    def steps(self) -> tuple[Step, ...]:
        """Logical array -> physical array as transposes, reshapes and pads."""
        out: list[Step] = [Transpose(self.major_to_minor)]
        for level in self.levels:
            out += level.steps()
        out.append(Reshape(self.physical_shape))
        return tuple(out)

    def physical_index(self, index: Sequence[Index]) -> tuple[Index, ...]:
        """Coordinates in ``physical_shape`` of the logical element ``index``."""
        coords = tuple(index[d] for d in self.major_to_minor)
        for level in self.levels:
            coords = level.forward(coords)
        return coords

    def linear_index(self, index: Sequence[Index]) -> Index:
        """Offset in elements of the logical element ``index`` (ints or NumPy arrays).

        >>> TiledLayout.of((4, 8), parse_tiles("1,0", "(2,4)(2,1)")).linear_index((1, 0))
        1
        """
        if len(index) != len(self.dims):
            raise LayoutError(
                f"index {tuple(index)} has {len(index)} entries; the shape has rank "
                f"{len(self.dims)}"
            )
        return row_major_offset(self.physical_index(index), self.physical_shape)

    def logical_index(self, offset: Index) -> tuple[tuple[Index, ...], Index]:
        """The inverse: logical index at ``offset`` and whether it is a real element.

        Padding positions give ``valid`` False (their index is then meaningless).

        >>> TiledLayout.of((3, 5), parse_tiles("1,0", "(2,2)")).logical_index(17)
        ((2, 3), True)
        """
        logical, checks = self.logical_index_with_checks(offset)
        valid: Index = (offset >= 0) & (offset < self.padded_elements)
        for e, bound in checks:
            valid = valid & (e < bound)
        if isinstance(valid, (bool, np.bool_)):
            valid = bool(valid)
        return logical, valid

    def logical_index_with_checks(
        self, offset: Index
    ) -> tuple[tuple[Index, ...], tuple[tuple[Index, int], ...]]:
        """``logical_index`` for an offset in range, with the ``(e, bound)`` pairs whose
        ``e < bound`` says it is not padding (ints, arrays or affine expressions)."""
        coords: tuple[Index, ...] = row_major_coords(offset, self.physical_shape)
        checks: list[tuple[Index, int]] = []
        for level in reversed(self.levels):
            coords, level_checks = level.backward(coords)
            checks += level_checks
        logical: list[Index] = [0] * len(self.dims)
        for pos, d in enumerate(self.major_to_minor):
            logical[d] = coords[pos]
        return tuple(logical), tuple(checks)

    def offsets_array(self) -> np.ndarray:
        """The offset of every logical element, as an int64 array of shape ``dims``."""
        grids = np.indices(self.dims, dtype=np.int64) if self.dims else ()
        return np.asarray(self.linear_index(tuple(grids)), dtype=np.int64).reshape(self.dims)


def _tile_level(shape: tuple[int, ...], raw: tuple[int, ...]) -> TileLevel:
    leading = max(0, len(raw) - len(shape))
    shape = (1,) * leading + shape
    m = len(shape) - len(raw)
    combined = [math.prod(g) for g in _combine_groups(shape[m:], raw)]
    tile = tuple(t for t in raw if t != COMBINED)
    return TileLevel(shape, raw, leading, shape[:m], tuple(combined), tile)


def row_major_offset(index: Sequence[Index], dims: Sequence[int]) -> Index:
    """``linear_index(e, d)`` of the seed: ``e_n d_{n-1}...d_1 + ... + e_1``.

    >>> row_major_offset((1, 1, 0, 1), (2, 3, 2, 2))
    17
    """
    out: Index = 0
    for e, d in zip(index, dims):
        out = out * d + e
    return out


def row_major_coords(offset: Index, dims: Sequence[int]) -> tuple[Index, ...]:
    """The inverse of ``row_major_offset`` (no bounds check on the major-most dim).

    >>> row_major_coords(17, (2, 3, 2, 2))
    (1, 1, 0, 1)
    >>> row_major_coords(5, (2, 0, 3))
    (1, 0, 2)
    """
    out = []
    for d in reversed(dims[1:]):
        if d == 0:  # an empty shape holds no element, so no offset to split (and no mod 0)
            out.append(0)
            continue
        out.append(offset % d)
        offset = offset // d
    out.append(offset)
    return tuple(reversed(out)) if dims else ()


# --- sizes ------------------------------------------------------------------------------------


def storage_bits(dtype: str, layout: Layout) -> int:
    """Bits one element occupies in the buffer.

    ``E(n)`` wins; otherwise PRED under a ``(32,1)`` last tile is one bit (seed's TPU 1-bit
    format); otherwise the type's own width, and a byte for sub-byte types without ``E(n)``
    (XLA stores those unpacked, one per byte).

    >>> storage_bits("pred", parse_tiles("1,0", "(32,128)(32,1)")), storage_bits("bf16", Layout((0,)))
    (1, 16)
    """
    if layout.element_size_in_bits:
        return layout.element_size_in_bits
    et = element_type(dtype)
    if et.is_pred and layout.tiles and layout.tiles[-1].dims == (32, 1):
        return 1
    return max(et.bits, 8)


def elements_per_word(dtype: str, layout: Layout) -> int:
    """How many elements one 32-bit word of the packed buffer holds (1: not packed).

    A layout is word-packed when its last tile is ``(32/bits, 1)`` (bf16 ``(2,1)``, 8-bit
    ``(4,1)``, PRED ``(32,1)``) or when its elements are narrower than a byte (``E(4)``).

    >>> elements_per_word("bf16", parse_tiles("1,0", "(8,128)(2,1)")), elements_per_word("f32", Layout((0,)))
    (2, 1)
    """
    bits = storage_bits(dtype, layout)
    if bits >= 32 or 32 % bits:
        return 1
    per = 32 // bits
    if bits < 8 or (layout.tiles and layout.tiles[-1].dims == (per, 1)):
        return per
    return 1


def byte_size(dtype: str, dims: Sequence[int], layout: Layout) -> int:
    """Bytes of the buffer, padding included; packed buffers are whole 32-bit words.

    >>> byte_size("bf16", (37, 300), parse_tiles("1,0", "(8,128)(2,1)"))
    30720
    """
    n = TiledLayout.of(dims, layout).padded_elements
    per = elements_per_word(dtype, layout)
    if per > 1:
        return -(-n // per) * 4
    return -(-n * storage_bits(dtype, layout) // 8)


def word_and_bit(offset: int, dtype: str, layout: Layout) -> tuple[int, int]:
    """The 32-bit word and the bit within it (LSB = 0) where the element at ``offset`` starts.

    >>> word_and_bit(3, "bf16", parse_tiles("1,0", "(8,128)(2,1)"))
    (1, 16)
    """
    per = elements_per_word(dtype, layout)
    if per > 1:
        return offset // per, (offset % per) * (32 // per)
    return divmod(offset * storage_bits(dtype, layout), 32)


def parse_tiles(minor_to_major: str, tiles: str = "") -> Layout:
    """A small constructor for docs and tests: ``parse_tiles("1,0", "(8,128)(2,1)")``.

    >>> str(parse_tiles("4,3,2,1,0", "(*,*,2,*,3)"))
    '{4,3,2,1,0:T(*,*,2,*,3)}'
    """
    m2m = tuple(int(x) for x in minor_to_major.split(",") if x.strip())
    out = []
    for chunk in tiles.replace(" ", "").split(")"):
        if chunk:
            out.append(Tile(tuple(COMBINED if x == "*" else int(x) for x in chunk.lstrip("(").split(","))))
    return Layout(m2m, tuple(out))


# --- the layout as an indexing map -----------------------------------------------------------


def _step_map(step: Step, in_shape: tuple[int, ...]):

    idx = tuple(d(i) for i in range(len(in_shape)))
    if isinstance(step, Transpose):
        results = tuple(idx[p] for p in step.permutation)
    elif isinstance(step, Reshape):
        results = row_major_coords(row_major_offset(idx, in_shape), step.dims)
    else:  # padding only widens the domain: the coordinates stay
        results = idx
    return IndexingMap.from_sizes(results, in_shape)


def layout_indexing_map(dims: Sequence[int], layout: Layout, simplify: bool = True):
    """Logical index -> physical linear offset, as an ``IndexingMap``, composed from the
    layout's transpose, pad, reshape and transpose steps and the final row-major flattening.

    >>> print(layout_indexing_map((3, 5), parse_tiles("1,0", "(2,2)")))
    (d0, d1) -> ((d0 floordiv 2) * 12 + (d1 floordiv 2) * 4 + (d0 mod 2) * 2 + d1 mod 2), domain: d0 in [0, 2], d1 in [0, 4]
    """
    tiled = TiledLayout.of(dims, layout)
    steps = tiled.steps()
    shapes = [tiled.dims]
    m = IndexingMap.identity(tiled.dims)
    for step in steps:
        m = compose(_step_map(step, shapes[-1]), m, simplify=False)
        shapes.append(
            tuple(shapes[-1][p] for p in step.permutation)
            if isinstance(step, Transpose) else tuple(step.dims)
        )

    physical = tiled.physical_shape
    flatten = IndexingMap.from_sizes(
        (row_major_offset(tuple(d(i) for i in range(len(physical))), physical),), physical
    )
    m = compose(flatten, m, simplify=False)
    return m.simplify() if simplify else m


def inverse_layout_indexing_map(dims: Sequence[int], layout: Layout, simplify: bool = True):
    """Physical linear offset -> logical index, as an ``IndexingMap`` over
    ``d0 in [0, padded_elements - 1]`` whose constraints exclude the padding positions.

    >>> m = inverse_layout_indexing_map((3, 5), parse_tiles("1,0", "(2,2)"))
    >>> m.evaluate((17,)), m.contains((17,)), m.contains((9,))
    ((2, 3), True, False)
    """

    tiled = TiledLayout.of(dims, layout)
    logical, checks = tiled.logical_index_with_checks(d(0))
    m = IndexingMap.create(
        logical, [(0, tiled.padded_elements - 1)],
        constraints=[(e, (0, bound - 1)) for e, bound in checks],
    )
    return m.simplify() if simplify else m
