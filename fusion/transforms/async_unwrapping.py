"""``async-start`` ... ``async-done`` as the ``call`` it runs.

XLA wraps an op in an asynchronous pair so the scheduler can overlap it with other work
(XLA:GPU's async collectives, stream-annotated ops): ``async-start(args), calls=f`` begins
``f(args)``, ``async-update`` passes the pair's state on and ``async-done`` gives ``f``'s
result.  Run in order, the pair computes ``call(args), to_apply=f``, which the fusion pass
inlines and fuses like any call; the ``async-done`` becomes that call under its own name, and
its start and updates go.  A pair whose start or update something else reads (its tuple
taken whole) is left as it is.  A module without such pairs is returned as is.

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... f {
...   p = f32[4] parameter(0)
...   ROOT n = f32[4] negate(p)
... }
... ENTRY e {
...   x = f32[4] parameter(0)
...   s = ((f32[4]), f32[4], s32[]) async-start(x), calls=f
...   u = ((f32[4]), f32[4], s32[]) async-update(s)
...   ROOT d = f32[4] async-done(u)
... }''')
>>> [(i.name, i.opcode, i.operands) for i in unwrap_async_calls(m).entry]
[('x', 'parameter', ()), ('d', 'call', ('x',))]
"""
from __future__ import annotations

from collections import Counter
from dataclasses import replace

from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.opcodes import traits


def unwrap_async_calls(module: HloModule) -> HloModule:
    """``module`` with each ``async-start``/``async-update``/``async-done`` chain that only
    itself reads as a ``call`` at its ``async-done`` (module docstring)."""
    if not any(i.opcode == "async-start" for c in module.computations for i in c):
        return module
    return replace(module, computations=tuple(_unwrapped(c) for c in module.computations))


def _unwrapped(comp: HloComputation) -> HloComputation:
    starts = {i.name: i for i in comp if i.opcode == "async-start"}
    if not starts:
        return comp
    chain: dict[str, str] = {}  # a start or update -> its start
    for instr in comp:
        if instr.opcode == "async-start":
            chain[instr.name] = instr.name
        elif instr.opcode == "async-update" and instr.operands and instr.operands[0] in chain:
            chain[instr.name] = chain[instr.operands[0]]
    readers: Counter[str] = Counter({comp.root_name: 1})
    for instr in comp:
        if traits(instr.opcode).async_state and instr.operands[0] in chain:
            continue
        readers.update(o for o in instr.operands if o in chain)
    dones = Counter(chain[i.operands[0]] for i in comp
                    if i.opcode == "async-done" and i.operands and i.operands[0] in chain)
    kept = {start for start in starts if dones[start] != 1
            or any(readers[name] for name, s in chain.items() if s == start)}
    out: list[HloInstruction] = []
    for instr in comp:
        start = chain.get(instr.name)
        if start is not None and start not in kept:
            continue  # the start and its updates: the call at the done runs the pair
        origin = chain.get(instr.operands[0]) if instr.operands else None
        if instr.opcode == "async-done" and origin is not None and origin not in kept:
            begun = starts[origin]
            out.append(HloInstruction(instr.name, "call", instr.shape, begun.operands,
                                      (("to_apply", begun.attr("calls")),),
                                      location=instr.location))
            continue
        out.append(instr)
    return replace(comp, instructions=tuple(out))


__all__ = ["unwrap_async_calls"]
