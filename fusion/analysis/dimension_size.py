"""``get-dimension-size(x), dimensions={d}``: the size of ``x``'s dim ``d`` as an ``s32[]``
(what TF's dynamic shapes and XLA's own expanders write).  Of a static dim it is a constant,
which canonicalization folds in, as XLA's ``DynamicPadder`` does; a bounded dynamic dim
(``f32[<=8]``) has a size known only at run time, which modules here do not carry.

>>> from fusion.ir.shape import ArrayShape
>>> i = HloInstruction("n", "get-dimension-size", ArrayShape("s32", ()), ("x",),
...                    (("dimensions", (1,)),))
>>> static_dimension_size(i, ArrayShape("f32", (4, 7)))
7
"""
from __future__ import annotations

from fusion.errors import UnsupportedOpError
from fusion.ir.hlo_module import HloInstruction
from fusion.ir.shape import ArrayShape


def dimension_of(instr: HloInstruction) -> int:
    """The dim ``instr`` asks the size of."""
    dims = instr.attr("dimensions")
    return dims[0] if isinstance(dims, (tuple, list)) else dims


def static_dimension_size(instr: HloInstruction, operand: ArrayShape) -> int:
    """The size of the asked dim of ``operand``; ``UnsupportedOpError`` (located) when that
    dim is dynamic."""
    d = dimension_of(instr)
    if operand.dynamic and operand.dynamic[d]:
        raise UnsupportedOpError(
            f"get-dimension-size of dynamic dim {d} of {operand}: its size is known only at "
            "run time, and modules here have static shapes", **instr._located())
    return operand.dims[d]


__all__ = ["dimension_of", "static_dimension_size"]
