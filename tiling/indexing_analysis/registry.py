"""The per-opcode indexing rules, one registry per direction, in alphabetical order.

An output -> input rule is ``rule(instr, operands, output_index) -> tuple[IndexingMap, ...]``
(one map per operand, from the instruction's output ``output_index`` to that operand); an
input -> output rule is ``rule(instr, operands, operand_index) -> tuple[IndexingMap, ...]``
(one map per output).  ``operands`` holds an ``Operand`` (shape, producer) per operand.  An
opcode with no rule has undefined indexing (``IndexingMap.undefined()``); so do ``fusion``
(handled by ``fusion_indexing``) and ops with no operands (constant, iota, parameter,
rng, ...) which simply have no operand maps.

>>> sorted(OUTPUT_TO_INPUT) == list(OUTPUT_TO_INPUT)
True
"""
from __future__ import annotations

from fusion.opcodes import ELEMENTWISE_OPCODES, opcodes_with
from tiling.indexing_analysis import (
    collective_rules,
    conv_rules,
    data_movement_rules as dm,
    dot_rules,
    dynamic_rules,
    elementwise_rules as ew,
    gather_rules,
    reduction_rules,
    reshape_rules,
)

_ELEMENTWISE_O2I = {op: ew.o2i_elementwise for op in ELEMENTWISE_OPCODES}
_ELEMENTWISE_I2O = {op: ew.i2o_elementwise for op in ELEMENTWISE_OPCODES}
# Collectives and the sharding custom calls: the identity on one device (``collective_rules``);
# any other custom call gets undefined maps from the same rule.
_MOVES_O2I = {op: collective_rules.o2i_collective
              for op in (*opcodes_with("collective"), "custom-call")}
_MOVES_I2O = {op: collective_rules.i2o_collective
              for op in (*opcodes_with("collective"), "custom-call")}

OUTPUT_TO_INPUT = dict(sorted({
    **_ELEMENTWISE_O2I,
    **_MOVES_O2I,
    "bitcast": reshape_rules.o2i_bitcast,
    "broadcast": dm.o2i_broadcast,
    "concatenate": dm.o2i_concatenate,
    "convolution": conv_rules.o2i_convolution,
    "dot": dot_rules.o2i_dot,
    "dynamic-slice": dynamic_rules.o2i_dynamic_slice,
    "dynamic-update-slice": dynamic_rules.o2i_dynamic_update_slice,
    "gather": gather_rules.o2i_gather,
    "get-tuple-element": dm.o2i_get_tuple_element,
    "pad": dm.o2i_pad,
    "reduce": reduction_rules.o2i_reduce,
    "reduce-window": reduction_rules.o2i_reduce_window,
    "reshape": reshape_rules.o2i_reshape,
    "reverse": dm.o2i_reverse,
    "slice": dm.o2i_slice,
    "transpose": dm.o2i_transpose,
    "tuple": dm.o2i_tuple,
}.items()))

INPUT_TO_OUTPUT = dict(sorted({
    **_ELEMENTWISE_I2O,
    **_MOVES_I2O,
    "bitcast": reshape_rules.i2o_bitcast,
    "broadcast": dm.i2o_broadcast,
    "concatenate": dm.i2o_concatenate,
    "dot": dot_rules.i2o_dot,
    "dynamic-slice": dynamic_rules.i2o_dynamic_slice,
    "dynamic-update-slice": dynamic_rules.i2o_dynamic_update_slice,
    "get-tuple-element": dm.i2o_get_tuple_element,
    "pad": dm.i2o_pad,
    "reduce": reduction_rules.i2o_reduce,
    "reshape": reshape_rules.i2o_reshape,
    "reverse": dm.i2o_reverse,
    "slice": dm.i2o_slice,
    "transpose": dm.i2o_transpose,
    "tuple": dm.i2o_tuple,
}.items()))
