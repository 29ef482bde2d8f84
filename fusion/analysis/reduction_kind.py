"""Row and column reductions, grouped as XLA's ``reduction_utils.cc`` groups them.

A reduce whose kept dims (or reduced dims) are physically consecutive is rewritten by XLA as
a 3-D problem ``ReductionDimensions``:

* row reduction ``[reduced, kept, reduced]``: the minor-most physical dims are reduced, so
  a warp reads a contiguous row and combines it with shuffles;
* column reduction ``[kept, reduced, kept]``: the minor-most dims are kept, so threads read
  adjacent columns and combine through shared memory.

>>> from fusion.ir.shape import ArrayShape
>>> r = reduction_dimensions(ArrayShape("f32", (128, 1024)), (1,))
>>> r.is_row_reduction, r.dimensions
(True, (1, 128, 1024))
>>> c = reduction_dimensions(ArrayShape("f32", (1024, 128)), (0,))
>>> c.is_row_reduction, c.dimensions
(False, (1, 1024, 128))
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from fusion.ir.shape import ArrayShape

WARP_SIZE = 32
# reduction_utils.cc: a row reduction is race free (one block owns a row) when its minor
# reduced extent fits MinThreadsXRowReduction * 16 and its major reduced extent is at most 8.
MIN_THREADS_X_ROW_REDUCTION = 1024
ROW_REDUCTION_TILE_X = 16
BATCHED_REDUCTION_RACE_FREE_BOUND = 8
COLUMN_REDUCTION_TILE_Y = 128


@dataclass(frozen=True)
class ReductionDimensions:
    """XLA's ``ReductionDimensions``; ``dimensions`` is the 3-D view described above."""

    is_row_reduction: bool
    dimensions: tuple[int, int, int]
    reduced_dims: tuple[int, ...]
    kept_dims: tuple[int, ...]


def _physical_positions(shape: ArrayShape, dims) -> list[int]:
    m2m = shape.effective_layout.minor_to_major
    return sorted(m2m.index(d) for d in dims)


def dimensions_are_consecutive(shape: ArrayShape, dims) -> bool:
    """XLA's ``LayoutUtil::AreDimensionsConsecutive``: adjacent in ``minor_to_major``."""
    pos = _physical_positions(shape, dims)
    return all(b == a + 1 for a, b in zip(pos, pos[1:]))


def partition_by_middle(shape: ArrayShape, middle) -> tuple[int, int, int]:
    """``[major, middle, minor]`` products of the dims around the consecutive ``middle`` dims.

    >>> partition_by_middle(ArrayShape("f32", (2, 3, 5, 7)), (1, 2))
    (2, 15, 7)
    """
    middle = set(middle)
    out = [1, 1, 1]
    part = 2  # walking from minor to major: minor part first
    for d in shape.effective_layout.minor_to_major:
        if d in middle:
            part = 1
        elif part == 1:
            part = 0
        out[part] *= shape.dims[d]
    return out[0], out[1], out[2]


def kept_and_reduced(rank: int, dimensions: Iterable[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(kept, reduced)`` dims of a rank-``rank`` operand reduced over ``dimensions``.

    ``kept`` is in operand order: output dim ``j`` of the reduce is operand dim ``kept[j]``.
    ``reduced`` is ``dimensions`` in the order the reduce lists them.  Every phase (evaluator,
    indexing, tile analysis, kernel plan, lowering) takes the mapping from here.

    >>> kept_and_reduced(4, (3, 1))
    ((0, 2), (3, 1))
    """
    reduced = tuple(dimensions)
    return tuple(d for d in range(rank) if d not in reduced), reduced


def reduction_dimensions(shape: ArrayShape, reduced) -> ReductionDimensions:
    """XLA's ``GetReductionKindAndContiguousComponents`` for a reduce of ``shape``."""
    kept, reduced = kept_and_reduced(shape.rank, sorted(reduced))
    if not kept:
        return ReductionDimensions(True, (1, 1, shape.num_elements), reduced, kept)
    if dimensions_are_consecutive(shape, kept):
        major, middle, minor = partition_by_middle(shape, kept)
        if middle == 1:
            return ReductionDimensions(True, (1, 1, major * minor), reduced, kept)
        if minor == 1:
            return ReductionDimensions(False, (1, major, middle), reduced, kept)
        return ReductionDimensions(True, (major, middle, minor), reduced, kept)
    major, middle, minor = partition_by_middle(shape, reduced)
    if minor == 1:
        return ReductionDimensions(True, (1, major, middle), reduced, kept)
    return ReductionDimensions(False, (major, middle, minor), reduced, kept)


def is_unnested_reduction_faster_than_elemental(r: ReductionDimensions) -> bool:
    """XLA's heuristic: small reductions are cheaper with the loop emitter.

    A row reduction needs a minor reduced extent of at least a warp or dividing it; the
    column rule was found by sweeping small column reductions (reduced extent ``major``,
    kept minor extent ``minor``).
    A reduction over no elements is just its init value: the loop emitter writes that
    (and XLA's ``WARP_SIZE % extent`` would divide by zero).

    >>> is_unnested_reduction_faster_than_elemental(ReductionDimensions(True, (1, 5, 0), (1,), (0,)))
    False
    """
    if 0 in r.dimensions:
        return False
    if r.is_row_reduction:
        return r.dimensions[2] >= WARP_SIZE or WARP_SIZE % r.dimensions[2] == 0
    major, minor = r.dimensions[1], r.dimensions[2]
    prefer_elemental = (
        major < WARP_SIZE
        or (major < 2 * WARP_SIZE and minor < WARP_SIZE)
        or (major < 4 * WARP_SIZE and minor < 8)
        or (major < 8 * WARP_SIZE and minor < 3)
    )
    return not prefer_elemental


def is_reduction_from_or_to_contiguous_dimensions(
    shape: ArrayShape, reduced
) -> tuple[bool, str]:
    """Whether the reduction emitter handles this reduce, and why not when it does not."""
    kept = [d for d in range(shape.rank) if d not in reduced]
    if not (dimensions_are_consecutive(shape, kept) or dimensions_are_consecutive(shape, reduced)):
        return False, "neither the kept nor the reduced dims are physically consecutive"
    r = reduction_dimensions(shape, reduced)
    if 0 in r.dimensions:
        return False, f"zero-size reduce (grouped {list(r.dimensions)}): the loop emitter writes the init"
    if not is_unnested_reduction_faster_than_elemental(r):
        return False, (
            f"too small for the reduction emitter (grouped {list(r.dimensions)}; "
            "XLA's heuristic prefers the loop emitter)"
        )
    return True, ""


def reduction_is_race_free(r: ReductionDimensions) -> bool:
    """Whether one block computes each output (needed to fuse ops after the reduce)."""
    if r.is_row_reduction:
        return (
            r.dimensions[2] <= MIN_THREADS_X_ROW_REDUCTION * ROW_REDUCTION_TILE_X
            and r.dimensions[0] <= BATCHED_REDUCTION_RACE_FREE_BOUND
        )
    return r.dimensions[1] <= WARP_SIZE * COLUMN_REDUCTION_TILE_Y


def describe(r: ReductionDimensions) -> str:
    """Words for the reason string."""
    if r.is_row_reduction:
        return "row reduction: reduced dims are the minor-most"
    return "column reduction: kept dims are the minor-most"
