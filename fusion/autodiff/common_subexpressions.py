"""Common-subexpression elimination of a backward computation.

VJP rules write each constant, broadcast and comparison they need where they need it; equal
instructions (same opcode, shape, operands and attributes) are merged here into the first.

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... ENTRY e {
...   x = f32[2] parameter(0)
...   a = f32[2] exponential(x)
...   b = f32[2] exponential(x)
...   ROOT s = f32[2] add(a, b)
... }''')
>>> [(i.name, i.operands) for i in merge_common_subexpressions(m.entry).instructions]
[('x', ()), ('a', ('x',)), ('s', ('a', 'a'))]
"""
from __future__ import annotations

from typing import Any

from fusion.ir.hlo_module import HloComputation
from fusion.opcodes import traits


def merge_common_subexpressions(comp: HloComputation) -> HloComputation:
    """``comp`` (in operands-first order) with each repeated instruction replaced by the first
    equal one."""
    renamed: dict[str, str] = {}
    seen: dict[Any, str] = {}
    kept = []
    for instr in comp.instructions:
        operands = tuple(renamed.get(o, o) for o in instr.operands)
        if operands != instr.operands:
            instr = instr.replace(operands=operands)
        # Never merged: each parameter is its own input, and random or effectful ops differ
        # per call.
        if instr.opcode != "parameter" and not traits(instr.opcode).side_effect:
            key = (instr.opcode, instr.shape, operands, instr.attributes)
            try:
                first = seen.get(key)
            except TypeError:  # an attribute value that cannot be hashed: keep the instruction
                first, key = None, None
            if first is not None:
                renamed[instr.name] = first
                continue
            if key is not None:
                seen[key] = instr.name
        kept.append(instr)
    root = renamed.get(comp.root_name, comp.root_name)
    return HloComputation(comp.name, tuple(kept), root, comp.is_entry, comp.location)
