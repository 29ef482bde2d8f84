"""Dead-code elimination of a backward computation, and the computations a module needs.

The backward computation starts as a copy of the whole forward one; only the primal values
some gradient reads survive.  Parameters always stay (their numbers must stay dense).

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... ENTRY e {
...   x = f32[2] parameter(0)
...   unused = f32[2] exponential(x)
...   ROOT n = f32[2] negate(x)
... }''')
>>> [i.name for i in eliminate_dead_code(m.entry).instructions]
['x', 'n']
"""
from __future__ import annotations

from typing import Callable

from fusion.ir.hlo_module import HloComputation
from fusion.ir.instruction_order import operands_first
from fusion.transforms.common_subexpressions import merge_common_subexpressions


def eliminate_dead_code(comp: HloComputation) -> HloComputation:
    """``comp`` keeping its parameters and what its root reads, operands first."""
    starts = [p.name for p in comp.parameters] + [comp.root_name]
    keep = operands_first(comp, starts)
    return HloComputation(comp.name, tuple(comp.instruction(n) for n in keep), comp.root_name,
                          comp.is_entry, comp.location)


def tidy(comp: HloComputation) -> HloComputation:
    """Dead code dropped, then equal instructions merged, then dead code dropped again."""
    return eliminate_dead_code(merge_common_subexpressions(eliminate_dead_code(comp)))


def called_first(entry: HloComputation,
                 lookup: Callable[[str], HloComputation]) -> list[HloComputation]:
    """The computations ``entry`` calls, transitively, each after those it calls; ``entry``
    last (the order XLA prints a module in)."""
    order: list[HloComputation] = []
    seen: set[str] = set()
    stack: list[tuple[HloComputation, bool]] = [(entry, False)]
    while stack:
        comp, expanded = stack.pop()
        if expanded:
            order.append(comp)
            continue
        if comp.name in seen:
            continue
        seen.add(comp.name)
        stack.append((comp, True))
        for instr in reversed(comp.instructions):
            for name in reversed(instr.called_computations()):
                if name not in seen:
                    stack.append((lookup(name), False))
    return order
