"""Closed integer intervals ``[lower, upper]``: the bounds of indexing-map variables.

An interval with ``lower > upper`` is empty; it marks an infeasible domain.

>>> Interval(0, 9) + Interval(1, 2)
Interval(lower=1, upper=11)
>>> str(Interval(0, 9).intersect(Interval(5, 20)))
'[5, 9]'
>>> Interval(-7, 7).floordiv(2)
Interval(lower=-4, upper=3)
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Interval:
    """The integers ``lower <= x <= upper`` (both inclusive, as XLA prints them)."""

    lower: int
    upper: int

    @staticmethod
    def point(value: int) -> "Interval":
        return Interval(value, value)

    @staticmethod
    def of(value: "Interval | tuple[int, int] | list[int]") -> "Interval":
        """Accept an ``Interval`` or a ``(lower, upper)`` pair."""
        if isinstance(value, Interval):
            return value
        lo, hi = value
        return Interval(int(lo), int(hi))

    @property
    def is_empty(self) -> bool:
        return self.lower > self.upper

    @property
    def is_point(self) -> bool:
        return self.lower == self.upper

    @property
    def size(self) -> int:
        """Number of integers in the interval (0 if empty)."""
        return max(0, self.upper - self.lower + 1)

    def contains(self, value: int) -> bool:
        return self.lower <= value <= self.upper

    def contains_interval(self, other: "Interval") -> bool:
        return self.lower <= other.lower and other.upper <= self.upper

    def intersect(self, other: "Interval") -> "Interval":
        return Interval(max(self.lower, other.lower), min(self.upper, other.upper))

    def hull(self, other: "Interval") -> "Interval":
        """The smallest interval containing both."""
        return Interval(min(self.lower, other.lower), max(self.upper, other.upper))

    def __add__(self, other: "Interval | int") -> "Interval":
        if isinstance(other, int):
            return Interval(self.lower + other, self.upper + other)
        return Interval(self.lower + other.lower, self.upper + other.upper)

    def scale(self, factor: int) -> "Interval":
        a, b = self.lower * factor, self.upper * factor
        return Interval(min(a, b), max(a, b))

    def floordiv(self, divisor: int) -> "Interval":
        """Range of ``x floordiv divisor`` for x in self (divisor > 0)."""
        return Interval(self.lower // divisor, self.upper // divisor)

    def __str__(self) -> str:
        return f"[{self.lower}, {self.upper}]"
