"""IREE's ``NestedLayoutAttr``: distributing a vector over subgroups and threads (seed
``nested_layout.en.txt``).

Each vector dim ``i`` is viewed as ``subgroup x batch x outer x thread x element`` (tile counts,
major to minor).  A (subgroup, thread) pair picks one subgroup tile and one thread tile per dim
through its *virtual* ids ``(id floordiv stride[i]) mod tile[i]`` (stride 0: not distributed
at that level); it then holds ``batch x outer x element`` values per dim, seen as the local
vector of shape ``batch[i] * outer[i] * element[i]``.

>>> v = NestedLayout((2, 1), (2, 4), (1, 1), (16, 4), (1, 4), (1, 0), (1, 16))
>>> v.vector_shape, v.distributed_shape
((64, 64), (2, 16))
>>> v.virtual_thread_ids(16)
(0, 1)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from tiling.maps.affine_expr import AffineExpr, d, s
from tiling.maps.indexing_map import IndexingMap
from fusion.errors import NestedLayoutError  # defined there with every user error; re-exported here

Index = Any  # int, NumPy integer array or AffineExpr: the arithmetic below serves all three


_FIELDS = (
    "subgroup_tile", "batch_tile", "outer_tile", "thread_tile", "element_tile",
    "subgroup_strides", "thread_strides",
)


@dataclass(frozen=True)
class NestedLayout:
    """``#iree_vector_ext.nested_layout`` with its seven per-dim arrays (validated)."""

    subgroup_tile: tuple[int, ...]
    batch_tile: tuple[int, ...]
    outer_tile: tuple[int, ...]
    thread_tile: tuple[int, ...]
    element_tile: tuple[int, ...]
    subgroup_strides: tuple[int, ...]
    thread_strides: tuple[int, ...]

    def __post_init__(self) -> None:
        for name in _FIELDS:
            object.__setattr__(self, name, tuple(int(x) for x in getattr(self, name)))
        ranks = {name: len(getattr(self, name)) for name in _FIELDS}
        if len(set(ranks.values())) != 1:
            listed = ", ".join(f"{k}={v}" for k, v in ranks.items())
            raise NestedLayoutError(f"nested layout fields have different ranks: {listed}")
        for name in _FIELDS[:5]:
            for i, t in enumerate(getattr(self, name)):
                if t <= 0:
                    raise NestedLayoutError(f"{name}[{i}] is {t}; tile counts must be positive")
        for name, tiles in (("subgroup_strides", self.subgroup_tile),
                            ("thread_strides", self.thread_tile)):
            for i, (st, t) in enumerate(zip(getattr(self, name), tiles)):
                if st < 0:
                    raise NestedLayoutError(f"{name}[{i}] is {st}; strides must be >= 0")
                if st == 0 and t != 1:
                    raise NestedLayoutError(
                        f"{name}[{i}] is 0 (dim {i} not distributed) but its tile is {t}",
                        expected="tile 1 where the stride is 0",
                    )

    @property
    def rank(self) -> int:
        return len(self.subgroup_tile)

    @property
    def vector_shape(self) -> tuple[int, ...]:
        """The undistributed vector's shape: per dim the product of all five tiles."""
        return tuple(
            math.prod(x) for x in zip(self.subgroup_tile, self.batch_tile, self.outer_tile,
                                      self.thread_tile, self.element_tile)
        )

    @property
    def distributed_shape(self) -> tuple[int, ...]:
        """The shape each thread holds: per dim ``batch * outer * element``."""
        return tuple(b * o * e for b, o, e in
                     zip(self.batch_tile, self.outer_tile, self.element_tile))

    @property
    def num_subgroups(self) -> int:
        return math.prod(self.subgroup_tile)

    @property
    def num_threads(self) -> int:
        """Threads per subgroup the layout distinguishes."""
        return math.prod(self.thread_tile)

    def check_vector_shape(self, shape: Sequence[int], where: str | None = None) -> None:
        """Raise unless the per-dim products equal ``shape``.

        >>> NestedLayout((1,), (2,), (1,), (4,), (2,), (0,), (1,)).check_vector_shape((15,))
        Traceback (most recent call last):
        ...
        fusion.errors.NestedLayoutError: nested layout covers vector<16> but the vector is vector<15>
        """
        shape = tuple(shape)
        if shape != self.vector_shape:
            text = lambda s: "vector<" + "x".join(str(x) for x in s) + ">"  # noqa: E731
            raise NestedLayoutError(
                f"nested layout covers {text(self.vector_shape)} but the vector is {text(shape)}",
                where=where,
            )

    # --- ids ---------------------------------------------------------------------------------

    def virtual_subgroup_ids(self, subgroup_id: Index) -> tuple[Index, ...]:
        """``(subgroup_id floordiv subgroup_stride[i]) mod subgroup_tile[i]`` per dim."""
        return _virtual_ids(subgroup_id, self.subgroup_strides, self.subgroup_tile)

    def virtual_thread_ids(self, thread_id: Index) -> tuple[Index, ...]:
        """``(thread_id floordiv thread_stride[i]) mod thread_tile[i]`` per dim."""
        return _virtual_ids(thread_id, self.thread_strides, self.thread_tile)

    def subgroup_id(self, virtual_ids: Sequence[int]) -> int:
        """The inverse: ``sum(stride[i] * v[i]) mod prod(tile)``."""
        return _linear_id(virtual_ids, self.subgroup_strides, self.subgroup_tile)

    def thread_id(self, virtual_ids: Sequence[int]) -> int:
        """The inverse: ``sum(stride[i] * v[i]) mod prod(tile)``."""
        return _linear_id(virtual_ids, self.thread_strides, self.thread_tile)

    def subgroup_order(self, hardware_subgroups: int | None = None) -> tuple[int, ...]:
        """Subgroup ids in row-major order of the virtual ids; past the hardware's count,
        a subgroup id wraps modulo it (which must divide the number used).

        >>> NestedLayout((4, 2), (1, 1), (1, 1), (1, 1), (1, 1), (1, 4), (0, 0)).subgroup_order()
        (0, 4, 1, 5, 2, 6, 3, 7)
        """
        ids = tuple(self.subgroup_id(v) for v in np.ndindex(*self.subgroup_tile))
        if hardware_subgroups is None:
            return ids
        if hardware_subgroups <= 0 or self.num_subgroups % hardware_subgroups:
            raise NestedLayoutError(
                f"the layout uses {self.num_subgroups} subgroups, not a multiple of the "
                f"hardware's {hardware_subgroups}"
            )
        return tuple(i % hardware_subgroups for i in ids)

    # --- distribution ------------------------------------------------------------------------

    def vector_index(
        self, subgroup_id: Index, thread_id: Index, batch: Sequence[Index],
        outer: Sequence[Index], element: Sequence[Index],
    ) -> tuple[Index, ...]:
        """The vector index of value (batch, outer, element) of a (subgroup, thread).

        >>> v = NestedLayout((2, 1), (2, 4), (1, 1), (16, 4), (1, 4), (1, 0), (1, 16))
        >>> v.vector_index(1, 17, (1, 3), (0, 0), (0, 2))
        (49, 54)
        """
        sg = self.virtual_subgroup_ids(subgroup_id)
        th = self.virtual_thread_ids(thread_id)
        out = []
        for i in range(self.rank):
            x = sg[i] * self.batch_tile[i] + batch[i]
            x = x * self.outer_tile[i] + outer[i]
            x = x * self.thread_tile[i] + th[i]
            out.append(x * self.element_tile[i] + element[i])
        return tuple(out)

    def thread_values(self, subgroup_id: int, thread_id: int) -> np.ndarray:
        """The vector indices one (subgroup, thread) holds, as an int64 array of shape
        ``batch_tile + outer_tile + element_tile + (rank,)`` (batch x outer x element order).

        >>> NestedLayout((1,), (2,), (1,), (4,), (2,), (0,), (1,)).thread_values(0, 1)[:, 0, :, 0].tolist()
        [[2, 3], [10, 11]]
        """
        r = self.rank
        local = self.batch_tile + self.outer_tile + self.element_tile
        grids = np.indices(local, dtype=np.int64) if local else np.zeros((0,), np.int64)
        idx = self.vector_index(subgroup_id, thread_id, grids[:r], grids[r : 2 * r], grids[2 * r :])
        return np.stack(np.broadcast_arrays(*idx), axis=-1) if r else np.zeros(local + (0,), np.int64)

    def distributed_values(self, subgroup_id: int, thread_id: int) -> np.ndarray:
        """The same values arranged as the thread's local vector (``distributed_shape``):
        local index ``(b * outer + o) * element + e`` per dim.

        >>> v = NestedLayout((2, 1), (2, 4), (1, 1), (16, 4), (1, 4), (1, 0), (1, 16))
        >>> v.distributed_values(0, 0).shape, v.distributed_values(0, 0)[1, 5].tolist()
        ((2, 16, 2), [16, 17])
        """
        r = self.rank
        held = self.thread_values(subgroup_id, thread_id)
        # (b0..br, o0..or, e0..er, r) -> (b0, o0, e0, b1, o1, e1, ..., r), then merge per dim.
        perm = [k for i in range(r) for k in (i, r + i, 2 * r + i)] + [3 * r]
        return held.transpose(perm).reshape(self.distributed_shape + (r,))

    def vector_index_exprs(self) -> tuple[AffineExpr, ...]:
        """The distribution as affine expressions: ``d0`` the subgroup id, ``d1`` the thread
        id, symbols ``s0..`` the batch, then outer, then element indices.

        >>> [str(e) for e in NestedLayout((2,), (1,), (1,), (4,), (2,), (4,), (1,)).vector_index_exprs()]
        ['s0 * 8 + s1 * 8 + s2 + (d1 mod 4) * 2 + ((d0 floordiv 4) mod 2) * 8']
        """
        r = self.rank
        return self.vector_index(
            d(0), d(1), [s(i) for i in range(r)], [s(r + i) for i in range(r)],
            [s(2 * r + i) for i in range(r)],
        )

    def indexing_map(self, simplify: bool = True) -> IndexingMap:
        """``(subgroup_id, thread_id)[batch..., outer..., element...] -> vector index``, over
        ``subgroup_id < prod(subgroup_tile)`` and ``thread_id < prod(thread_tile)``.

        >>> print(NestedLayout((1,), (2,), (1,), (4,), (2,), (0,), (1,)).indexing_map())
        (d0, d1)[s0, s1, s2] -> (d1 * 2 + s0 * 8 + s1 * 8 + s2), domain: d0 in [0, 0], d1 in [0, 3], s0 in [0, 1], s1 in [0, 0], s2 in [0, 1]
        """
        m = IndexingMap.from_sizes(
            self.vector_index_exprs(), (self.num_subgroups, self.num_threads),
            self.batch_tile + self.outer_tile + self.element_tile,
        )
        return m.simplify() if simplify else m


def _virtual_ids(linear: Index, strides: Sequence[int], tiles: Sequence[int]) -> tuple[Index, ...]:
    return tuple(0 if st == 0 else (linear // st) % t for st, t in zip(strides, tiles))


def _linear_id(virtual: Sequence[int], strides: Sequence[int], tiles: Sequence[int]) -> int:
    if len(virtual) != len(tiles):
        raise NestedLayoutError(f"{len(virtual)} virtual ids for a rank-{len(tiles)} layout")
    return sum(st * v for st, v in zip(strides, virtual)) % math.prod(tiles)
