"""Dispatch of one (non-fusion) instruction to its indexing rule.

>>> from fusion.ir.hlo_module import HloInstruction
>>> from fusion.ir.shape import ArrayShape
>>> from tiling.indexing_analysis.operands import Operand
>>> t = ArrayShape("f32", (2,))
>>> [str(m) for m in op_output_to_input(HloInstruction("c", "custom-call", t, ("p",)),
...                                     (Operand(t),))]
['UNDEFINED']
"""
from __future__ import annotations

from typing import Sequence

from tiling.indexing_analysis.operands import Operand, num_outputs, undefined_maps
from tiling.indexing_analysis.registry import INPUT_TO_OUTPUT, OUTPUT_TO_INPUT
from tiling.indexing_analysis.rt_vars import replace_known_rt_vars
from tiling.maps.indexing_map import IndexingMap


def op_output_to_input(
    instr, operands: Sequence[Operand], output_index: int = 0
) -> tuple[IndexingMap, ...]:
    """One map per operand, from output ``output_index`` of ``instr`` to that operand;
    undefined maps for an opcode without a rule.  Runtime variables read from a constant or
    an iota are replaced by their values (``rt_vars``)."""
    rule = OUTPUT_TO_INPUT.get(instr.opcode)
    if rule is None:
        return undefined_maps(len(operands))
    return tuple(replace_known_rt_vars(m) for m in rule(instr, tuple(operands), output_index))


def op_input_to_output(
    instr, operands: Sequence[Operand], operand_index: int
) -> tuple[IndexingMap, ...]:
    """One map per output of ``instr``, from operand ``operand_index`` to that output."""
    rule = INPUT_TO_OUTPUT.get(instr.opcode)
    if rule is None:
        return undefined_maps(num_outputs(instr.shape))
    return tuple(replace_known_rt_vars(m) for m in rule(instr, tuple(operands), operand_index))
