"""A fusion root that only rearranges a value: the *layout tail* a template stores through.

JAX writes attention's output as ``einsum('BNTS,BSNH->BTNH')``: a dot shaped ``[B, N, T, H]``
and a transpose to the caller's order; cuDNN's attention call, expanded, ends in a reshape
of the query-head groups and that transpose.  A template computes its value at the hero's
own indices (the second dot's), so a root that is the hero's value rearranged (transposes,
reshapes, bitcasts, copies: each a bijection of indices) needs no computation, only a store
at other indices: the tail's input -> output map applied to the hero's indices.  Without
it the rearrangement is a kernel of its own that reads the hero's result back.

>>> from fusion.text.parser import parse_hlo
>>> c = parse_hlo('''HloModule m
... ENTRY e {
...   x = f32[2,4,6,8] parameter(0)
...   y = bf16[2,4,6,8] convert(x)
...   r = bf16[2,2,2,6,8] reshape(y)
...   ROOT t = bf16[2,6,2,2,8] transpose(r), dimensions={0,3,1,2,4}
... }''').entry
>>> tail = layout_tail(c)
>>> tail.value, tail.ops
('y', ('t', 'r'))
>>> print(tail.to_root)
(d0, d1, d2, d3) -> (d0, d2, d1 floordiv 2, d1 mod 2, d3), domain: d0 in [0, 1], d1 in [0, 3], d2 in [0, 5], d3 in [0, 7]
>>> layout_tail(parse_hlo('HloModule m\\nENTRY e {\\n ROOT x = f32[3] parameter(0)\\n}').entry).ops
()
"""
from __future__ import annotations

from dataclasses import dataclass

from fusion.ir.hlo_module import HloComputation, HloInstruction
from fusion.ir.shape import ArrayShape
from fusion.opcodes import traits
from tiling.indexing_analysis import input_to_output_indexing
from tiling.maps.affine_expr import AffineExpr
from tiling.maps.expr_variables import substitute
from tiling.maps.indexing_map import IndexingMap, compose


@dataclass(frozen=True)
class LayoutTail:
    """``value``: the instruction the root rearranges (the root itself when ``ops`` is
    empty); ``ops``: the rearranging instructions from the root down; ``to_root``: the map
    from ``value``'s index to the root's (``None`` when ``ops`` is empty)."""

    value: str
    ops: tuple[str, ...]
    to_root: IndexingMap | None

    def at_root(self, indices: tuple[AffineExpr, ...]) -> tuple[AffineExpr, ...]:
        """Where ``value``'s element at ``indices`` lies in the root (``indices`` themselves
        when nothing rearranges it)."""
        if self.to_root is None:
            return tuple(indices)
        return tuple(substitute(r, list(indices), None) for r in self.to_root.results)


def rearranges(instr: HloInstruction) -> bool:
    """Whether ``instr`` only moves its one operand's elements to other indices, each to
    one: a reshape or bitcast (another shape, the same linear order) or a transpose or copy
    (another order).  A layout-changing copy is a transpose in memory; a plain one, the
    identity."""
    t = traits(instr.opcode)
    return len(instr.operands) == 1 and isinstance(instr.shape, ArrayShape) and (
        t.reshape_like or t.physical_transpose)


def layout_tail(comp: HloComputation, top: str | None = None) -> LayoutTail:
    """The rearranging instructions at the top of ``comp`` (or below instruction ``top``,
    one output of several, included) and the value they rearrange (see the module docstring
    for an example)."""
    ops: list[str] = []
    instr = comp.root if top is None else comp.instruction(top)
    to_root, users = None, comp.users
    while rearranges(instr) and len(users.get(instr.operands[0], ())) == 1:
        (found,) = input_to_output_indexing(instr, 0, comp)
        to_root = found if to_root is None else compose(to_root, found)
        ops.append(instr.name)
        instr = comp.instruction(instr.operands[0])
    return LayoutTail(instr.name, tuple(ops), to_root)


__all__ = ["LayoutTail", "layout_tail", "rearranges"]
