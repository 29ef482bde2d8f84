"""Common-subexpression elimination: XLA's ``HloCSE``.

Equal instructions (same opcode, shape, operands and attributes, ``metadata`` aside) are
merged into the first.  JAX writes the same broadcast or ``x - mean`` where each use needs
it, and VJP rules write each constant, broadcast and comparison where they need it;
canonicalization and the backward pass both merge them.  Work behind an ``opt-barrier``
(``jax.checkpoint``'s recomputation) reads the barrier's outputs, never the values it
recomputes, so it is never merged with them.

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


# What an instruction's value does not depend on (where in the source it came from).
_IGNORED_ATTRIBUTES = frozenset({"metadata"})


def merge_common_subexpressions(comp: HloComputation, leaves: bool = True) -> HloComputation:
    """``comp`` (in operands-first order) with each repeated instruction replaced by the first
    equal one; with ``leaves`` false, only instructions computed from operands are merged
    (canonicalization's choice: see below)."""
    renamed: dict[str, str] = {}
    seen: dict[Any, str] = {}
    kept = []
    for instr in comp.instructions:
        operands = tuple(renamed.get(o, o) for o in instr.operands)
        if operands != instr.operands:
            instr = instr.replace(operands=operands)
        # A parameter is its own input; random or effectful ops differ per call; each
        # collective is one exchange every process makes.  Before fusion a constant or an
        # iota stays where it is (XLA's CSE merges them): it costs nothing to repeat, one
        # shared by many kernels becomes a producer they must agree on, and one iota per
        # reader lets the attention analyses feed each its own coordinate (a causal mask
        # broadcasts one arange along the queries and one along the keys).
        kind = traits(instr.opcode)
        if instr.opcode != "parameter" and (leaves or instr.operands) and \
                not kind.side_effect and not kind.collective:
            attributes = tuple(a for a in instr.attributes if a[0] not in _IGNORED_ATTRIBUTES)
            key = (instr.opcode, instr.shape, operands, attributes)
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
