"""What the cost-model tests share about tile configurations timed on a GPU
(``tests/data/h200_*_tiles.csv``, ``bench/tile_sweep.py``)."""
from __future__ import annotations

import itertools
from collections.abc import Sequence


def pick_regrets(predictions: Sequence[tuple]) -> list[float]:
    """Per fusion, the measured time of the configuration the model predicts fastest over the
    fastest measured one (1.0: the model picks the best).  ``predictions`` are rows
    ``(program, fusion, measured, predicted, ...)``, a fusion's rows next to each other.

    >>> pick_regrets([("p", "f", 2.0, 1.0), ("p", "f", 1.0, 3.0), ("p", "g", 5.0, 5.0)])
    [2.0, 1.0]
    """
    regrets = []
    for _, group in itertools.groupby(predictions, key=lambda p: (p[0], p[1])):
        group = list(group)
        picked = min(group, key=lambda p: p[3])
        regrets.append(picked[2] / min(p[2] for p in group))
    return regrets
