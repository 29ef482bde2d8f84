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
* a ``reduce-window`` folds each window sequentially from init in row-major order;
* except a scan (a cumulative sum: one non-trivial window dim, as long as its operand dim
  ``n``, stride 1, padded by ``n - 1`` (inclusive) or ``n`` (exclusive) at the low (forward)
  or high (reverse) end only, :func:`scan_window`) longer than ``SCAN_BASE`` = 16, which XLA's
  ``ReduceWindowRewriter`` turns into a tree: pad the scan dim with init at the high end to a
  multiple of 16, split it into columns of 16, scan each column (a window of 16), take each
  column's total (its last element; the first for a reverse scan), scan the totals
  exclusively (again a tree when there are more than 16), then combine each column's scan
  with the prefix before it, ``to_apply(column_scan, prefix)``, and slice the padding off (an
  exclusive scan: the inclusive tree, padded with one init value).

XLA:CPU does the same for bf16 and f16 (their sums round after every add too).  The reference
evaluator keeps its pairwise tree for those, and kernels accumulate them in f32, as XLA:GPU's
emitters may; for them the order only moves the last bits, for fp8 it moves most sums.

>>> window_levels((300,))
((WindowLevel(sizes=(300,), pad_low=(10,)),), (10,))
>>> window_levels((40, 5))[1], window_levels((40, 5))[0][0].pad_low
((2, 1), (12, 13))
>>> scan_window([WindowDim(1), WindowDim(40, padding_low=39)], (4, 40))
Scan(dim=1, length=40, reverse=False, exclusive=False)
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fusion.ir.attributes import WindowDim
from fusion.ir.element_types import ElementType
from fusion.ir.hlo_module import HloComputation, HloInstruction
from fusion.ir.shape import ArrayShape
from fusion.opcodes import traits

#: XLA:CPU's ``TreeReductionRewriter`` window.
WINDOW = 32

#: XLA:CPU's ``ReduceWindowRewriter`` base length: longer scans become trees of 16-wide scans.
SCAN_BASE = 16


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


@dataclass(frozen=True)
class Scan:
    """A reduce-window that is a scan along ``dim`` (operand length ``length``): a reverse
    scan folds each element with those after it; an exclusive one leaves the element itself
    out (its output has ``length + 1`` elements along ``dim``)."""

    dim: int
    length: int
    reverse: bool
    exclusive: bool

    @property
    def tree(self) -> bool:
        """Whether XLA rewrites it as a tree of ``SCAN_BASE``-wide scans (it is longer)."""
        return self.length > SCAN_BASE

    @property
    def columns(self) -> int:
        """How many columns of ``SCAN_BASE`` the padded scan dim splits into."""
        return -(-self.length // SCAN_BASE)


def _trivial(d: WindowDim) -> bool:
    return d.size == 1 and d.stride == 1 and d.padding_low == 0 and d.padding_high == 0 \
        and d.window_dilation == 1 and d.base_dilation == 1


def scan_window(window: Sequence[WindowDim], dims: Sequence[int]) -> Scan | None:
    """The scan a reduce-window of ``window`` over an operand of ``dims`` is, as XLA's
    ``ReduceWindowRewriter`` recognises one (``TryOptimizeCumSumOrProd``), else None.

    >>> scan_window([WindowDim(5, padding_high=5), WindowDim(1)], (5, 3))
    Scan(dim=0, length=5, reverse=True, exclusive=True)
    >>> scan_window([WindowDim(5, padding_low=4, padding_high=1)], (5,)) is None
    True
    """
    wide = [k for k, d in enumerate(window) if not _trivial(d)]
    if len(wide) != 1 or len(window) != len(dims):
        return None
    (k,) = wide
    d, n = window[k], dims[k]
    if d.size != n or d.stride != 1 or d.window_dilation != 1 or d.base_dilation != 1 \
            or d.window_reversal:
        return None
    if d.padding_low in (n - 1, n) and d.padding_high == 0:
        return Scan(k, n, reverse=False, exclusive=d.padding_low == n)
    if d.padding_high in (n - 1, n) and d.padding_low == 0:
        return Scan(k, n, reverse=True, exclusive=d.padding_high == n)
    return None


def scan_of(instr: HloInstruction, computation: HloComputation) -> Scan | None:
    """The scan ``instr`` (of ``computation``) is: a reduction with a window (a
    reduce-window) over an array whose window :func:`scan_window` recognises; else None.

    >>> from fusion.text.parser import parse_hlo
    >>> m = parse_hlo('''HloModule m
    ... add {
    ...   a = f32[] parameter(0)
    ...   b = f32[] parameter(1)
    ...   ROOT s = f32[] add(a, b)
    ... }
    ... ENTRY e {
    ...   x = f32[3,40] parameter(0)
    ...   z = f32[] constant(0)
    ...   ROOT c = f32[3,40] reduce-window(x, z), window={size=1x40 pad=0_0x39_0}, to_apply=add
    ... }''')
    >>> scan_of(m.entry.root, m.entry), scan_of(m.entry.instruction("x"), m.entry)
    (Scan(dim=1, length=40, reverse=False, exclusive=False), None)
    """
    if not traits(instr.opcode).reduction or not instr.has_attr("window"):
        return None
    operand = computation.instruction(instr.operands[0]).shape
    if not isinstance(operand, ArrayShape):
        return None
    return scan_window(instr.attr("window").dims, operand.dims)


def folds_in_xla_order(t: ElementType) -> bool:
    """Whether reductions over ``t`` combine in XLA:CPU's order (:mod:`this module <.>`):
    the 8-bit floats, whose sums the order changes most.

    >>> from fusion.ir.element_types import ELEMENT_TYPES as T
    >>> folds_in_xla_order(T["f8e4m3fn"]), folds_in_xla_order(T["bf16"])
    (True, False)
    """
    return t.is_float and t.bits == 8


__all__ = ["SCAN_BASE", "WINDOW", "Scan", "WindowLevel", "folds_in_xla_order", "scan_of", "scan_window",
           "window_levels"]
