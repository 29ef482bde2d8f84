"""The evaluator's op registry: one rule per opcode, keyed alphabetically.

A rule is ``rule(evaluator, instruction, operand_values) -> value``; the interpreter rounds the
value to the declared element type and checks its dims.  ``parameter`` is bound by the
interpreter itself; ``custom-call`` runs the library targets (``library_ops``) and rejects
any other, naming it.

>>> list(OP_RULES) == sorted(OP_RULES)
True
>>> "add" in BATCHABLE_OPCODES, "reduce" in BATCHABLE_OPCODES
(True, False)
"""
from __future__ import annotations

from typing import Any, Callable

from fusion.evaluator.batch_norm_ops import BATCH_NORM_RULES
from fusion.evaluator.collective_ops import COLLECTIVE_RULES
from fusion.evaluator.constant_ops import CONSTANT_RULES
from fusion.evaluator.control_flow_ops import CONTROL_FLOW_RULES
from fusion.evaluator.conversion_ops import CONVERSION_RULES
from fusion.evaluator.convolution_ops import CONVOLUTION_RULES
from fusion.evaluator.data_movement_ops import DATA_MOVEMENT_RULES
from fusion.evaluator.dot_ops import DOT_RULES
from fusion.evaluator.elementwise_ops import ELEMENTWISE_RULES
from fusion.evaluator.gather_scatter_ops import GATHER_SCATTER_RULES
from fusion.evaluator.library_ops import LIBRARY_RULES
from fusion.evaluator.ragged_dot_ops import RAGGED_DOT_RULES
from fusion.evaluator.random_ops import RANDOM_RULES
from fusion.evaluator.reduction_ops import REDUCTION_RULES
from fusion.evaluator.rng_distribution_ops import RNG_RULES
from fusion.evaluator.scaled_dot_ops import SCALED_DOT_RULES
from fusion.evaluator.sort_ops import SORT_RULES
from fusion.opcodes import opcodes_with
from fusion.rule_tables import merge_rule_families

Rule = Callable[[Any, Any, list], Any]


OP_RULES: dict[str, Rule] = merge_rule_families(
    "evaluation",
    BATCH_NORM_RULES,
    COLLECTIVE_RULES,
    CONSTANT_RULES,
    CONTROL_FLOW_RULES,
    CONVERSION_RULES,
    CONVOLUTION_RULES,
    DATA_MOVEMENT_RULES,
    DOT_RULES,
    ELEMENTWISE_RULES,
    GATHER_SCATTER_RULES,
    LIBRARY_RULES,
    RAGGED_DOT_RULES,
    RANDOM_RULES,
    REDUCTION_RULES,
    RNG_RULES,
    SCALED_DOT_RULES,
    SORT_RULES,
)

BATCHABLE_OPCODES: frozenset[str] = opcodes_with("foldable") | (
    opcodes_with("trivial") - opcodes_with("index_changing")) | opcodes_with("reshape_like")
"""Opcodes that, in a computation over scalars, also work on whole arrays of scalars: the
elementwise ops that hold no state (``foldable``: NumPy broadcasts their rules), the trivial
ops that read no other index (a constant, a parameter, a tuple and its elements), and a
reshape or bitcast, which between scalars keeps or reinterprets each element (XLA's
optimized TOTALORDER comparators bitcast f32 to s32; their rules take scalar batches)."""
