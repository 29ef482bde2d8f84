"""The per-opcode indexing rules, one registry per direction, in alphabetical order.

An output -> input rule is ``rule(instr, operands, output_index) -> tuple[IndexingMap, ...]``
(one map per operand, from the instruction's output ``output_index`` to that operand); an
input -> output rule is ``rule(instr, operands, operand_index) -> tuple[IndexingMap, ...]``
(one map per output).  ``operands`` holds an ``Operand`` (shape, producer) per operand.  An
opcode with no rule has undefined indexing (``IndexingMap.undefined()``); so do ``fusion``
(handled by ``tiling.fusion_indexing``) and ops with no operands (constant, iota, parameter,
rng, ...) which simply have no operand maps.

>>> sorted(OUTPUT_TO_INPUT) == list(OUTPUT_TO_INPUT)
True
"""
from __future__ import annotations

from tiling.indexing_analysis import (
    data_movement_rules as dm,
    dot_rules,
    dynamic_rules,
    elementwise_rules as ew,
    gather_rules,
    reduction_rules,
    reshape_rules,
)

_ELEMENTWISE_O2I = {op: ew._output_to_input_elementwise for op in ew.ELEMENTWISE_OPCODES}
_ELEMENTWISE_I2O = {op: ew._input_to_output_elementwise for op in ew.ELEMENTWISE_OPCODES}

OUTPUT_TO_INPUT = dict(sorted({
    **_ELEMENTWISE_O2I,
    "bitcast": reshape_rules._output_to_input_bitcast,
    "broadcast": dm._output_to_input_broadcast,
    "concatenate": dm._output_to_input_concatenate,
    "dot": dot_rules._output_to_input_dot,
    "dynamic-slice": dynamic_rules._output_to_input_dynamic_slice,
    "dynamic-update-slice": dynamic_rules._output_to_input_dynamic_update_slice,
    "gather": gather_rules._output_to_input_gather,
    "get-tuple-element": dm._output_to_input_get_tuple_element,
    "pad": dm._output_to_input_pad,
    "reduce": reduction_rules._output_to_input_reduce,
    "reduce-window": reduction_rules._output_to_input_reduce_window,
    "reshape": reshape_rules._output_to_input_reshape,
    "reverse": dm._output_to_input_reverse,
    "slice": dm._output_to_input_slice,
    "transpose": dm._output_to_input_transpose,
    "tuple": dm._output_to_input_tuple,
}.items()))

INPUT_TO_OUTPUT = dict(sorted({
    **_ELEMENTWISE_I2O,
    "bitcast": reshape_rules._input_to_output_bitcast,
    "broadcast": dm._input_to_output_broadcast,
    "concatenate": dm._input_to_output_concatenate,
    "dot": dot_rules._input_to_output_dot,
    "dynamic-slice": dynamic_rules._input_to_output_dynamic_slice,
    "dynamic-update-slice": dynamic_rules._input_to_output_dynamic_update_slice,
    "get-tuple-element": dm._input_to_output_get_tuple_element,
    "pad": dm._input_to_output_pad,
    "reduce": reduction_rules._input_to_output_reduce,
    "reshape": reshape_rules._input_to_output_reshape,
    "reverse": dm._input_to_output_reverse,
    "slice": dm._input_to_output_slice,
    "transpose": dm._input_to_output_transpose,
    "tuple": dm._input_to_output_tuple,
}.items()))
