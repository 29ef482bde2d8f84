"""Ops that reinterpret bits across element widths, which no elementwise kernel computes.

``bitcast-convert`` between types of one width is elementwise.  Between widths it is not:
``f32[3] -> u16[3,2]`` splits each element into a new minor dim of ``32 / 16`` parts (little
endian: part 0 holds the low bits), ``u16[3,2] -> f32[3]`` joins them.  XLA accepts both
(``lax.bitcast_convert_type``).  Such an op is a view of the same bytes: the fusion pass
keeps it out of every fusion and the host reinterprets the buffer, as the evaluator does.

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... ENTRY e {
...   x = f32[3] parameter(0)
...   ROOT r = u16[3,2] bitcast-convert(x)
... }''')
>>> changes_element_width(m.entry, m.entry.root)
True
"""
from __future__ import annotations

from fusion.ir.hlo_module import HloComputation, HloInstruction
from fusion.ir.shape import ArrayShape
from fusion.opcodes import traits


def changes_element_width(comp: HloComputation, instr: HloInstruction) -> bool:
    """Whether ``instr`` is an elementwise op whose value depends on its types' widths
    (``width_dependent``) from one element width to another: it adds or drops a minor dim."""
    t = traits(instr.opcode)
    if not (t.elementwise and t.width_dependent) or len(instr.operands) != 1:
        return False
    source = comp.instruction(instr.operands[0]).shape
    return isinstance(source, ArrayShape) and isinstance(instr.shape, ArrayShape) \
        and source.element_type.bits != instr.shape.element_type.bits


__all__ = ["changes_element_width"]
