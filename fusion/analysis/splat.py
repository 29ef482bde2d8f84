"""Constants that hold one value everywhere: a literal of equal elements, or broadcasts of one.

Canonicalization drops an operation with such an identity operand (``x * 1``), and lowering
turns a division by such a power of two into a multiplication: both ask the same question,
answered here once.  Two floats are the same value only bit for bit in meaning: ``-0.0`` is not
``0.0`` (``x + -0.0`` is ``x``, ``x + 0.0`` is not for ``x = -0.0``), and NaN is NaN.

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... ENTRY e {
...   c = f32[] constant(2)
...   b = f32[4] broadcast(c), dimensions={}
...   ROOT z = f32[2,4] broadcast(b), dimensions={1}
... }''')
>>> splat_value(m.entry.root, m.entry.instruction)
2.0
"""
from __future__ import annotations

import math
from collections.abc import Callable

from fusion.ir.hlo_module import HloInstruction


def same_value(a: object, b: object) -> bool:
    """Whether two literal values are one value: floats by sign of zero and NaN too.

    >>> same_value(0.0, -0.0), same_value(float("nan"), float("nan")), same_value(1, True)
    (False, True, False)
    """
    if isinstance(a, float) and isinstance(b, float):
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return a == b and math.copysign(1, a) == math.copysign(1, b)
    return a == b and type(a) is type(b)


def splat_value(instr: HloInstruction,
                lookup: Callable[[str], HloInstruction]) -> object | None:
    """The one value of a constant, or of broadcasts of one (``lookup`` finds an operand by
    name); None when the elements differ or ``instr`` is not such a constant."""
    while instr.opcode == "broadcast":
        instr = lookup(instr.operands[0])
    if instr.opcode != "constant":
        return None
    literal = instr.attr("literal")
    if literal.elements is not None or not literal.values:
        return None
    first = literal.values[0]
    return first if all(same_value(v, first) for v in literal.values) else None


__all__ = ["same_value", "splat_value"]
