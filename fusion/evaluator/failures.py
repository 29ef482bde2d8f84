"""How the evaluator reports a problem: an ``EvaluationError`` naming the op and its location.

>>> from fusion.ir.hlo_module import HloInstruction, SourceLocation
>>> from fusion.ir.shape import ArrayShape
>>> i = HloInstruction("r", "rng", ArrayShape("f32", ()), location=SourceLocation(4, 3))
>>> str(op_error(i, "unsupported opcode 'rng'"))
"4:3: unsupported opcode 'rng' (in rng %r)"
"""
from __future__ import annotations

from fusion.errors import EvaluationError
from fusion.ir.hlo_module import HloInstruction


def describe(instr: HloInstruction) -> str:
    """``opcode %name``: how messages name an instruction."""
    return f"{instr.opcode} %{instr.name}"


def op_error(instr: HloInstruction, message: str) -> EvaluationError:
    """An ``EvaluationError`` located at ``instr`` (its line:column when the parser gave one)."""
    location = instr.location
    return EvaluationError(
        message,
        line=location.line if location is not None else None,
        column=location.column if location is not None else None,
        where=describe(instr),
    )
