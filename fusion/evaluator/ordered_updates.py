"""Sequential read-modify-write updates, vectorized by rounds.

Scatter and select-and-scatter apply a combiner to targets one update at a time, in update
order.  Only the order per target matters, so the updates are split into rounds (the k-th
update of every target) and each round, whose targets are distinct, is applied at once.

>>> out = [np.zeros(3)]
>>> combine = lambda arrays: (arrays[0] * 10 + arrays[1],)
>>> apply_in_order(combine, out, np.array([2, 0, 2]), [np.array([1.0, 2.0, 3.0])])
>>> out[0].tolist()
[2.0, 0.0, 13.0]
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np


def apply_in_order(
    combine: Callable[[list[np.ndarray]], Sequence[np.ndarray]],
    outs: list[np.ndarray],
    targets: np.ndarray,
    updates: list[np.ndarray],
) -> None:
    """``outs[i][t] = combine(outs..[t], updates..[j])[i]`` for each j in order, t = targets[j].

    ``outs`` are flat arrays changed in place; ``targets`` and ``updates`` are 1-D, same length.
    """
    count = len(targets)
    if count == 0:
        return
    order = np.argsort(targets, kind="stable")
    sorted_targets = targets[order]
    positions = np.arange(count)
    group_start = np.concatenate([[True], sorted_targets[1:] != sorted_targets[:-1]])
    first_of_group = np.maximum.accumulate(np.where(group_start, positions, 0))
    occurrence = positions - first_of_group
    for round_index in range(int(occurrence.max()) + 1):
        chosen = order[occurrence == round_index]
        where = targets[chosen]
        new = combine([out[where] for out in outs] + [u[chosen] for u in updates])
        for out, value in zip(outs, new):
            out[where] = value
