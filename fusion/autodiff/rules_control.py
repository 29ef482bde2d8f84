"""VJP rules of control flow left after flattening: ``conditional`` and ``while``.

``call``, ``fusion`` and short counted loops never reach the reverse pass (``flatten``
inlines and unrolls them).  A longer counted loop is differentiated as JAX differentiates a
scan: a forward loop stacks the state of each trip, then a reverse loop runs the body's VJP
on each, last first (``vjp_while``); a loop whose trip count is not known has no VJP.

A conditional's VJP is a conditional on the same index whose branch ``j`` differentiates
forward branch ``j``: it takes ``(operand_j, cotangent)`` and returns the gradients of every
branch operand, zero but for its own, so all branches return one shape.

>>> sorted(CONTROL_VJP_RULES)
['conditional', 'while']
"""
from __future__ import annotations

from typing import Sequence

from fusion.autodiff.cotangents import Cotangent, materialize, unpack
from fusion.autodiff.dead_code import tidy
from fusion.autodiff.flatten import flatten_computation, loop_trip_count
from fusion.autodiff.graph_builder import GraphBuilder
from fusion.autodiff.loops import counter_loop
from fusion.autodiff.reverse_pass import Rule, VjpContext
from fusion.errors import UnsupportedOpError
from fusion.ir.hlo_module import HloComputation, HloInstruction
from fusion.ir.shape import ArrayShape, TupleShape

Cts = Sequence[Cotangent]


def _branch_keys(instr: HloInstruction) -> tuple[list[str], list[str]]:
    """The branch computations, and the attribute keys naming them."""
    if instr.has_attr("branch_computations"):
        return list(instr.attr("branch_computations")), ["branch_computations"]
    return [instr.attr("true_computation"), instr.attr("false_computation")], [
        "true_computation", "false_computation"]


def vjp_conditional(ctx: VjpContext, instr: HloInstruction, ct: Cotangent) -> Cts:
    b = ctx.b
    branches, keys = _branch_keys(instr)
    operand_shapes = [ctx.shape(o) for o in instr.operands[1:]]
    grads_shape = TupleShape(tuple(operand_shapes))
    ct_value = materialize(b, ct, instr.shape)
    backward_branches = []
    for j, name in enumerate(branches):
        flat = flatten_computation(ctx.module, ctx.module.computation(name))
        inner = GraphBuilder(b.table)
        both = inner.parameter(0, TupleShape((operand_shapes[j], instr.shape)), "operand_and_ct")
        operand = inner.get_tuple_element(both, 0)
        cotangent = inner.get_tuple_element(both, 1)
        (grad,) = ctx.differentiate(inner, flat, [operand],
                                    lambda: unpack(inner, cotangent, instr.shape), {0})
        grads = [materialize(inner, grad, s) if k == j else inner.zeros(s)
                 for k, s in enumerate(operand_shapes)]
        root = inner.tuple(grads)
        comp = HloComputation(b.table.fresh_name(name + "_vjp"), tuple(inner.instructions), root)
        backward_branches.append(b.table.add(tidy(comp)))
    operands = [ctx.operand(instr, 0)] + [
        b.tuple([ctx.operand(instr, j + 1), ct_value]) for j in range(len(branches))]
    if keys == ["branch_computations"]:
        attributes = [("branch_computations", tuple(backward_branches))]
    else:
        attributes = list(zip(keys, backward_branches))
    result = b.emit("conditional", operands, attributes, grads_shape)
    return (None,) + tuple(unpack(b, b.get_tuple_element(result, j), s)
                           for j, s in enumerate(operand_shapes))


def _invariant_leaves(body: HloComputation, count: int) -> set[int]:
    """The state elements the body passes through unchanged (``get-tuple-element`` of its
    parameter at the same index): a loop's weights, read, never written."""
    root = body.root
    if root.opcode != "tuple":
        return set()
    out = set()
    for i, name in enumerate(root.operands[:count]):
        element = body.instruction(name)
        if (element.opcode == "get-tuple-element" and element.attr("index") == i
                and body.instruction(element.operands[0]).opcode == "parameter"):
            out.add(i)
    return out


def vjp_while(ctx: VjpContext, instr: HloInstruction, ct: Cotangent) -> Cts:
    """A counted loop too long to unroll, differentiated as JAX's scan is: a forward loop
    stacks each trip's state (the elements the body changes; it stands for the loop's own
    copy too), then a reverse loop runs the body's VJP on each trip's state, last first."""
    forward = ctx.forward
    trips = loop_trip_count(ctx.module, instr, lambda name: forward.instruction(name)
                            if forward.has_instruction(name) else None)
    state = instr.shape
    if trips is None or not isinstance(state, TupleShape) or not all(
            isinstance(e, ArrayShape) for e in state.elements):
        raise UnsupportedOpError(
            f"no VJP for while %{instr.name}: its trip count is not known (a scalar counted "
            "from a constant to a constant by a constant step) or its state is not a tuple of "
            "arrays", **instr._located())
    b = ctx.b
    leaves = state.elements
    body_name = instr.attr("body")
    invariant = _invariant_leaves(ctx.module.computation(body_name), len(leaves))
    stacked = [i for i in range(len(leaves)) if i not in invariant]
    stacks = [ArrayShape(leaves[i].dtype, (trips,) + leaves[i].dims) for i in stacked]
    s32 = ArrayShape("s32", ())

    def stack_trip(inner: GraphBuilder, param: str, counter: str) -> list[str]:
        carry = inner.get_tuple_element(param, 1)
        zero = inner.scalar(0, "s32")
        out = [inner.emit("call", (carry,), (("to_apply", body_name),), state)]
        for j, i in enumerate(stacked):
            leaf = inner.reshape(inner.get_tuple_element(carry, i), (1,) + leaves[i].dims)
            out.append(inner.emit("dynamic-update-slice", (
                inner.get_tuple_element(param, 2 + j), leaf, counter, *[zero] * leaves[i].rank)))
        return out

    forward_state = TupleShape((s32, state) + tuple(stacks))
    condition, body = counter_loop(b, instr.name + "_stacking", forward_state, 1, trips, "LT",
                                    stack_trip)
    forward = b.emit("while", (b.tuple([b.scalar(0, "s32"), ctx.operand(instr, 0)]
                                       + [b.zeros(shape) for shape in stacks]),),
                     (("condition", condition), ("body", body)), forward_state)
    # The forward's own copy of the loop computes what the stacking loop does: it reads it.
    b.redefine(ctx.out(instr), "get-tuple-element", (forward,), (("index", 1),))
    flat_body = flatten_computation(ctx.module, ctx.module.computation(body_name))

    def reverse_trip(inner: GraphBuilder, param: str, counter: str) -> list[str]:
        zero = inner.scalar(0, "s32")
        init = inner.get_tuple_element(param, 2 + len(stacked))
        values = {i: inner.get_tuple_element(init, i) for i in invariant}
        for j, i in enumerate(stacked):
            trip = inner.emit("dynamic-slice", (inner.get_tuple_element(param, 2 + j), counter,
                                                *[zero] * leaves[i].rank),
                              (("dynamic_slice_sizes", (1,) + leaves[i].dims),))
            values[i] = inner.reshape(trip, leaves[i].dims)
        carry = inner.tuple([values[i] for i in range(len(leaves))])
        next_ct = inner.get_tuple_element(param, 1)
        (grad,) = ctx.differentiate(inner, flat_body, [carry],
                                    lambda: unpack(inner, next_ct, state), {0})
        return ([materialize(inner, grad, state)]
                + [inner.get_tuple_element(param, 2 + j) for j in range(len(stacked) + 1)])

    reverse_state = TupleShape((s32, state) + tuple(stacks) + (state,))
    condition, body = counter_loop(b, instr.name + "_reverse", reverse_state, -1, 0, "GE",
                                    reverse_trip)
    start = [b.scalar(trips - 1, "s32"), materialize(b, ct, state)]
    start += [b.get_tuple_element(forward, 2 + j) for j in range(len(stacked))]
    reverse = b.emit("while", (b.tuple(start + [ctx.operand(instr, 0)]),),
                     (("condition", condition), ("body", body)), reverse_state)
    return (unpack(b, b.get_tuple_element(reverse, 1), state),)


CONTROL_VJP_RULES: dict[str, Rule] = {
    "conditional": vjp_conditional,
    "while": vjp_while,
}
