"""Walks over the call graph of an ``HloModule``: which computations one computation reaches.

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... add {
...   a = f32[] parameter(0)
...   b = f32[] parameter(1)
...   ROOT s = f32[] add(a, b)
... }
... unused {
...   ROOT c = f32[] constant(0)
... }
... ENTRY main {
...   x = f32[4] parameter(0)
...   z = f32[] constant(0)
...   ROOT r = f32[] reduce(x, z), dimensions={0}, to_apply=add
... }''')
>>> reachable_computations(m, m.entry_name)
['main', 'add']
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

from fusion.ir.hlo_module import HloInstruction, HloModule


def reachable_computations(
    module: HloModule, root: str,
    callees: Callable[[HloInstruction], Iterable[str]] = HloInstruction.called_computations,
) -> list[str]:
    """``root`` and every computation of ``module`` it reaches through ``callees(instr)`` (by
    default all the computations an instruction calls), depth first: the callees of an
    instruction are stacked in the order given, so the last one is visited first.  Names the
    module lacks are skipped.
    """
    seen: list[str] = []
    stack = [root]
    while stack:
        name = stack.pop()
        if name in seen or not module.has_computation(name):
            continue
        seen.append(name)
        for instr in module.computation(name).instructions:
            stack.extend(callees(instr))
    return seen
