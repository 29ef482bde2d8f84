"""A host program prepared to run: a flat tuple of steps over integer slots, built once.

``module_runner.Program`` says what a computation does (named steps, each with its operands'
names and the names that die after it).  Interpreting it on every call cost a dict of values,
a list built per step and a fusion wrapper per launch.  :func:`host_plan` turns it, once per
module and device, into a :class:`HostPlan`:

* every value has a slot in a list (parameters first, by number), operands are fetched with
  one ``operator.itemgetter`` call, and the slots that die after a step are precomputed;
* parameter and constant steps disappear: a call's slots start as its arguments followed by
  the constants (materialized at compile time, shared by every call);
* a kernel step calls its fusion's prepared launch directly
  (``CompiledFusion.prepared_launch``: launch options, constants, allocations and layouts
  decided once); a ``get-tuple-element`` indexes its operand's slot; any other step is its
  host op's executor, as before.

>>> import torch
>>> from triton_backend.driver.module_runner import Step, Program
>>> neg = Step("n", ("x",), lambda ops, ctx: -ops[0], ("x",))
>>> plan = HostPlan.of(Program("c", (Step("x", (), None, ()), neg), "n"), {"x": 0}, {})
>>> plan.run((torch.tensor([1.0]),), lambda: None).tolist()
[-1.0]
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from operator import itemgetter
from typing import Any

import torch

from fusion.ir.hlo_module import HloComputation, HloInstruction
from fusion.opcodes import traits
from fusion.ir.shape import ArrayShape, Shape, TupleShape
from triton_backend.host.views import is_view_layout
from triton_backend.lowering.emitter.addressing import is_physical_layout

#: How a step makes its result: a host op's value, a kernel's only output, its tuple, an
#: element of the operand's tuple (the step's ``call`` is then the index), or a host op that
#: needs no host context (a view or a tuple: ``_is_pure``).
HOST, KERNEL_ONE, KERNEL_TUPLE, ELEMENT, PURE = 0, 1, 2, 3, 4


def _fetcher(slots: Sequence[int]) -> Callable:
    """One C-level call giving a step's operands from the slot list (a list or a tuple)."""
    if len(slots) >= 2:
        return itemgetter(*slots)
    if slots:  # itemgetter(i) would give the value itself, not a sequence of one
        return itemgetter(slice(slots[0], slots[0] + 1))
    return itemgetter(slice(0, 0))


@dataclass(frozen=True)
class HostPlan:
    """A program's steps as ``(mode, call, fetch, slot, release)`` tuples (plain tuples: the
    loop unpacks them); ``tail`` the slots after the ``parameters`` (constants, else None)."""

    steps: tuple[tuple, ...]
    tail: tuple
    parameters: int
    root: int
    needs_context: bool
    lock: Any = None  # held over the whole run (the interpreter's, for a plan of kernels alone)

    @staticmethod
    def of(program: Any, parameters: Mapping[str, int],
           launches: Mapping[str, tuple]) -> "HostPlan":
        """The plan of ``program`` whose parameter steps are named in ``parameters`` (name ->
        number) and whose kernel steps are in ``launches`` (name -> ``(mode, launch)``)."""
        slot = dict(parameters)
        for step in program.steps:
            slot.setdefault(step.name, len(slot))
        tail: list = [None] * (len(slot) - len(parameters))
        steps = []
        for step in program.steps:
            if step.name in parameters:
                continue
            if step.constant is not None:
                tail[slot[step.name] - len(parameters)] = step.constant
                continue
            mode, call = launches.get(step.name, (HOST, step.execute))
            steps.append((mode, call, _fetcher([slot[o] for o in step.operands]), slot[step.name],
                          tuple(slot[d] for d in step.release)))
        return HostPlan(tuple(steps), tuple(tail), len(parameters), slot[program.root],
                        any(s[0] == HOST for s in steps))

    def run(self, arguments: Sequence[Any], context: Callable[[], Any]) -> Any:
        """The program's value on ``arguments``; ``context()`` makes the host ops' context
        (called once, and only when a host op runs)."""
        if self.lock is None:
            return self._run(arguments, context)
        with self.lock:
            return self._run(arguments, context)

    def _run(self, arguments: Sequence[Any], context: Callable[[], Any]) -> Any:
        if len(arguments) == self.parameters:
            slots = [*arguments, *self.tail]
        else:  # as the interpreted program: missing parameters fail only when read
            given = list(arguments[:self.parameters])
            slots = given + [None] * (self.parameters - len(given)) + list(self.tail)
        ctx = context() if self.needs_context else None
        for mode, call, fetch, slot, release in self.steps:
            if mode == KERNEL_ONE:
                slots[slot] = call(*fetch(slots))[0]
            elif mode == ELEMENT:
                slots[slot] = fetch(slots)[0][call]
            elif mode == PURE:
                slots[slot] = call(fetch(slots), None)
            elif mode == KERNEL_TUPLE:
                slots[slot] = tuple(call(*fetch(slots)))
            else:
                slots[slot] = call(list(fetch(slots)), ctx)
            for dead in release:
                slots[dead] = None
        return slots[self.root]


def host_plan(program: Any, computation: HloComputation, fusions: Mapping[str, Any],
              device: torch.device, *, contiguous_parameters: bool = False) -> HostPlan:
    """The plan of ``program`` (the host program of ``computation``): its fusions' launches
    prepared for ``device`` (a compiled fusion without ``prepared_launch`` is called as it
    is; a complex-pair fusion's splits and joins its complex tensors around the launch).

    A launch skips making its operands contiguous when each is known to be: a parameter
    when ``contiguous_parameters`` (the ENTRY's, validated), a contiguous constant, or a
    kernel's output in a row-major or physical layout.  A plan of kernels alone takes the
    interpreter's lock once per run rather than once per launch."""
    parameters = {p.name: p.attr("parameter_number") for p in computation.parameters}
    instrs = {step.name: computation.instruction(step.name) for step in program.steps}
    planned = {name for name, instr in instrs.items()
               if instr.opcode == "get-tuple-element"
               or (instr.opcode == "fusion" and name in fusions)}
    pure = {step.name for step in program.steps if step.name not in planned
            and step.name not in parameters and step.constant is None
            and _is_pure(instrs[step.name])}
    kernels_only = all(step.name in planned or step.name in pure or step.name in parameters
                       or step.constant is not None for step in program.steps)
    contiguous = set(parameters) if contiguous_parameters else set()
    launches, locks = {}, set()
    for step in program.steps:
        instr = instrs[step.name]
        if step.name in pure:
            launches[step.name] = (PURE, step.execute)
        if step.constant is not None and isinstance(step.constant, torch.Tensor) \
                and step.constant.is_contiguous():
            contiguous.add(step.name)
        if step.name not in planned:
            continue
        if instr.opcode == "get-tuple-element":
            launches[step.name] = (ELEMENT, instr.attr("index"))
            producer = fusions.get(instr.operands[0])
            if getattr(producer, "prepared_launch", None) is not None \
                    and _made_contiguous(instr.shape):
                contiguous.add(step.name)
            continue
        compiled = fusions[step.name]
        prepared = getattr(compiled, "prepared_launch", None)
        if prepared is None:
            launch = compiled
        else:
            launch = prepared(device, locked=not kernels_only,
                              contiguous_inputs=all(o in contiguous for o in instr.operands))
            locks.add(compiled.launch_lock(device))
        is_tuple = isinstance(instr.shape, TupleShape)
        launches[step.name] = (KERNEL_TUPLE if is_tuple else KERNEL_ONE, launch)
        # Only a kernel file's prepared launch allocates its outputs itself (row-major ones
        # contiguous); anything else called here (a library call) may return a view.
        if not is_tuple and prepared is not None and _made_contiguous(instr.shape):
            contiguous.add(step.name)
    locks.discard(None)
    plan = HostPlan.of(program, parameters, launches)
    if kernels_only and locks:
        lock, = locks  # the interpreter's: there is one
        plan = replace(plan, lock=lock)
    return plan


def _is_pure(instr: HloInstruction) -> bool:
    """True when the host runs ``instr`` without its context: a view of its operand (a
    ``reshape``/``bitcast`` left to the host) or a tuple of its operands."""
    op = traits(instr.opcode)
    return (op.reshape_like or op.wraps_operands) and not op.control_flow


def _made_contiguous(shape: Shape) -> bool:
    """True when a kernel's output of ``shape`` reaches the host contiguous: a layout whose
    buffer is the row-major tensor (others are returned as permuted views) or a physical
    buffer (flat)."""
    return isinstance(shape, ArrayShape) and (is_physical_layout(shape) or is_view_layout(shape))


__all__ = ["ELEMENT", "HOST", "HostPlan", "KERNEL_ONE", "KERNEL_TUPLE", "PURE", "host_plan"]
