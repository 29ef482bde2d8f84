"""Cache keys for memoizing analyses of IR objects that are costly to hash.

Hashing an ``HloModule`` visits every computation and instruction, so a cache keyed by the
module's value pays the whole module's size per look-up.  ``ByIdentity`` keys by the object
itself: two keys are equal only when they hold the same object, and a key holds its object,
so the id it hashes by stays that object's while the cache entry lives.

>>> from functools import lru_cache
>>> @lru_cache(maxsize=4)
... def size(obj: ByIdentity) -> int:
...     return len(obj.obj)
>>> data = [1, 2, 3]
>>> size(ByIdentity(data)), ByIdentity(data) == ByIdentity(data), ByIdentity(data) == ByIdentity([1, 2, 3])
(3, True, False)
"""
from __future__ import annotations


class ByIdentity:
    """A hashable stand-in for ``obj`` that compares by identity (see the module docstring)."""

    __slots__ = ("obj",)

    def __init__(self, obj) -> None:
        self.obj = obj

    def __hash__(self) -> int:
        return id(self.obj)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ByIdentity) and other.obj is self.obj

    def __repr__(self) -> str:
        return f"ByIdentity({type(self.obj).__name__} at {id(self.obj):#x})"


__all__ = ["ByIdentity"]
