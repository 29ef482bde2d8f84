"""The ``sort`` rule: multi-operand sort along one dim with a comparator computation.

The comparator ``less(lhs_0, rhs_0, lhs_1, rhs_1, ...)`` is evaluated on all pairs of a row at
once; for a strict weak order, element ``i`` goes to position ``#{j: less(j, i)} + #{j < i:
j and i equivalent}``, which is the stable sort (also a valid result when ``is_stable`` is
false).  Long rows make the same counts block by block (``_PAIRWISE_MAX_ROW`` squared pairs at
a time): a 32,000-long row is 245 batches of array work, not half a million comparator calls
one by one; a comparator the evaluator cannot run on arrays is still called per comparison.
A comparator that is no strict weak order (a plain float compare meeting a NaN, which is
equivalent to every value) may give two elements one count: ties keep index order, so the
result is always a permutation of the row.

>>> less = lambda arrays: (arrays[0] < arrays[1],)
>>> stable_sort_positions(less, [np.array([[3, 1, 2, 1]])]).tolist()
[[3, 0, 2, 1]]
"""
from __future__ import annotations

import functools
from typing import Any, Callable, Sequence

import numpy as np

from fusion.evaluator.failures import op_error

Compare = Callable[[list[np.ndarray]], Sequence[np.ndarray]]

_PAIRWISE_LIMIT = 1 << 22
"""At most this many comparator evaluations per pairwise batch (rows x n x n)."""

_PAIRWISE_MAX_ROW = 2048
"""Rows longer than this are compared block by block (the pairwise table would be too big)."""


def stable_sort_positions(less: Compare, rows: list[np.ndarray]) -> np.ndarray:
    """For rows ``[batch, n]`` of each operand, the sorted position of every element."""
    n = rows[0].shape[-1]
    pairs = []
    for row in rows:
        pairs += [row[:, :, None], row[:, None, :]]
    # before[b, j, i]: element j sorts strictly before element i.
    before = np.asarray(less(pairs)[0], bool)
    after = np.swapaxes(before, 1, 2)
    equivalent = ~before & ~after
    earlier = np.tril(np.ones((n, n), bool), -1)  # earlier[i, j]: j < i
    counts = before.sum(axis=1) + (np.swapaxes(equivalent, 1, 2) & earlier).sum(axis=2)
    return np.stack([_permutation(c) for c in counts])


def blocked_sort_positions(less: Compare, rows: list[np.ndarray],
                           block: int = _PAIRWISE_MAX_ROW) -> np.ndarray:
    """``stable_sort_positions`` of one row ``[1, n]`` of each operand, its ``n x n``
    comparisons made ``block x block`` at a time.

    >>> less = lambda arrays: (arrays[0] < arrays[1],)
    >>> blocked_sort_positions(less, [np.array([[3, 1, 2, 1, 0]])], block=2).tolist()
    [4, 1, 3, 2, 0]
    """
    n = rows[0].shape[-1]
    counts = np.zeros(n, np.int64)
    index = np.arange(n)
    for a in range(0, n, block):
        mine = slice(a, min(a + block, n))
        for b in range(0, n, block):
            theirs = slice(b, min(b + block, n))
            pairs_before, pairs_after = [], []
            for row in rows:
                x, y = row[0, mine][None, :], row[0, theirs][:, None]
                pairs_before += [y, x]
                pairs_after += [x, y]
            # [j, i]: element j of theirs sorts before (after) element i of mine.
            before = np.asarray(less(pairs_before)[0], bool)
            after = np.asarray(less(pairs_after)[0], bool)
            earlier = index[theirs][:, None] < index[mine][None, :]
            counts[mine] += before.sum(axis=0) + (~before & ~after & earlier).sum(axis=0)
    return _permutation(counts)


def _permutation(counts: np.ndarray) -> np.ndarray:
    """Each element's position when sorted by ``counts``, ties in index order: ``counts``
    itself where it is a permutation."""
    order = np.argsort(counts, kind="stable")
    positions = np.empty_like(order)
    positions[order] = np.arange(len(order))
    return positions


def eval_sort(ev: Any, instr: Any, args: list) -> Any:
    dimension = instr.attr("dimensions")[0]
    rank = args[0].ndim
    if not 0 <= dimension < rank:
        raise op_error(instr, f"sort dimension {dimension} out of range for rank {rank}")
    name = instr.attr("to_apply")
    less = lambda arrays: ev.call_scalar(name, arrays, caller=instr)  # noqa: E731
    moved = [np.moveaxis(a, dimension, -1) for a in args]
    batch_shape = moved[0].shape[:-1]
    n = moved[0].shape[-1]
    rows = [m.reshape(-1, n) for m in moved]
    count = rows[0].shape[0]
    sorted_rows = [np.empty_like(r) for r in rows]
    if n <= _PAIRWISE_MAX_ROW:
        chunk = max(1, _PAIRWISE_LIMIT // max(n * n, 1))
        for begin in range(0, count, chunk):
            block = [r[begin : begin + chunk] for r in rows]
            positions = stable_sort_positions(less, block)
            row_index = np.arange(positions.shape[0])[:, None]
            for out, b in zip(sorted_rows, block):
                out[begin + row_index, positions] = b
    elif ev.is_batchable(name, instr):
        for r in range(count):
            positions = blocked_sort_positions(less, [row[r : r + 1] for row in rows],
                                               _PAIRWISE_MAX_ROW)
            for out, row in zip(sorted_rows, rows):
                out[r, positions] = row[r]
    else:  # a comparator run element by element: n log n calls, not n^2
        for r in range(count):
            def compare(i: int, j: int, r: int = r) -> int:
                if bool(less([x for row in rows for x in (row[r, i], row[r, j])])[0]):
                    return -1
                if bool(less([x for row in rows for x in (row[r, j], row[r, i])])[0]):
                    return 1
                return 0

            order = sorted(range(n), key=functools.cmp_to_key(compare))
            for out, row in zip(sorted_rows, rows):
                out[r] = row[r, order]
    results = [np.moveaxis(s.reshape(batch_shape + (n,)), -1, dimension) for s in sorted_rows]
    return results[0] if len(results) == 1 else tuple(results)


SORT_RULES: dict[str, Callable[..., Any]] = {
    "sort": eval_sort,
}
