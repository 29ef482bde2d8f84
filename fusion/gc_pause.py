"""``paused_gc``: the cyclic garbage collector off while a pass builds many objects.

The IR and the analyses are frozen dataclasses and tuples: a pass over a module of n
instructions allocates O(n) objects that form no reference cycles, yet the collector's full
collections walk every live object again and again as the heap grows, which made the passes
over 20,000-instruction modules superlinear (a third of the time at 10,000 ops).  Nested uses
are fine: only the outermost turns the collector back on (and only if it was on).

>>> import gc
>>> with paused_gc():
...     gc.isenabled()
False
"""
from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def paused_gc() -> Iterator[None]:
    """Disable the cyclic collector for the block; restore its previous state after."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


__all__ = ["paused_gc"]
