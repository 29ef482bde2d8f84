"""Registries made of rule families: one table per phase, keyed by opcode, alphabetical.

    >>> merge_rule_families("demo", {"negate": abs}, {"add": max})
    {'add': <built-in function max>, 'negate': <built-in function abs>}
    >>> merge_rule_families("demo", {"add": abs}, {"add": max})
    Traceback (most recent call last):
    ...
    RuntimeError: opcode 'add' has two demo rules
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

R = TypeVar("R")


def merge_rule_families(phase: str, *families: Mapping[str, R]) -> dict[str, R]:
    """One alphabetical table of ``families``; an opcode in two families is a programming error
    of this package, caught when the registry is imported."""
    merged: dict[str, R] = {}
    for family in families:
        for opcode, rule in family.items():
            if opcode in merged:
                raise RuntimeError(f"opcode {opcode!r} has two {phase} rules")
            merged[opcode] = rule
    return dict(sorted(merged.items()))
