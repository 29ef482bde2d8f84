"""The trip count of a ``while`` loop, when it counts a scalar from a constant by a constant.

The pattern is what ``lax.fori_loop`` and XLA's own loops write: element ``k`` of the state
starts as a constant, the body adds a constant to it, and the condition compares it with a
constant.  The count is found by running that recurrence on Python integers.

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... body {
...   s = (s32[], f32[2]) parameter(0)
...   i = s32[] get-tuple-element(s), index=0
...   one = s32[] constant(1)
...   j = s32[] add(i, one)
...   x = f32[2] get-tuple-element(s), index=1
...   y = f32[2] multiply(x, x)
...   ROOT t = (s32[], f32[2]) tuple(j, y)
... }
... cond {
...   s = (s32[], f32[2]) parameter(0)
...   i = s32[] get-tuple-element(s), index=0
...   n = s32[] constant(3)
...   ROOT lt = pred[] compare(i, n), direction=LT
... }
... ENTRY e {
...   x = f32[2] parameter(0)
...   z = s32[] constant(0)
...   t = (s32[], f32[2]) tuple(z, x)
...   ROOT w = (s32[], f32[2]) while(t), condition=cond, body=body
... }''')
>>> known_trip_count(m.computation("cond"), m.computation("body"), m.entry.instruction("t"),
...                  m.entry.instruction)
3
"""
from __future__ import annotations

import operator
import re
from typing import Callable

from fusion.ir.hlo_module import HloComputation, HloInstruction
from fusion.opcodes import traits

# Simulating a loop stops here: a count this large is not unrolled anyway.
_MAX_SIMULATED_TRIPS = 1 << 20

_COMPARISONS = {"LT": operator.lt, "LE": operator.le, "GT": operator.gt, "GE": operator.ge,
                "NE": operator.ne, "EQ": operator.eq}
_XLA_TRIP_COUNT = re.compile(r'"known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"(\d+)"')
_SWAPPED = {"LT": "GT", "LE": "GE", "GT": "LT", "GE": "LE", "NE": "NE", "EQ": "EQ"}
# The ops a loop body steps its counter with, and the sign of the step's constant.
_STEP_SIGN = {"add": 1, "subtract": -1}


def _literal_int(instr: HloInstruction) -> int | None:
    if instr.opcode != "constant" or not instr.has_attr("literal"):
        return None
    values = instr.attr("literal").values
    if len(values) != 1 or isinstance(values[0], (bool, float, complex)):
        return None
    return int(values[0])


def _scalar_constant(comp: HloComputation, name: str) -> int | None:
    instr = comp.instruction(name)
    while traits(instr.opcode).passes_counter and instr.operands:
        instr = comp.instruction(instr.operands[0])
    return _literal_int(instr)


def _state_element(comp: HloComputation, name: str) -> int | None:
    """``k`` when ``name`` is ``get-tuple-element(parameter(0)), index=k`` (or a copy)."""
    instr = comp.instruction(name)
    while traits(instr.opcode).passes_counter and instr.operands:
        instr = comp.instruction(instr.operands[0])
    if instr.opcode != "get-tuple-element":
        return None
    source = comp.instruction(instr.operands[0])
    if source.opcode != "parameter":
        return None
    return instr.attr("index")


def _condition(comp: HloComputation) -> tuple[int, str, int] | None:
    """``(k, direction, bound)``: the loop runs while ``state[k] direction bound``."""
    root = comp.root
    if root.opcode != "compare" or len(root.operands) != 2:
        return None
    direction = root.attr("direction")
    a, b = root.operands
    k, bound = _state_element(comp, a), _scalar_constant(comp, b)
    if k is None or bound is None:
        k, bound = _state_element(comp, b), _scalar_constant(comp, a)
        direction = _SWAPPED.get(direction, direction)
    if k is None or bound is None or direction not in _COMPARISONS:
        return None
    return k, direction, bound


def _step(comp: HloComputation, k: int) -> int | None:
    """The constant the body adds to ``state[k]``."""
    root = comp.root
    if root.opcode != "tuple" or k >= len(root.operands):
        return None
    update = comp.instruction(root.operands[k])
    sign = _STEP_SIGN.get(update.opcode)
    if sign is None or len(update.operands) != 2:
        return None
    a, b = update.operands
    if _state_element(comp, a) == k and _scalar_constant(comp, b) is not None:
        return sign * _scalar_constant(comp, b)
    if sign > 0 and _state_element(comp, b) == k:  # an add commutes
        return _scalar_constant(comp, a)
    return None


def known_trip_count(condition: HloComputation, body: HloComputation,
                     init: HloInstruction | None,
                     lookup: Callable[[str], HloInstruction | None]) -> int | None:
    """How many times a loop runs ``body``, or ``None`` when the pattern is not there.

    ``condition`` and ``body`` are the loop's computations with their calls and fusions
    inlined (``flatten``); ``init`` is the instruction making the initial state (a
    ``tuple``), and ``lookup`` finds the instructions its operands name.
    """
    if init is None or init.opcode != "tuple":
        return None
    found = _condition(condition)
    if found is None:
        return None
    k, direction, bound = found
    step = _step(body, k)
    if step is None or step == 0 or k >= len(init.operands):
        return None
    source = lookup(init.operands[k])
    while source is not None and traits(source.opcode).passes_counter and source.operands:
        source = lookup(source.operands[0])
    start = _literal_int(source) if source is not None else None
    if start is None:
        return None
    compare = _COMPARISONS[direction]
    value, trips = start, 0
    while compare(value, bound):
        value += step
        trips += 1
        if trips > _MAX_SIMULATED_TRIPS:
            return None
    return trips


def xla_trip_count(loop: HloInstruction) -> int | None:
    """The trip count XLA recorded in an optimized loop's ``backend_config``, if any."""
    match = _XLA_TRIP_COUNT.search(str(loop.attr("backend_config", "")))
    return int(match.group(1)) if match else None
