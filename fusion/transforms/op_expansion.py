"""The loop every expander shares: each instruction of one opcode replaced by the instructions
that compute it, written by an ``InstructionWriter`` (``rng_distribution_expansion``,
``stochastic_convert_expansion``, ``rng_expansion``).

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... ENTRY e {
...   x = f32[2] parameter(0)
...   ROOT y = f32[2] negate(x)
... }''')
>>> def twice(ops, instr, shapes):
...     once = ops.add("negate", instr.shape, instr.operands)
...     ops.add("negate", instr.shape, (ops.add("negate", instr.shape, (once,)),))
>>> [(i.name, i.opcode) for i in expand_ops(m, "negate", twice, "n").entry]
[('x', 'parameter'), ('y.n1', 'negate'), ('y.n2', 'negate'), ('y', 'negate')]
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.ir.instruction_writer import InstructionWriter
from fusion.ir.shape import Shape
from fusion.shapes.inference import infer_shape
from fusion.transforms.map_inlining import fresh_names
from fusion.transforms.naming import taken_names

Writer = Callable[[InstructionWriter, HloInstruction, tuple[Shape, ...]], None]


def expand_ops(module: HloModule, opcode: str, write: Writer, tag: str,
               writer: type[InstructionWriter] = InstructionWriter) -> HloModule:
    """``module`` with every ``opcode`` instruction replaced by what
    ``write(ops, instr, operand_shapes)`` adds to ``ops`` (a ``writer`` naming them ``<name>.<tag>N``; the last one takes the op's
    name).  Each op is checked by its shape rule first (an invalid one: ``HloVerifyError``
    located at it).  A module without ``opcode`` is returned as is."""
    if not any(i.opcode == opcode for c in module.computations for i in c):
        return module
    taken = taken_names(module)

    def expanded(comp: HloComputation) -> HloComputation:
        out: list[HloInstruction] = []
        for instr in comp:
            if instr.opcode != opcode:
                out.append(instr)
                continue
            shapes = tuple(comp.instruction(o).shape for o in instr.operands)
            infer_shape(instr, shapes, module)
            ops = writer(instr, fresh_names(instr.name, taken, tag))
            write(ops, instr, shapes)
            out.extend(ops.named_last(instr.name))
        return replace(comp, instructions=tuple(out))

    return replace(module, computations=tuple(expanded(c) for c in module.computations))


__all__ = ["expand_ops"]
