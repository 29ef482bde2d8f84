"""Ops a compiled module executes on the host, between kernel launches, without computing.

Values are torch tensors (on the kernels' device) or tuples of values.  A tensor holds its
*logical* array, row-major and contiguous, except a value whose shape has a tiled or
word-packed layout (``{1,0:T(8,128)(2,1)}``): that one is its flat PHYSICAL buffer, padding
zero, exactly as kernels read and write it (``input_validation.physical_buffer``).  So:

* ``bitcast``, and a ``reshape`` that is one, become ``Tensor.view`` when both shapes are
  untiled and row-major (ignoring dims of size 1), so logical and physical order agree, and
  the identity when both have the same tiled layout; any other bitcast is left to a kernel (a
  one-op fusion), whose emitter refuses tiled layouts with its reason at compile time;
* ``constant`` becomes a tensor once, at compile time (packed when its layout is tiled);
* ``tuple``/``get-tuple-element`` build and take apart Python tuples (no copy), and so do
  ``opt-barrier`` and the ``copy-start``/``copy-done`` pair (its value on one device);
* a ``reduce`` of zero-element operands is its init values broadcast (XLA's algebraic
  simplifier does the same), so no kernel ever loops over an empty reduced dim;
* ``call`` runs the callee's compiled program (XLA inlines calls; so do we, at run time);
* the collectives (``all-reduce``, ``all-gather``, ...) copy their operands, or give zeros
  (``collective``s on one device, ``collectives``), or call ``torch.distributed`` when the
  module runs as several processes (``distributed``);
* the library calls (``fft``, ``topk``, ``cholesky``, ``triangular-solve`` and the LAPACK /
  cuSOLVER custom-calls JAX emits) call ``torch.fft``/``torch.linalg``/``torch.sort`` on the
  device tensors (``library_calls``);
* ``rng-get-and-update-state`` gives its generator's counter and advances it
  (``random_state``);
* ``while`` and ``conditional`` are host control flow: the predicate or branch index is read
  back (one scalar), the bodies' kernels launch with the loop-carried tuple kept on the device.

One rule per opcode in :data:`HOST_RULES` (alphabetical).  A rule returns the executor or
``None`` when the instruction must be a kernel instead.

>>> import torch
>>> from fusion.ir.shape import ArrayShape
>>> b = HloInstruction("b", "bitcast", ArrayShape("f32", (2, 3)), ("x",))
>>> x = HloInstruction("x", "parameter", ArrayShape("f32", (6,)), (), (("parameter_number", 0),))
>>> comp = HloComputation("c", (x, b), "b")
>>> run = host_executor(comp, b, torch.device("cpu"))
>>> run([torch.arange(6.0)], None).tolist()
[[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Union

import numpy as np
import torch

from fusion.analysis.dimension_size import static_dimension_size
from fusion.analysis.element_width import changes_element_width
from fusion.ir.attributes import Literal
from fusion.errors import EvaluationError, FusionCompilerError
from fusion.evaluator.constant_ops import literal_array
from fusion.evaluator.control_flow_ops import while_limit_message
from fusion.ir.hlo_module import HloComputation, HloInstruction
from fusion.opcodes import opcodes_with
from fusion.ir.shape import ArrayShape, Shape, TupleShape
from triton_backend.host.input_validation import (
    TORCH_DTYPES, pack_logical, physical_buffer, tensor_from_numpy, unpack_physical,
)
from triton_backend.host.views import is_view_layout
from triton_backend.host.collectives import COLLECTIVE_HOST_RULES
from triton_backend.host.random_state import RANDOM_HOST_RULES
from triton_backend.host.library_calls import (
    host_cholesky, host_custom_call, host_fft, host_topk, host_triangular_solve,
)

Value = Union[torch.Tensor, tuple["Value", ...]]


@dataclass(frozen=True)
class HostContext:
    """What an executor may use at run time: the computation's arguments, calling others, the
    most iterations a while loop may run (None: until its condition is false, as XLA), and
    this process's place among several (``distributed.ProcessPlace``; None: one device)."""

    arguments: Sequence[Value]
    call: Callable[[str, Sequence[Value]], Value]
    max_while_iterations: int | None = None
    place: Any = None


Executor = Callable[[Sequence[Value], HostContext], Value]
Rule = Callable[[HloComputation, HloInstruction, torch.device], Union[Executor, None]]


def _identity(operands: Sequence[Value], ctx: HostContext) -> Value:
    return operands[0]


def _same_physical_form(source: Shape, result: Shape) -> bool:
    """Both tiled or packed, with one buffer description: the bitcast moves nothing."""
    if not (isinstance(source, ArrayShape) and isinstance(result, ArrayShape)):
        return False
    if source.dtype not in TORCH_DTYPES or physical_buffer(source) is None:
        return False
    return (source.dtype, source.dims, source.layout) == (result.dtype, result.dims, result.layout)


def _view_executor(source: Shape, result: Shape, widths: bool = False) -> Executor | None:
    """The buffer of ``source`` read as ``result``, a view when both are untiled row-major;
    ``widths``: the element width may change too (a bitcast-convert's new minor dim)."""
    if _same_physical_form(source, result):
        return _identity
    if not (is_view_layout(source) and is_view_layout(result)):
        return None
    assert isinstance(source, ArrayShape) and isinstance(result, ArrayShape)
    if source.element_type.bits * source.num_elements != result.element_type.bits * result.num_elements:
        return None
    if source.element_type.bits != result.element_type.bits and not widths:
        return None
    dtype, dims = TORCH_DTYPES[result.dtype], result.dims

    def run(operands: Sequence[Value], ctx: HostContext) -> Value:
        tensor = operands[0]
        assert isinstance(tensor, torch.Tensor)
        if tensor.dtype != dtype:
            # torch reinterprets the last dim (of stride 1): a scalar becomes one element
            tensor = tensor.contiguous().reshape(tensor.shape or (1,)).view(dtype)
        # A view for contiguous tensors; a kernel's permuted output is copied once.
        return tensor.reshape(dims)

    return run


def host_bitcast(comp: HloComputation, instr: HloInstruction, device: torch.device) -> Executor | None:
    return _view_executor(comp.instruction(instr.operands[0]).shape, instr.shape)


def host_bitcast_convert(comp: HloComputation, instr: HloInstruction,
                         device: torch.device) -> Executor | None:
    """A bitcast-convert between element widths (``fusion.analysis.element_width``): the
    buffer's bytes read as the other type (``f32[3] -> u16[3,2]``: each element's halves,
    low first, as the evaluator splits them).  One of equal widths is a kernel's elementwise
    op (None)."""
    if not changes_element_width(comp, instr):
        return None
    return _view_executor(comp.instruction(instr.operands[0]).shape, instr.shape, widths=True)


def host_call(comp: HloComputation, instr: HloInstruction, device: torch.device) -> Executor:
    callee = instr.attr("to_apply")

    def run(operands: Sequence[Value], ctx: HostContext) -> Value:
        return ctx.call(callee, operands)

    return run


def host_conditional(comp: HloComputation, instr: HloInstruction, device: torch.device) -> Executor:
    if instr.has_attr("branch_computations"):
        branches = tuple(instr.attr("branch_computations"))
    else:
        branches = (instr.attr("true_computation"), instr.attr("false_computation"))
    selector = comp.instruction(instr.operands[0]).shape
    by_pred = isinstance(selector, ArrayShape) and selector.dtype == "pred"

    def run(operands: Sequence[Value], ctx: HostContext) -> Value:
        value = scalar(logical_value(operands[0], selector), instr)
        if by_pred:
            index = 0 if value else 1
        else:
            # XLA: an out-of-range branch index selects the last branch.
            index = int(value)
            if not 0 <= index < len(branches):
                index = len(branches) - 1
        return ctx.call(branches[index], [operands[1 + index]])

    return run


def host_constant(comp: HloComputation, instr: HloInstruction, device: torch.device) -> Executor:
    try:
        value = constant_value(instr.attr("literal"), instr.shape, device)
    except FusionCompilerError as err:  # e.g. an element type torch cannot hold: say where
        loc = instr.location
        raise type(err)(f"constant %{instr.name}: {err.message}",
                        line=loc.line if loc else None, column=loc.column if loc else None,
                        where=instr.name) from None

    def run(operands: Sequence[Value], ctx: HostContext) -> Value:
        return value

    return run


def host_get_dimension_size(comp: HloComputation, instr: HloInstruction, device: torch.device) -> Executor:
    # Folded to a constant by canonicalization; here for a module compiled without it.
    size = static_dimension_size(instr, comp.instruction(instr.operands[0]).shape)
    value = torch.tensor(size, dtype=torch.int32, device=device)

    def run(operands: Sequence[Value], ctx: HostContext) -> Value:
        return value

    return run


def host_get_tuple_element(comp: HloComputation, instr: HloInstruction, device: torch.device) -> Executor:
    index = instr.attr("index")

    def run(operands: Sequence[Value], ctx: HostContext) -> Value:
        return operands[0][index]

    return run


def host_copy_done(comp: HloComputation, instr: HloInstruction, device: torch.device) -> Executor:
    def run(operands: Sequence[Value], ctx: HostContext) -> Value:
        return operands[0][0]

    return run


def host_copy_start(comp: HloComputation, instr: HloInstruction, device: torch.device) -> Executor:
    # One device memory holds both ends of the copy: the value itself, no copy (values are
    # never updated in place here, so sharing one tensor is safe).
    context = torch.zeros((), dtype=torch.uint32, device=device)

    def run(operands: Sequence[Value], ctx: HostContext) -> Value:
        return (operands[0], operands[0], context)

    return run


def host_opt_barrier(comp: HloComputation, instr: HloInstruction, device: torch.device) -> Executor:
    # No copy: the barrier has done its job once the module is compiled (no fusion crossed it).
    def run(operands: Sequence[Value], ctx: HostContext) -> Value:
        return operands[0]

    return run


def host_parameter(comp: HloComputation, instr: HloInstruction, device: torch.device) -> Executor:
    number = instr.attr("parameter_number")

    def run(operands: Sequence[Value], ctx: HostContext) -> Value:
        return ctx.arguments[number]

    return run


def host_reduce(comp: HloComputation, instr: HloInstruction, device: torch.device) -> Executor | None:
    count = len(instr.operands) // 2
    operand = comp.instruction(instr.operands[0]).shape
    if not isinstance(operand, ArrayShape) or operand.num_elements != 0:
        return None
    shapes = instr.shape.elements if isinstance(instr.shape, TupleShape) else (instr.shape,)
    inits = [comp.instruction(o).shape for o in instr.operands[count:]]

    def run(operands: Sequence[Value], ctx: HostContext) -> Value:
        # A fresh buffer per call: the init may be a constant shared by every call.
        out = tuple(pack_logical(logical_value(init, i).expand(s.dims)
                                 .clone(memory_format=torch.contiguous_format), s)
                    for init, i, s in zip(operands[count:], inits, shapes))
        return out if isinstance(instr.shape, TupleShape) else out[0]

    return run


def host_reshape(comp: HloComputation, instr: HloInstruction, device: torch.device) -> Executor | None:
    return _view_executor(comp.instruction(instr.operands[0]).shape, instr.shape)


def host_tuple(comp: HloComputation, instr: HloInstruction, device: torch.device) -> Executor:
    def run(operands: Sequence[Value], ctx: HostContext) -> Value:
        return tuple(operands)

    return run


def host_while(comp: HloComputation, instr: HloInstruction, device: torch.device) -> Executor:
    condition, body = instr.attr("condition"), instr.attr("body")

    def run(operands: Sequence[Value], ctx: HostContext) -> Value:
        state = operands[0]
        limit, done = ctx.max_while_iterations, 0
        while scalar(ctx.call(condition, [state]), instr):
            if limit is not None and done >= limit:
                loc = instr.location
                raise EvaluationError(while_limit_message(limit),
                                      line=loc.line if loc else None,
                                      column=loc.column if loc else None,
                                      where=f"while %{instr.name}")
            state = ctx.call(body, [state])
            done += 1
        return state

    return run


HOST_RULES: dict[str, Rule] = dict(sorted({
    **COLLECTIVE_HOST_RULES,
    **RANDOM_HOST_RULES,
    "bitcast": host_bitcast,
    "bitcast-convert": host_bitcast_convert,
    "call": host_call,
    "cholesky": host_cholesky,
    "conditional": host_conditional,
    "constant": host_constant,
    "copy-done": host_copy_done,
    "copy-start": host_copy_start,
    "custom-call": host_custom_call,
    "fft": host_fft,
    "get-dimension-size": host_get_dimension_size,
    "get-tuple-element": host_get_tuple_element,
    "opt-barrier": host_opt_barrier,
    "parameter": host_parameter,
    "reduce": host_reduce,
    "reshape": host_reshape,
    "topk": host_topk,
    "triangular-solve": host_triangular_solve,
    "tuple": host_tuple,
    "while": host_while,
}.items()))

#: Opcodes whose called computations run as host programs (their ops compiled in turn).
CONTROL_FLOW_OPCODES = opcodes_with("control_flow")


def host_executor(comp: HloComputation, instr: HloInstruction, device: torch.device) -> Executor | None:
    """How to run ``instr`` on the host, or ``None`` if it needs a kernel."""
    rule = HOST_RULES.get(instr.opcode)
    return rule(comp, instr, device) if rule is not None else None


def scalar(value: Value, instr: HloInstruction) -> bool | int | float:
    """The Python value of a one-element tensor (a loop predicate, a branch index)."""
    if not isinstance(value, torch.Tensor) or value.numel() != 1:
        raise EvaluationError("expected a scalar predicate or branch index", where=instr.name)
    return value.item()


def logical_value(value: Value, shape: Shape) -> Value:
    """``value`` (held as the host holds values of ``shape``) as its logical tensor(s).

    >>> from tiling.layouts.tiled_layout import parse_tiles
    >>> shape = ArrayShape("f32", (1, 2), parse_tiles("1,0", "(2,2)"))
    >>> logical_value(torch.tensor([1.0, 2.0, 0.0, 0.0]), shape).tolist()
    [[1.0, 2.0]]
    """
    if isinstance(shape, TupleShape):
        return tuple(logical_value(v, s) for v, s in zip(value, shape.elements))
    return unpack_physical(value, shape)


def constant_value(literal: Literal, shape: Shape, device: torch.device) -> Value:
    """A constant's value as a tensor (or a tuple of them) on ``device``, as the host holds it
    (a tiled layout's flat physical buffer, padding zero).

    >>> constant_value(Literal((2,), (1.5, -2.0)), ArrayShape("bf16", (2,)), torch.device("cpu"))
    tensor([ 1.5000, -2.0000], dtype=torch.bfloat16)
    """
    if isinstance(shape, TupleShape):
        elements = literal.elements or ()
        return tuple(constant_value(e, s, device) for e, s in zip(elements, shape.elements))
    array = literal_array(literal, np.dtype(shape.element_type.numpy_dtype())).reshape(shape.dims)
    return pack_logical(tensor_from_numpy(array, shape.dtype, device), shape)


__all__ = ["CONTROL_FLOW_OPCODES", "HOST_RULES", "HostContext", "Value", "constant_value",
           "host_executor", "logical_value", "scalar"]
