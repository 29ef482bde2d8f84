"""Index values computed from iotas get one copy per reader before the fusion pass.

An attention mask reads positions: ``q_pos >= k_pos`` for a causal mask, ``|q - k| < w`` for
a sliding window.  The mask analysis (``attention_mask``) gives every iota one role, the query
or the key coordinate, and the kernel binds each iota to its role's index by name.  When one
value serves as both, because XLA's CSE (or a hand-written module) merged
``jnp.arange(S)[:, None]`` and ``jnp.arange(S)[None, :]`` into one ``iota`` broadcast two
ways, no role fits it and the kernel visits every key block, masked ones included.  So before
the pass, every instruction that computes only from iotas and constants through cheap ops
(elementwise ops that are not ``expensive``, which a reader should not recompute, and ops
that move elements: ``broadcast``, ``reshape``, ``slice``, ...) and has several readers becomes one copy per reader.
The fusion pass would put such a value into each reader's kernel anyway (it costs no load and
a few instructions), so no kernel computes more than before.

>>> from fusion.text.parser import parse_hlo
>>> from fusion.text.printer import print_computation
>>> c = parse_hlo('''HloModule m
... ENTRY e {
...   i = s32[4] iota(), iota_dimension=0
...   q = s32[4,4] broadcast(i), dimensions={0}
...   k = s32[4,4] broadcast(i), dimensions={1}
...   ROOT m = pred[4,4] compare(q, k), direction=GE
... }''').entry
>>> names = iter(["i.1"])
>>> print(print_computation(split_index_values(c, lambda base: next(names))))
ENTRY e {
  i = s32[4] iota(), iota_dimension=0
  i.1 = s32[4] iota(), iota_dimension=0
  q = s32[4,4] broadcast(i), dimensions={0}
  k = s32[4,4] broadcast(i.1), dimensions={1}
  ROOT m = pred[4,4] compare(q, k), direction=GE
}
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from fusion.ir.hlo_module import HloComputation
from fusion.opcodes import traits

def _index_values(comp: HloComputation) -> set[str]:
    """The instructions computed from at least one iota and otherwise constants only, through
    ops that are cheap to compute again."""
    constants, derived = set(), set()
    for instr in comp.instructions:
        op = traits(instr.opcode)
        # elementwise ops, and ops that only move elements (broadcast, reshape, slice, ...)
        cheap = (op.elementwise or op.data_movement) and op.fusible
        known = all(o in derived or o in constants for o in instr.operands)
        if instr.opcode == "iota":
            derived.add(instr.name)
        elif instr.opcode == "constant" or (cheap and known and instr.operands and
                                            not any(o in derived for o in instr.operands)):
            constants.add(instr.name)  # a constant, or cheap ops of constants
        elif cheap and known and not op.expensive and instr.operands:
            derived.add(instr.name)
    return derived


def split_index_values(comp: HloComputation, fresh: Callable[[str], str]) -> HloComputation:
    """``comp`` with every index value (module docstring) read by several instructions copied
    once per further reader, each copy right after its original; ``comp`` itself when none
    is.  ``fresh(base)``: an unused name."""
    derived = _index_values(comp)
    readers: dict[str, list[str]] = {}
    for instr in comp.instructions:
        for operand in dict.fromkeys(instr.operands):
            if operand in derived:
                readers.setdefault(operand, []).append(instr.name)
    if all(len(r) < 2 for r in readers.values()):
        return comp
    current = {i.name: i for i in comp.instructions}
    copies: dict[str, list[str]] = {}
    # Last to first: a copy reads its original's operands, which then have one more reader.
    for name in reversed([i.name for i in comp.instructions if i.name in derived]):
        for reader in readers.get(name, [])[1:]:
            copy = current[name].replace(name=fresh(name))
            current[copy.name] = copy
            copies.setdefault(name, []).append(copy.name)
            for operand in dict.fromkeys(copy.operands):
                if operand in derived:
                    readers[operand].append(copy.name)
            target = current[reader]
            current[reader] = target.replace(
                operands=tuple(copy.name if o == name else o for o in target.operands))
    order = [n for i in comp.instructions for n in (i.name, *copies.get(i.name, ()))]
    return replace(comp, instructions=tuple(current[n] for n in order))


__all__ = ["split_index_values"]
