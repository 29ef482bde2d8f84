"""The order in which XLA:CPU combines the elements of an 8-bit float reduction.

An fp8 sum rounds after every add (3 or 2 mantissa bits: the order changes most results), so
matching XLA bit for bit means combining in XLA's order.  Measured against XLA:CPU (jaxlib
0.10.2) on reduces of every shape tried (``tests/triton_backend/test_fp8_reductions.py``):

* a ``reduce`` whose reduced dims are all at most 32 folds sequentially from the init value,
  over the reduced elements in row-major order of the reduced dims (whatever the layout):
  ``((init + x0) + x1) + ...``, rounding after each combine;
* otherwise XLA's ``TreeReductionRewriter`` (window 32) first turns it into a
  ``reduce-window`` of window 32 and stride 32 on *every* reduced dim, ``SAME`` padding with
  the init value (``pad_low = total // 2``), then a reduce of that, again until every reduced
  dim is at most 32; each window folds sequentially from init in row-major window order;
* a ``reduce-window`` folds each window sequentially from init in row-major order (XLA's
  cumulative-sum rewrite of rank-1 windows as large as the operand is not modelled).

XLA:CPU does the same for bf16 and f16 (their sums round after every add too).  The reference
evaluator keeps its pairwise tree for those, and kernels accumulate them in f32, as XLA:GPU's
emitters may; for them the order only moves the last bits, for fp8 it moves most sums.

>>> window_levels((300,))
((WindowLevel(sizes=(300,), pad_low=(10,)),), (10,))
>>> window_levels((40, 5))[1], window_levels((40, 5))[0][0].pad_low
((2, 1), (12, 13))
"""
from __future__ import annotations

from dataclasses import dataclass

from fusion.ir.element_types import ElementType

#: XLA:CPU's ``TreeReductionRewriter`` window.
WINDOW = 32


@dataclass(frozen=True)
class WindowLevel:
    """One ``reduce-window`` XLA inserts: its input's reduced-dim sizes and low padding (the
    high padding fills each dim up to a whole number of windows)."""

    sizes: tuple[int, ...]
    pad_low: tuple[int, ...]

    @property
    def out_sizes(self) -> tuple[int, ...]:
        return tuple(-(-n // WINDOW) for n in self.sizes)


def window_levels(sizes: tuple[int, ...]) -> tuple[tuple[WindowLevel, ...], tuple[int, ...]]:
    """The reduce-window levels XLA:CPU puts before a reduce over dims of ``sizes``, and the
    sizes the final sequential reduce folds."""
    levels = []
    sizes = tuple(sizes)
    while 0 not in sizes and any(n > WINDOW for n in sizes):
        out = tuple(-(-n // WINDOW) for n in sizes)
        levels.append(WindowLevel(sizes, tuple((o * WINDOW - n) // 2 for o, n in zip(out, sizes))))
        sizes = out
    return tuple(levels), sizes


def folds_in_xla_order(t: ElementType) -> bool:
    """Whether reductions over ``t`` combine in XLA:CPU's order (:mod:`this module <.>`):
    the 8-bit floats, whose sums the order changes most.

    >>> from fusion.ir.element_types import ELEMENT_TYPES as T
    >>> folds_in_xla_order(T["f8e4m3fn"]), folds_in_xla_order(T["bf16"])
    (True, False)
    """
    return t.is_float and t.bits == 8


__all__ = ["WINDOW", "WindowLevel", "folds_in_xla_order", "window_levels"]
