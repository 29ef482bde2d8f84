"""A compiled module's ``source_module``, parsed only when someone reads it.

A warm compile whose plan holds the fused module needs the module it was given only if
someone asks for it: parsing it would cost a small module's warm compile twice over.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Any

from fusion.ir.hlo_module import HloModule
from fusion.text.parser import parse_hlo


@dataclass(frozen=True)
class Unparsed:
    """HLO text whose module nothing has needed yet."""

    text: str


_PARSE_LOCK = threading.Lock()


class ParsedWhenRead:
    """A dataclass field holding an ``HloModule``, or ``Unparsed`` text parsed on the first
    read: a warm compile whose plan holds the fused module needs the given one only if
    someone asks for it (parsing it would cost a small module's warm compile twice over).

    >>> @dataclass(frozen=True)
    ... class Holder:
    ...     module: HloModule = ParsedWhenRead()
    >>> held = Holder(Unparsed("HloModule m\\nENTRY e { ROOT c = s32[] constant(7) }"))
    >>> held.module.name, held.module is held.module
    ('m', True)
    """

    def __set_name__(self, owner: type, name: str) -> None:
        self._slot = f"_{name}_held"

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        if instance is None:
            raise AttributeError(self._slot)  # tells dataclasses: a field without a default
        value = instance.__dict__[self._slot]
        if type(value) is Unparsed:
            with _PARSE_LOCK:  # one parse, so every reader gets the same module
                value = instance.__dict__[self._slot]
                if type(value) is Unparsed:
                    value = instance.__dict__[self._slot] = parse_hlo(value.text)
        return value

    def __set__(self, instance: Any, value: Any) -> None:
        instance.__dict__[self._slot] = value  # only __init__ gets here: the class is frozen


__all__ = ["ParsedWhenRead", "Unparsed"]
