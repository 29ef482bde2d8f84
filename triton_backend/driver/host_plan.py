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
  decided once); any other step is its host op's executor, as before.

>>> import torch
>>> from triton_backend.driver.module_runner import Step, Program
>>> neg = Step("n", ("x",), lambda ops, ctx: -ops[0], ("x",))
>>> plan = HostPlan.of(Program("c", (Step("x", (), None, ()), neg), "n"), {"x": 0}, {})
>>> plan.run((torch.tensor([1.0]),), lambda: None).tolist()
[-1.0]
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import torch

from fusion.ir.hlo_module import HloComputation
from fusion.ir.shape import TupleShape

#: How a step's result is stored: a host op's value, a kernel's only output, or its tuple.
HOST, KERNEL_ONE, KERNEL_TUPLE = 0, 1, 2


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
        if len(arguments) == self.parameters:
            slots = [*arguments, *self.tail]
        else:  # as the interpreted program: missing parameters fail only when read
            given = list(arguments[:self.parameters])
            slots = given + [None] * (self.parameters - len(given)) + list(self.tail)
        ctx = context() if self.needs_context else None
        for mode, call, fetch, slot, release in self.steps:
            if mode == KERNEL_ONE:
                slots[slot] = call(*fetch(slots))[0]
            elif mode == KERNEL_TUPLE:
                slots[slot] = tuple(call(*fetch(slots)))
            else:
                slots[slot] = call(list(fetch(slots)), ctx)
            for dead in release:
                slots[dead] = None
        return slots[self.root]


def host_plan(program: Any, computation: HloComputation, fusions: Mapping[str, Any],
              device: torch.device) -> HostPlan:
    """The plan of ``program`` (the host program of ``computation``): its fusions' launches
    prepared for ``device`` (a compiled fusion without ``prepared_launch`` is called as it
    is; a complex-pair fusion's splits and joins its complex tensors around the launch)."""
    parameters = {p.name: p.attr("parameter_number") for p in computation.parameters}
    launches = {}
    for step in program.steps:
        compiled = fusions.get(step.name)
        instr = computation.instruction(step.name)
        if compiled is None or instr.opcode != "fusion":
            continue
        prepared = getattr(compiled, "prepared_launch", None)
        launch = prepared(device) if prepared is not None else compiled
        launches[step.name] = (KERNEL_TUPLE if isinstance(instr.shape, TupleShape) else KERNEL_ONE,
                               launch)
    return HostPlan.of(program, parameters, launches)


__all__ = ["HOST", "HostPlan", "KERNEL_ONE", "KERNEL_TUPLE", "host_plan"]
