"""Module-unique names for the instructions a transform adds.

>>> taken = {"d", "d.1"}
>>> fresh_name("d", taken), fresh_name("e", taken), sorted(taken)
('d.2', 'e', ['d', 'd.1', 'd.2', 'e'])
"""
from __future__ import annotations

from fusion.ir.hlo_module import HloModule


def taken_names(module: HloModule) -> set[str]:
    """Every instruction's and computation's name in ``module`` (a transform adding both
    instructions and computations picks names none of them has)."""
    return {i.name for c in module.computations for i in c} | \
        {c.name for c in module.computations}


def fresh_name(base: str, taken: set[str]) -> str:
    """``base``, or ``base.N`` for the smallest N free, when ``base`` is taken; then taken."""
    name, n = base, 0
    while name in taken:
        n += 1
        name = f"{base}.{n}"
    taken.add(name)
    return name


__all__ = ["fresh_name", "taken_names"]
