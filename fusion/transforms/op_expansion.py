"""The loop every expander shares: each instruction of some opcodes replaced by the
instructions that compute it, written by an ``InstructionWriter`` (``rng_expansion``,
``rng_distribution_expansion``, ``stochastic_convert_expansion``, ``batch_norm_expansion``,
``ragged_dot_expansion``).

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... ENTRY e {
...   x = f32[2] parameter(0)
...   ROOT y = f32[2] negate(x)
... }''')
>>> def twice(ops, instr, shapes, adder):
...     once = ops.add("negate", instr.shape, instr.operands)
...     ops.add("negate", instr.shape, (ops.add("negate", instr.shape, (once,)),))
>>> [(i.name, i.opcode) for i in expand_ops(m, "negate", twice, "n").entry]
[('x', 'parameter'), ('y.n1', 'negate'), ('y.n2', 'negate'), ('y', 'negate')]
"""
from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import replace

from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule, binary_computation
from fusion.ir.instruction_writer import InstructionWriter
from fusion.ir.shape import Shape
from fusion.shapes.inference import infer_shape
from fusion.transforms.map_inlining import fresh_names
from fusion.transforms.naming import taken_names

#: ``write(ops, instr, operand_shapes, adder)``: adds ``instr``'s replacement to ``ops``
#: (``adder(dtype)`` names a scalar add computation of that type, for reductions); returns
#: False to keep ``instr`` as it is.
Writer = Callable[[InstructionWriter, HloInstruction, tuple[Shape, ...], Callable[[str], str]],
                  "bool | None"]


def expand_ops(module: HloModule, opcodes: str | Collection[str], write: Writer, tag: str,
               writer: type[InstructionWriter] = InstructionWriter,
               adder_name: str = "add") -> HloModule:
    """``module`` with every instruction of ``opcodes`` replaced by what ``write`` adds to a
    ``writer`` (module docstring), which names them ``<name>.<tag>N``; the last one takes
    the op's name.  Each op is checked by its shape rule first (an invalid one:
    ``HloVerifyError`` located at it).  The add computations ``write`` asks for, named
    ``<adder_name>.<dtype>N``, come first in the module.  A module without ``opcodes`` is
    returned as is."""
    wanted = frozenset((opcodes,) if isinstance(opcodes, str) else opcodes)
    if not any(i.opcode in wanted for c in module.computations for i in c):
        return module
    taken = taken_names(module)
    adders: dict[str, HloComputation] = {}

    def adder(dtype: str) -> str:
        if dtype not in adders:
            adders[dtype] = binary_computation(fresh_names(adder_name, taken, dtype)(), "add",
                                               dtype)
        return adders[dtype].name

    def expanded(comp: HloComputation) -> HloComputation:
        out: list[HloInstruction] = []
        for instr in comp:
            if instr.opcode not in wanted:
                out.append(instr)
                continue
            shapes = tuple(comp.instruction(o).shape for o in instr.operands)
            infer_shape(instr, shapes, module)
            ops = writer(instr, fresh_names(instr.name, taken, tag))
            if write(ops, instr, shapes, adder) is False:
                out.append(instr)
            else:
                out.extend(ops.named_last(instr.name))
        return replace(comp, instructions=tuple(out))

    comps = tuple(expanded(c) for c in module.computations)
    return replace(module, computations=tuple(adders.values()) + comps)


__all__ = ["Writer", "expand_ops"]
