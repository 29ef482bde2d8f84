"""A host program prepared to run: one generated Python function per plan, built once.

``module_runner.Program`` says what a computation does (named steps, each with its operands'
names and the names that die after it).  Interpreting it on every call cost a dict of values,
a list built per step and a fusion wrapper per launch.  :func:`host_plan` decides once, per
module and device, how each step runs, and ``plan_code.generate`` writes the straight-line
function that runs them (a :class:`HostPlan`):

* parameter and constant steps disappear: parameters are the function's locals, constants
  (materialized at compile time, shared by every call) its globals;
* a kernel whose launch only allocates and calls (``CompiledFusion.launch_parts``) is
  launched by the generated code itself, its outputs' buffers allocated there or, within the
  call, taken from a value that died before it (``plan_code``'s buffer reuse); any other
  kernel step calls its fusion's prepared launch (``CompiledFusion.prepared_launch``:
  launch options, constants, allocations and layouts decided once);
* a ``get-tuple-element`` is the element of its operand (a name, for a kernel launched in
  place), a ``tuple`` a tuple display, a view its executor without a host context; any
  other step is its host op's executor, as before.

>>> import torch
>>> from triton_backend.driver.module_runner import Step, Program
>>> neg = Step("n", ("x",), lambda ops, ctx: -ops[0], ("x",))
>>> plan = HostPlan.of(Program("c", (Step("x", (), None, ()), neg), "n"), {"x": 0}, {})
>>> plan.run((torch.tensor([1.0]),), lambda: None).tolist()
[-1.0]
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from fusion.ir.hlo_module import HloComputation, HloInstruction
from fusion.opcodes import traits
from fusion.ir.shape import ArrayShape, Shape, TupleShape
from triton_backend.driver.plan_code import (
    ELEMENT, HOST, INLINE, KERNEL_ONE, KERNEL_TUPLE, PURE, TUPLE, InlineLaunch, generate,
)
from triton_backend.host.views import is_view_layout
from triton_backend.lowering.emitter.addressing import is_physical_layout


class HostPlan:
    """A program's generated function: ``run(arguments, context)`` -> its value, where
    ``context()`` makes the host ops' context (called once, and only when a host op runs:
    ``needs_context``); ``lock`` is held over the whole run (the interpreter's, for a plan
    of kernels alone); ``source`` the function's text, ``reused`` the buffers it reuses
    (``plan_code.Generated``); ``contiguous_result``: every tensor of the result is known
    contiguous (a kernel file's row-major or physical output), so a caller skips
    ``contiguous()`` on it."""

    contiguous_result = False

    def __init__(self, generated, parameters: int, needs_context: bool, lock: Any = None):
        self.run = generated.function
        self.source = generated.source
        self.reused = generated.reused
        self.parameters = parameters
        self.needs_context = needs_context
        self.lock = lock

    @staticmethod
    def of(program: Any, parameters: Mapping[str, int], launches: Mapping[str, tuple], *,
           lock: Any = None, reuse: bool = True) -> "HostPlan":
        """The plan of ``program`` whose parameter steps are named in ``parameters`` (name ->
        number) and whose other planned steps are in ``launches`` (name -> ``(mode, call)``,
        ``plan_code``'s modes; a step not there is a host op)."""
        needs_context = any(launches.get(step.name, (HOST,))[0] == HOST
                            for step in program.steps
                            if step.name not in parameters and step.constant is None)
        generated = generate(program, parameters, launches, needs_context=needs_context,
                             lock=lock, reuse=reuse, title=program.name)
        return HostPlan(generated, len(parameters), needs_context, lock)


def host_plan(program: Any, computation: HloComputation, fusions: Mapping[str, Any],
              device: torch.device, *, contiguous_parameters: bool = False,
              reuse: bool = True) -> HostPlan:
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
    locks = {fusions[name].launch_lock(device) for name in planned
             if getattr(fusions.get(name), "prepared_launch", None) is not None} - {None}
    plan_lock = locks.pop() if kernels_only and locks else None  # the interpreter's: one
    launches = {}
    for step in program.steps:
        instr = instrs[step.name]
        if step.name in pure:
            launches[step.name] = (TUPLE, None) if instr.opcode == "tuple" \
                else (PURE, step.execute)
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
        launches[step.name] = _launch(fusions[step.name], instr, device, contiguous,
                                      locked=plan_lock is None)
        # Only a kernel file's launch allocates its outputs itself (row-major ones
        # contiguous); anything else called here (a library call) may return a view.
        if launches[step.name][0] in (KERNEL_ONE, INLINE) \
                and getattr(fusions[step.name], "prepared_launch", None) is not None \
                and _made_contiguous(instr.shape):
            contiguous.add(step.name)
    plan = HostPlan.of(program, parameters, launches, lock=plan_lock, reuse=reuse)
    plan.contiguous_result = _contiguous_result(program.root, instrs, fusions, contiguous)
    return plan


def _contiguous_result(root: str, instrs: Mapping[str, HloInstruction],
                       fusions: Mapping[str, Any], contiguous: set) -> bool:
    """Whether every tensor of the value ``root`` (or of the tuple it makes) is known
    contiguous: in ``contiguous``, or an output of a kernel file's multi-output launch in a
    row-major or physical layout."""
    def known(name: str) -> bool:
        instr = instrs.get(name)
        return name in contiguous or (
            instr is not None and instr.opcode == "fusion" and isinstance(instr.shape, TupleShape)
            and getattr(fusions.get(name), "prepared_launch", None) is not None
            and all(_made_contiguous(s) for s in instr.shape.elements))

    instr = instrs.get(root)
    names = instr.operands if instr is not None and instr.opcode == "tuple" else (root,)
    return all(known(name) for name in names)


def _launch(compiled: Any, instr: HloInstruction, device: torch.device, contiguous: set,
            locked: bool) -> tuple:
    """How a kernel step runs: launched in place by the generated code (``INLINE``, its
    ``launch_parts``), else through its prepared launch (or the compiled fusion itself);
    ``locked``: the launch takes the interpreter's lock itself (the plan does not hold it)."""
    is_tuple = isinstance(instr.shape, TupleShape)
    parts = getattr(compiled, "launch_parts", None)
    parts = parts(device) if parts is not None else None
    if parts is not None:
        kernel, constants, outputs, options, input_perms, output_perms = parts
        return INLINE, InlineLaunch(kernel, constants, outputs, options,
                                    tuple(o in contiguous for o in instr.operands), is_tuple,
                                    compiled.launch_lock(device) if locked else None,
                                    input_perms, output_perms)
    prepared = getattr(compiled, "prepared_launch", None)
    launch = compiled if prepared is None else prepared(
        device, locked=locked, contiguous_inputs=all(o in contiguous for o in instr.operands))
    return (KERNEL_TUPLE if is_tuple else KERNEL_ONE), launch, prepared is not None


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


__all__ = ["HostPlan", "host_plan"]
