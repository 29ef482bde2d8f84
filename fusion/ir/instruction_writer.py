"""The instructions one op becomes when a transform writes it out as other ops (an
expander's output: a random generator's integer ops, a batch norm's reductions, a ragged
dot's masks), each named by the transform and placed at the op's source location, so an
error in them points at the line the user wrote.

>>> from fusion.ir.shape import ArrayShape
>>> op = HloInstruction("y", "negate", ArrayShape("f32", (4,)), ("x",))
>>> names = iter(["y.1", "y.2", "y.3"])
>>> w = InstructionWriter(op, lambda: next(names))
>>> w.add("multiply", op.shape, ("x", w.splat(-1.0, op.shape)))
'y.3'
>>> [(i.name, i.opcode) for i in w.named_last("y")]
[('y.1', 'constant'), ('y.2', 'broadcast'), ('y', 'multiply')]
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fusion.ir.attributes import Literal
from fusion.ir.hlo_module import HloInstruction
from fusion.ir.shape import ArrayShape, Shape


class InstructionWriter:
    """Appends instructions to ``out``, named by ``fresh``, at ``instr``'s location."""

    def __init__(self, instr: HloInstruction, fresh: Callable[[], str]) -> None:
        self.instr, self.fresh = instr, fresh
        self.out: list[HloInstruction] = []

    def add(self, opcode: str, shape: Shape, operands: tuple[str, ...], **attrs: Any) -> str:
        """One instruction; its name."""
        name = self.fresh()
        self.out.append(HloInstruction(name, opcode, shape, operands, tuple(attrs.items()),
                                       location=self.instr.location))
        return name

    def scalar(self, value: float | int, dtype: str) -> str:
        """A scalar constant."""
        return self.add("constant", ArrayShape(dtype, ()), (), literal=Literal((), (value,)))

    def splat(self, value: float | int, shape: ArrayShape) -> str:
        """``value`` broadcast to ``shape``."""
        return self.add("broadcast", shape, (self.scalar(value, shape.dtype),), dimensions=())

    def named_last(self, name: str) -> list[HloInstruction]:
        """The instructions, the last one renamed ``name`` (it takes over the op's name)."""
        return self.out[:-1] + [self.out[-1].replace(name=name)]


__all__ = ["InstructionWriter"]
