"""Instructions in dependency order: every operand before its users.

HLO text may refer to an instruction before the line that defines it (XLA's parser and our
verifier accept it); passes that walk a computation once, top to bottom, first put it in this
order.

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... ENTRY e {
...   p = f32[2] parameter(0)
...   ROOT a = f32[2] add(p, b)
...   b = f32[2] negate(p)
... }''')
>>> [i.name for i in in_dependency_order(m).entry.instructions]
['p', 'b', 'a']
"""
from __future__ import annotations

from collections.abc import Iterable

from fusion.errors import HloVerifyError
from fusion.ir.hlo_module import HloComputation, HloModule


def operands_first(comp: HloComputation, starts: Iterable[str]) -> tuple[str, ...]:
    """Depth-first from each of ``starts`` in turn: every instruction after its operands.

    Iterative, so deep chains do not hit Python's recursion limit; a cycle or a missing
    operand is an ``HloVerifyError`` naming the instruction.
    """
    done: set[str] = set()
    out: list[str] = []
    for start in starts:
        if start in done:
            continue
        stack: list[tuple[str, int]] = [(start, 0)]
        on_stack = {start}
        while stack:
            name, k = stack.pop()
            operands = comp.instruction(name).operands
            if k < len(operands):
                stack.append((name, k + 1))
                op = operands[k]
                if op in done:
                    continue
                if op in on_stack:
                    raise HloVerifyError("the computation has a cycle", where=op)
                if not comp.has_instruction(op):
                    raise HloVerifyError(f"operand {op!r} is not in the computation", where=name)
                stack.append((op, 0))
                on_stack.add(op)
            else:
                on_stack.discard(name)
                done.add(name)
                out.append(name)
    return tuple(out)


def dependency_order(comp: HloComputation) -> tuple[str, ...]:
    """Instruction names, operands first, otherwise in text order (an ordered text is unchanged)."""
    return operands_first(comp, (i.name for i in comp.instructions))


def computation_in_dependency_order(comp: HloComputation) -> HloComputation:
    """``comp`` with its instructions reordered operands-first (unchanged where already so)."""
    order = dependency_order(comp)
    if order == tuple(i.name for i in comp.instructions):
        return comp
    return HloComputation(comp.name, tuple(comp.instruction(n) for n in order), comp.root_name,
                          comp.is_entry, comp.location)


def in_dependency_order(module: HloModule) -> HloModule:
    """``module`` with every computation in dependency order (the same object if it already is)."""
    comps = tuple(computation_in_dependency_order(c) for c in module.computations)
    if all(a is b for a, b in zip(comps, module.computations)):
        return module
    return HloModule(module.name, comps, module.entry_name, module.attributes,
                     module.stack_frames)
