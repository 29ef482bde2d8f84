"""The interpreter: runs computations instruction by instruction through the op registry.

Each computation call walks its instructions in an iteratively computed post-order from the
root (no Python recursion along operand chains), evaluates each instruction once, rounds its
result to the declared element type (so narrow floats are computed in f32 and rounded per op, as
XLA does) and drops values after their last use.

Scalar computations (reducers, comparators, scatter combiners, ``map`` bodies) are applied to
whole arrays at once ("batched") when they consist of elementwise ops only; otherwise they are
called once per element.
"""
from __future__ import annotations

from typing import Any, Sequence, Union

import numpy as np

from fusion.analysis.rng_streams import INITIAL_STATE, advanced
from fusion.errors import EvaluationError
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.ir.shape import ArrayShape, TupleShape, flatten_shape
from fusion.evaluator.failures import describe, op_error
from fusion.evaluator.numerics import numpy_dtype
from fusion.evaluator.registry import BATCHABLE_OPCODES, OP_RULES

Value = Union[np.ndarray, tuple]


def flatten_value(value: Value) -> tuple[np.ndarray, ...]:
    """The array leaves of a (possibly nested tuple) value, depth first.

    >>> [a.shape for a in flatten_value((np.zeros(2), (np.zeros(()),)))]
    [(2,), ()]
    """
    if isinstance(value, tuple):
        out: list[np.ndarray] = []
        for element in value:
            out.extend(flatten_value(element))
        return tuple(out)
    return (value,)


class Evaluator:
    """Runs the computations of one module; holds memoization (schedules) and the random
    generators' states of this run (``advance_generator``)."""

    def __init__(self, module: HloModule, max_while_iterations: int | None = None) -> None:
        self.module = module
        # XLA runs a while loop until its condition is false; None keeps that, a number
        # stops a loop after that many iterations with an error naming it.
        self.max_while_iterations = max_while_iterations
        self._schedules: dict[str, tuple[tuple[str, ...], dict[str, int]]] = {}
        self._batchable: dict[str, bool] = {}
        # The computations being run, innermost last: rules that read their operands' declared
        # shapes (bitcast reads layouts) look them up in the innermost one.
        self._frames: list[HloComputation] = []
        self._generators: dict[tuple[str, str], tuple[int, int]] = {}

    def computation(self, name: str, instr: HloInstruction | None = None) -> HloComputation:
        if not self.module.has_computation(name):
            message = f"called computation {name!r} is not in the module"
            if instr is not None:
                raise op_error(instr, message)
            raise EvaluationError(message, where=f"module {self.module.name}")
        return self.module.computation(name)

    def call(
        self,
        name: str,
        args: Sequence[Value],
        *,
        caller: HloInstruction | None = None,
        batched: bool = False,
    ) -> Value:
        """Evaluate computation ``name`` on ``args`` (one value per parameter)."""
        computation = self.computation(name, caller)
        if len(args) != len(computation.parameters):
            message = (
                f"computation {name!r} takes {len(computation.parameters)} parameters, "
                f"called with {len(args)}"
            )
            if caller is not None:
                raise op_error(caller, message)
            raise EvaluationError(message, where=f"computation {name}")
        return self._run(computation, args, batched)

    def call_scalar(
        self, name: str, arrays: Sequence[np.ndarray], *, caller: HloInstruction
    ) -> tuple[np.ndarray, ...]:
        """Apply a computation over scalars elementwise to broadcast-compatible arrays.

        Returns the result leaves, each of the arrays' common broadcast shape.
        """
        arrays = [np.asarray(a) for a in arrays]
        common = np.broadcast_shapes(*(a.shape for a in arrays)) if arrays else ()
        if self.is_batchable(name, caller):
            leaves = flatten_value(self.call(name, arrays, caller=caller, batched=True))
            return tuple(np.broadcast_to(leaf, common) for leaf in leaves)
        computation = self.computation(name, caller)
        result_shapes = flatten_shape(computation.root.shape)
        outs = [np.empty(common, numpy_dtype(s)) for s in result_shapes]
        expanded = [np.broadcast_to(a, common) for a in arrays]
        for index in np.ndindex(*common):
            leaves = flatten_value(self.call(name, [a[index] for a in expanded], caller=caller))
            for out, leaf in zip(outs, leaves):
                out[index] = leaf
        return tuple(outs)

    def advance_generator(self, instr: HloInstruction, delta: int) -> tuple[int, int]:
        """The 128-bit state ``(low, high)`` of ``instr``'s random generator, which this
        advances by ``delta``: one state per instruction, starting where a fresh XLA
        executable starts (``fusion.analysis.rng_streams``)."""
        key = (self._frames[-1].name, instr.name)
        state = self._generators.get(key, (INITIAL_STATE, 0))
        self._generators[key] = advanced(state, delta)
        return state

    def operand_shapes(self, instr: HloInstruction) -> tuple[Any, ...]:
        """The declared shapes of ``instr``'s operands, in the computation now running."""
        computation = self._frames[-1]
        return tuple(computation.instruction(o).shape for o in instr.operands)

    def is_batchable(self, name: str, caller: HloInstruction) -> bool:
        """Whether the scalar computation ``name`` runs on whole arrays at once (every op
        elementwise on scalars), so ``call_scalar`` makes one call, not one per element."""
        if name not in self._batchable:
            computation = self.computation(name, caller)
            self._batchable[name] = all(
                i.opcode in BATCHABLE_OPCODES
                and all(s.rank == 0 for s in flatten_shape(i.shape))
                for i in computation.instructions
            )
        return self._batchable[name]

    def _schedule(self, computation: HloComputation) -> tuple[tuple[str, ...], dict[str, int]]:
        cached = self._schedules.get(computation.name)
        if cached is None:
            order = _post_order(computation)
            last_use = {}
            for position, name in enumerate(order):
                for operand in computation.instruction(name).operands:
                    last_use[operand] = position
            last_use[computation.root_name] = len(order)
            cached = (order, last_use)
            self._schedules[computation.name] = cached
        return cached

    def _run(self, computation: HloComputation, args: Sequence[Value], batched: bool) -> Value:
        order, last_use = self._schedule(computation)
        self._frames.append(computation)
        try:
            return self._run_scheduled(computation, args, batched, order, last_use)
        finally:
            self._frames.pop()

    def _run_scheduled(
        self,
        computation: HloComputation,
        args: Sequence[Value],
        batched: bool,
        order: tuple[str, ...],
        last_use: dict[str, int],
    ) -> Value:
        values: dict[str, Value] = {}
        for position, name in enumerate(order):
            instr = computation.instruction(name)
            if instr.opcode == "parameter":
                value = args[instr.attr("parameter_number")]
            else:
                value = self._apply(instr, [values[o] for o in instr.operands])
            values[name] = _conform(instr, value, batched)
            for operand in instr.operands:
                if last_use.get(operand) == position:
                    values.pop(operand, None)
        return values[computation.root_name]

    def _apply(self, instr: HloInstruction, operands: list[Value]) -> Any:
        rule = OP_RULES.get(instr.opcode)
        if rule is None:
            if instr.opcode == "custom-call":
                target = instr.attr("custom_call_target", "?")
                raise op_error(instr, f"custom-call target {target} is not supported")
            raise op_error(instr, f"unsupported opcode {instr.opcode!r}")
        try:
            with np.errstate(all="ignore"):
                return rule(self, instr, operands)
        except EvaluationError:
            raise
        except (ValueError, TypeError, IndexError, KeyError) as error:
            raise op_error(instr, f"cannot evaluate: {error}") from error


def _post_order(computation: HloComputation) -> tuple[str, ...]:
    """Instructions reachable from the root, operands first, without recursion."""
    done: set[str] = set()
    started: set[str] = set()
    order: list[str] = []
    stack: list[tuple[str, bool]] = [(computation.root_name, False)]
    while stack:
        name, expanded = stack.pop()
        if expanded:
            if name not in done:
                done.add(name)
                order.append(name)
            continue
        if name in started:
            continue
        started.add(name)
        stack.append((name, True))
        instr = computation.instruction(name)
        for operand in reversed(instr.operands):
            if not computation.has_instruction(operand):
                raise op_error(instr, f"operand %{operand} is not defined in {computation.name}")
            if operand not in started:
                stack.append((operand, False))
            elif operand not in done:
                raise op_error(instr, f"operand %{operand} is part of a cycle")
    return tuple(order)


def _conform(instr: HloInstruction, value: Any, batched: bool, shape: Any = None) -> Value:
    """The value rounded to the declared element type and checked against the declared dims."""
    shape = instr.shape if shape is None else shape
    if isinstance(shape, TupleShape):
        if not isinstance(value, tuple) or len(value) != len(shape.elements):
            raise op_error(instr, f"expected a tuple value of shape {shape}")
        return tuple(_conform(instr, v, batched, s) for v, s in zip(value, shape.elements))
    assert isinstance(shape, ArrayShape)
    if isinstance(value, tuple):
        raise op_error(instr, f"expected an array of shape {shape}, got a tuple")
    dtype = numpy_dtype(shape)
    array = np.asarray(value)
    if array.dtype != dtype:
        array = array.astype(dtype)
    dims = tuple(shape.dims)
    actual = array.shape
    ok = actual[len(actual) - len(dims):] == dims if batched else actual == dims
    if not ok:
        raise op_error(
            instr, f"{describe(instr)} computed dims {list(actual)}, declared {list(dims)}"
        )
    return array
