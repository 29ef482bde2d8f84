"""The result shape of an instruction written without one (``ROOT t = tuple(a, b)``).

XLA's parser lets the shape be left out for the ops whose shape it can infer
(``CanInferShape`` in ``hlo_parser.cc``); XLA's own tests write reducers and scatter combiners
that way.  Here the parser infers it for the ops whose shape follows from their operands'
shapes alone (the ``implied_shape`` trait), before any verification: ``tuple``,
``get-tuple-element`` and the elementwise ops other than conversions (``compare`` and
``is-finite`` give ``pred``; ``select`` and ``clamp`` take their second operand's shape, so a
scalar predicate or bound is fine; ``complex`` and the complex-to-real ops change the element
type).  Any other op is a located parse error that asks for the shape; the verifier checks
every inferred shape as it checks a written one.

>>> f = ArrayShape("f32", (2, 3), None)
>>> str(implied_shape("tuple", (f, ArrayShape("s32", ())), ()))
'(f32[2,3], s32[])'
>>> str(implied_shape("compare", (f, f), (("direction", "LT"),)))
'pred[2,3]'
>>> implied_shape("convert", (f,), ())
'only tuple, get-tuple-element and elementwise ops other than conversions may leave it out'
"""
from __future__ import annotations

from typing import Any, Sequence

from fusion.ir.element_types import COMPLEX_OF_PART_TYPES, COMPLEX_PART_TYPES
from fusion.ir.shape import ArrayShape, Shape, TupleShape
from fusion.opcodes import traits


def implied_shape(opcode: str, operands: Sequence[Shape],
                  attributes: Sequence[tuple[str, Any]]) -> Shape | str:
    """The shape of ``opcode`` applied to ``operands``, or why it cannot be inferred here."""
    if not traits(opcode).implied_shape:
        return ("only tuple, get-tuple-element and elementwise ops other than conversions "
                "may leave it out")
    if opcode == "tuple":
        return TupleShape(tuple(operands))
    if opcode == "get-tuple-element":
        index = dict(attributes).get("index")
        if len(operands) != 1 or not isinstance(operands[0], TupleShape) \
                or not isinstance(index, int) or not 0 <= index < len(operands[0].elements):
            return "get-tuple-element needs one tuple operand and an index into it"
        return operands[0].elements[index]
    if not operands or not all(isinstance(s, ArrayShape) for s in operands):
        return f"{opcode} needs array operands"
    second = (opcode == "select" or opcode == "clamp") and len(operands) > 1
    source = operands[1] if second else operands[0]
    dtype = source.dtype
    if opcode == "compare" or opcode == "is-finite":
        dtype = "pred"
    elif opcode == "complex":
        dtype = COMPLEX_OF_PART_TYPES.get(dtype, dtype)
    elif traits(opcode).complex_to_real:
        dtype = COMPLEX_PART_TYPES.get(dtype, dtype)
    return ArrayShape(dtype, source.dims, None, source.dynamic)


__all__ = ["implied_shape"]
