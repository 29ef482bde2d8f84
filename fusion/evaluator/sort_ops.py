"""The ``sort`` rule: multi-operand sort along one dim with a comparator computation.

The comparator ``less(lhs_0, rhs_0, lhs_1, rhs_1, ...)`` is evaluated on all pairs of a row at
once; for a strict weak order, element ``i`` goes to position ``#{j: less(j, i)} + #{j < i:
j and i equivalent}``, which is the stable sort (also a valid result when ``is_stable`` is
false).  Long rows fall back to a comparison sort calling the comparator per comparison.

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
"""Rows longer than this are sorted by comparison (the pairwise table would be too big)."""


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
    return before.sum(axis=1) + (np.swapaxes(equivalent, 1, 2) & earlier).sum(axis=2)


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
    else:
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
