"""Running a compiled module: ``CompiledModule`` and the host programs it interprets.

``module_compiler.compile_hlo`` compiles every kernel of a module up front; what it returns is
a :class:`CompiledModule`, which holds per computation the host reaches (the ENTRY and the
bodies of its calls, loops and conditionals: :func:`host_computations`) a :class:`Program`:
its instructions in dependency order, each a :class:`Step` that runs a compiled fusion's
kernels, or a host op (``host_ops``) for parameters, tuples, views, constants and control
flow, and says which values die after it.  Calling the module with torch tensors (one per
ENTRY parameter) runs the ENTRY program and returns its result flattened to a tuple of
tensors.  Building the programs (:func:`host_program`) is cheap, no analysis: the module cache
rebuilds them from a stored plan.

**Tiled layouts.**  Tensors cross the ENTRY boundary in their LOGICAL form (the HLO's dtype and
dims) even when the ENTRY signature has tiled or word-packed layouts (``bf16[37,300]{1,0:
T(8,128)(2,1)}``): such an argument is packed on the host (``host_packing.pack_tensor``, padding
zero); an argument that is already the flat physical buffer (``input_validation.
physical_buffer``: 1-D, its length and dtype, e.g. ``torch.uint32`` words) is taken as is.
Such a result is unpacked to its logical tensor, unless ``physical_outputs=True`` (on
``compile_hlo`` or on the call) asks for the physical buffers (padding zero).  Inside the
module such values stay physical between kernels (every kernel reads and writes them so), and
``call``/``while``/``conditional`` must pass them to computations declaring the same layout
(checked when the program is built).

Without a CUDA device the kernels run under the Triton interpreter on CPU tensors
(``launch_mode``); with one, inputs must be CUDA tensors on the device current at compile time.

Results are new values, as in XLA without buffer donation (which is not supported): the
caller's tensors are never written, not even by a fusion XLA would emit in place (a
dynamic-update-slice of parameter 0), and no output shares storage with an input, a constant
or another output (a tuple returning one value twice gives two tensors).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import torch

from fusion.analysis.computation_partitioner import post_order
from fusion.errors import FusionCompilerError, UnsupportedOpError
from fusion.evaluator.control_flow_ops import check_iteration_limit
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.ir.shape import ArrayShape, Shape, TupleShape, flatten_shape
from triton_backend.host.host_ops import (
    CONTROL_FLOW_OPCODES, Executor, HostContext, Value, host_executor,
)
from triton_backend.driver.cuda_graphs import GraphedRun
from triton_backend.driver.host_plan import HostPlan, host_plan
from triton_backend.driver.prepared_call import (
    ResultForm, accepted_signatures, outputs_are_fresh,
)
from triton_backend.host.input_validation import torch_dtype, unpack_physical, validate_arguments
from triton_backend.lowering.emitter.addressing import is_physical_layout
from triton_backend.runtime.lazy_module import ParsedWhenRead


@dataclass(frozen=True)
class Step:
    """One instruction of a host program: how to run it and which values die after it."""

    name: str
    operands: tuple[str, ...]
    execute: Executor
    release: tuple[str, ...]
    constant: Value | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Program:
    """A host-executed computation: its steps in dependency order and its root."""

    name: str
    steps: tuple[Step, ...]
    root: str


@dataclass(frozen=True)
class CompiledModule:
    """A module ready to run: call it with one torch tensor per ENTRY parameter.

    ``module`` is what runs (fused, lone ops wrapped); ``source_module`` what was given (a
    warm compile of text parses it when it is first read);
    ``fusions`` maps each launched fusion's name to its ``CompiledFusion`` (``kernel_path``,
    ``source``, ``grid``, ``tile_sizes``, ``kind``); a fusion whose outputs all have zero
    elements launches nothing and is not there.  ``fusion_mode`` says how the module was
    fused: ``"fused"`` (the fusion pass), ``"fused-single-output"`` (the pass without
    multi-output fusion, after the backend rejected a multi-output fusion) or ``"unfused"``
    (XLA's fusions only, lone ops as one-op fusions); ``fusion_fallbacks`` says why a more
    aggressive mode was given up.  ``physical_outputs`` is the default of the call's option
    of that name (tiled results as physical buffers); ``tuning_device`` the device key whose
    tuned tilings were looked up (None: none were); ``place`` this process's place when the
    module runs as several processes (``host.distributed.ProcessPlace``; None: one device);
    ``cuda_graph`` whether a call on a GPU replays a CUDA graph (``cuda_graphs``).
    """

    module: HloModule
    source_module: HloModule = ParsedWhenRead()
    fusions: Mapping[str, Any]
    programs: Mapping[str, Program] = field(repr=False)
    device: torch.device
    fusion_mode: str = "unfused"
    fusion_fallbacks: tuple[str, ...] = ()
    fusion_decisions: tuple = field(default=(), repr=False)
    constant_storages: frozenset[int] = field(default=frozenset(), repr=False)
    physical_outputs: bool = False
    tuning_device: str | None = None
    place: Any = None
    cuda_graph: bool | str = False

    def __call__(self, *args: torch.Tensor, physical_outputs: bool | None = None,
                 max_while_iterations: int | None = None) -> tuple[torch.Tensor, ...]:
        """Run the ENTRY computation; see the module docstring for tiled layouts.

        ``max_while_iterations`` (default None: unbounded, as XLA) stops a while loop still
        running after that many iterations with an ``EvaluationError`` naming it.
        """
        if max_while_iterations is not None:
            check_iteration_limit(max_while_iterations)
        call = self.__dict__.get("_entry_call") or self._prepare()
        return call(args, physical_outputs, max_while_iterations)

    def _prepare(self) -> Callable:
        """``call(args, physical_outputs, max_while_iterations)``: what every call of this
        module reuses (``prepared_call``, the ENTRY's plan) bound once, on the first call."""
        entry, device = self.module.entry, self.device
        accepted = accepted_signatures(entry.parameters)
        fresh = outputs_are_fresh(self.module, self.fusions)
        form = ResultForm.of(entry.root.shape)
        plan = self._plan(entry.name)
        # A kernel's own buffers, each contiguous: returned as they are.
        as_they_are = fresh and plan.contiguous_result and not form.physical
        where = f"ENTRY {entry.name}"
        on_cuda = device.type == "cuda"
        graphed = None
        if self.cuda_graph and on_cuda:  # under the interpreter: nothing to capture
            graphed = GraphedRun(lambda tensors: plan.run(tensors, self._context(tensors, None)),
                                 device, self.module.name, self.cuda_graph == "reuse-outputs")

        def call(args, physical_outputs, max_while_iterations):
            if accepted.matches(args):
                tensors = args  # this signature passed the full validation unchanged
            else:
                tensors = validate_arguments(entry.parameters, args, device, computation=where)
                accepted.remember(args, tensors)
            context = self._context(tensors, max_while_iterations) if plan.needs_context else None
            if on_cuda and torch.cuda.current_device() != device.index:
                # Triton launches on the current CUDA device: make it the one the constants live on.
                with torch.cuda.device(device):
                    result = graphed(tensors) if graphed else plan.run(tensors, context)
            else:
                result = graphed(tensors) if graphed else plan.run(tensors, context)
            outputs = form.flatten(result)
            if as_they_are:
                return tuple(outputs)
            if form.physical and not (self.physical_outputs if physical_outputs is None
                                      else physical_outputs):
                outputs = [unpack_physical(t, s) for t, s in zip(outputs, form.shapes)]
            if fresh:  # a kernel's own buffers: only a permuted (non-row-major) one is copied
                return tuple(map(torch.Tensor.contiguous, outputs))
            return _fresh_outputs(outputs, tensors, self.constant_storages)

        self.__dict__["_entry_call"] = call
        return call

    def _context(self, arguments: Sequence[Value],
                 max_while_iterations: int | None) -> Callable[[], HostContext]:
        """``context()`` -> the host ops' context of a run on ``arguments``."""
        return lambda: HostContext(
            tuple(arguments), partial(self.call_computation,
                                      max_while_iterations=max_while_iterations),
            max_while_iterations, self.place)

    def _plan(self, name: str) -> HostPlan:
        """Computation ``name``'s prepared plan (``host_plan``), built on its first run."""
        plans = self.__dict__.setdefault("_plans", {})
        plan = plans.get(name)
        if plan is None:
            # The ENTRY's parameters are validated contiguous; a callee's are whatever it gets.
            plan = plans[name] = host_plan(self.programs[name], self.module.computation(name),
                                           self.fusions, self.device,
                                           contiguous_parameters=name == self.module.entry_name)
        return plan

    def call_computation(self, name: str, arguments: Sequence[Value],
                         max_while_iterations: int | None = None) -> Value:
        """Run the host program of computation ``name`` on ``arguments``."""
        plan = self.__dict__.get("_plans", {}).get(name) or self._plan(name)
        return plan.run(arguments, self._context(arguments, max_while_iterations))


def host_computations(module: HloModule) -> tuple[str, ...]:
    """The ENTRY and every computation it reaches through call/while/conditional, callees first.

    >>> from fusion.text.parser import parse_hlo
    >>> host_computations(parse_hlo('''HloModule m
    ... f { a = f32[] parameter(0)
    ...     ROOT n = f32[] negate(a) }
    ... ENTRY e { x = f32[] parameter(0)
    ...     ROOT c = f32[] call(x), to_apply=f }'''))
    ('f', 'e')
    """
    order: list[str] = []
    seen: set[str] = {module.entry_name}

    def callees(name: str):
        for instr in module.computation(name).instructions:
            if instr.opcode in CONTROL_FLOW_OPCODES:
                yield from instr.called_computations()

    # Depth-first, callees first, with an explicit stack: calls may nest thousands deep.
    stack = [(module.entry_name, callees(module.entry_name))]
    while stack:
        name, pending = stack[-1]
        callee = next((c for c in pending if c not in seen), None)
        if callee is None:
            stack.pop()
            order.append(name)
            continue
        seen.add(callee)
        stack.append((callee, callees(callee)))
    return tuple(order)


def located(cls: type[FusionCompilerError], message: str, instr: HloInstruction,
             where: str | None = None) -> FusionCompilerError:
    """A ``cls`` error with ``message`` at ``instr``'s line:column (``where``: its name)."""
    loc = instr.location
    return cls(message, line=loc.line if loc else None, column=loc.column if loc else None,
               where=where or instr.name)


def host_program(module: HloModule, comp: HloComputation, fusions: Mapping[str, Any],
                 device: torch.device) -> Program:
    """The host program of ``comp``: its instructions in post order, each run by its compiled
    fusion in ``fusions`` (nothing for a fusion with empty outputs) or a host op, and
    releasing the values it used last; constants are materialized now, on ``device``."""
    order = post_order(comp)
    last_use: dict[str, int] = {}
    for k, name in enumerate(order):
        for operand in comp.instruction(name).operands:
            last_use[operand] = k
    steps = []
    for k, name in enumerate(order):
        instr = comp.instruction(name)
        if instr.opcode in _CARRIED:
            _check_carried_layouts(module, comp, instr)
        if instr.opcode == "fusion" and name not in fusions:
            execute = _empty_executor(instr, empty_outputs(instr), device)
        elif instr.opcode == "fusion":
            execute = _fusion_executor(fusions[name], instr)
        else:
            execute = host_executor(comp, instr, device)
            assert execute is not None, f"{instr.opcode} {name} was neither wrapped nor host-run"
        release = tuple(o for o in dict.fromkeys(instr.operands)
                        if last_use.get(o) == k and o != comp.root_name)
        constant = execute([], None) if instr.opcode == "constant" else None
        steps.append(Step(name, instr.operands, execute, release, constant))
    return Program(comp.name, tuple(steps), comp.root_name)


def _check_carried_layouts(module: HloModule, comp: HloComputation, instr: HloInstruction) -> None:
    """Values in a tiled layout are physical buffers: a callee must declare the same layout
    for what it receives and returns, or it would read one buffer format as another."""
    for given, declared, what in _CARRIED[instr.opcode](module, comp, instr):
        for a, b in zip(flatten_shape(given), flatten_shape(declared)):
            if (_is_tiled(a) or _is_tiled(b)) and (a.layout, a.dims) != (b.layout, b.dims):
                raise located(UnsupportedOpError, f"{instr.opcode} passes {what} in different "
                               f"layouts ({a} vs {b}); a tiled layout is a buffer format, so "
                               "both sides must declare the same one", instr)


#: ``(given shape, declared shape, what)`` pairs a carrying op's layouts must agree on.
Pairs = list[tuple[Shape, Shape, str]]


def _called_pairs(module: HloModule, comp: HloComputation, instr: HloInstruction) -> Pairs:
    callee = module.computation(instr.attr("to_apply" if instr.has_attr("to_apply") else "calls"))
    pairs = [(comp.instruction(o).shape, p.shape, f"operand {k} and parameter {k} of {callee.name}")
             for k, (o, p) in enumerate(zip(instr.operands, callee.parameters))]
    return pairs + [(callee.root.shape, instr.shape, f"the result of {callee.name}")]


def _while_pairs(module: HloModule, comp: HloComputation, instr: HloInstruction) -> Pairs:
    body = module.computation(instr.attr("body"))
    cond = module.computation(instr.attr("condition"))
    state = comp.instruction(instr.operands[0]).shape
    if any(_is_tiled(s) for s in flatten_shape(cond.root.shape)):
        raise located(UnsupportedOpError, f"the predicate of condition {cond.name} has the "
                       f"tiled layout {cond.root.shape}; a while predicate must be untiled", instr)
    return [(state, body.parameters[0].shape, f"the state and {body.name}'s parameter"),
            (state, cond.parameters[0].shape, f"the state and {cond.name}'s parameter"),
            (body.root.shape, state, f"the result of {body.name} and the state")]


def _tuple_pairs(module: HloModule, comp: HloComputation, instr: HloInstruction) -> Pairs:
    # The host groups values as they are: no relayout.
    return [(comp.instruction(o).shape, e, f"operand {k} as tuple element {k}")
            for k, (o, e) in enumerate(zip(instr.operands, instr.shape.elements))]


def _element_pairs(module: HloModule, comp: HloComputation, instr: HloInstruction) -> Pairs:
    index = instr.attr("index")
    return [(comp.instruction(instr.operands[0]).shape.elements[index], instr.shape,
             f"tuple element {index} as its result")]


def _branch_pairs(module: HloModule, comp: HloComputation, instr: HloInstruction) -> Pairs:
    branches = (tuple(instr.attr("branch_computations"))
                if instr.has_attr("branch_computations")
                else (instr.attr("true_computation"), instr.attr("false_computation")))
    pairs: Pairs = []
    for k, name in enumerate(branches):
        branch = module.computation(name)
        pairs += [(comp.instruction(instr.operands[1 + k]).shape, p.shape,
                   f"operand {1 + k} and {name}'s parameter") for p in branch.parameters[:1]]
        pairs.append((branch.root.shape, instr.shape, f"the result of {name}"))
    return pairs


#: The ops whose operands reach a computation or a result as the host holds them (control
#: flow, and a fusion, whose kernel reads its parameters' buffer format), one rule each.
_CARRIED = {
    "call": _called_pairs,
    "conditional": _branch_pairs,
    "fusion": _called_pairs,
    "get-tuple-element": _element_pairs,
    "tuple": _tuple_pairs,
    "while": _while_pairs,
}


def _is_tiled(shape: ArrayShape) -> bool:
    return shape.layout is not None and bool(shape.layout.tiles or shape.layout.element_size_in_bits)


def _fusion_executor(compiled: Any, instr: HloInstruction) -> Executor:
    is_tuple = isinstance(instr.shape, TupleShape)

    def run(operands: Sequence[Value], ctx: HostContext) -> Value:
        outputs = compiled(*operands)
        return tuple(outputs) if is_tuple else outputs[0]

    return run


def empty_outputs(instr: HloInstruction) -> tuple[ArrayShape, ...] | None:
    """A fusion's outputs when every one has zero elements (in a logical layout), else None.

    Such a fusion writes nothing: like XLA, we compile and launch no kernel for it (it would
    have an empty grid), so no emitter ever sees a zero-size iteration space.
    """
    shapes = flatten_shape(instr.shape)
    if shapes and all(s.num_elements == 0 and not is_physical_layout(s) for s in shapes):
        return shapes
    return None


def _empty_executor(instr: HloInstruction, shapes: tuple[ArrayShape, ...],
                    device: torch.device) -> Executor:
    is_tuple = isinstance(instr.shape, TupleShape)

    def run(operands: Sequence[Value], ctx: HostContext) -> Value:
        outputs = tuple(torch.empty(s.dims, dtype=torch_dtype(s.dtype), device=device)
                        for s in shapes)
        return outputs if is_tuple else outputs[0]

    return run


def _flatten(value: Value) -> list[torch.Tensor]:
    if isinstance(value, tuple):
        return [t for v in value for t in _flatten(v)]
    return [value]


def constant_storages(programs) -> frozenset[int]:
    """Storages of the constants materialized at compile time (shared by every call)."""
    ptrs = set()
    for program in programs:
        for step in program.steps:
            if step.constant is not None:
                ptrs.update(t.untyped_storage().data_ptr() for t in _flatten(step.constant))
    return frozenset(ptrs)


def _fresh_outputs(outputs: list[torch.Tensor], inputs: Sequence[torch.Tensor],
                   constants: frozenset[int]) -> tuple[torch.Tensor, ...]:
    """Outputs the caller may own: contiguous, and never sharing memory with an input, a
    constant (reused by every call) or another output."""
    taken = {t.untyped_storage().data_ptr() for t in inputs} | constants
    out = []
    for tensor in outputs:
        fresh = tensor.untyped_storage().data_ptr() not in taken
        tensor = tensor.contiguous() if fresh else tensor.clone(memory_format=torch.contiguous_format)
        taken.add(tensor.untyped_storage().data_ptr())
        out.append(tensor)
    return tuple(out)


__all__ = ["CompiledModule", "Program", "Step", "constant_storages", "empty_outputs",
           "host_computations", "host_program", "located"]
