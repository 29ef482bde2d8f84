"""VJP rules of control flow left after flattening: ``conditional`` and ``while``.

``call``, ``fusion`` and counted loops never reach the reverse pass (``flatten`` inlines
and unrolls them).  A conditional's VJP is a conditional on the same index whose branch ``j``
differentiates forward branch ``j``: it takes ``(operand_j, cotangent)`` and returns the
gradients of every branch operand, zero but for its own, so all branches return one shape.

>>> sorted(CONTROL_VJP_RULES)
['conditional', 'while']
"""
from __future__ import annotations

from typing import Sequence

from fusion.autodiff.cotangents import Cotangent, materialize, unpack
from fusion.autodiff.dead_code import tidy
from fusion.autodiff.flatten import flatten_computation
from fusion.autodiff.graph_builder import GraphBuilder
from fusion.autodiff.reverse_pass import Rule, VjpContext
from fusion.errors import UnsupportedOpError
from fusion.ir.hlo_module import HloComputation, HloInstruction
from fusion.ir.shape import TupleShape

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


def vjp_while(ctx: VjpContext, instr: HloInstruction, ct: Cotangent) -> Cts:
    raise UnsupportedOpError(
        f"no VJP for while %{instr.name}: loops are unrolled, and its trip count is not known "
        "(a scalar counted from a constant to a constant by a constant step) or too large",
        **instr._located())


CONTROL_VJP_RULES: dict[str, Rule] = {
    "conditional": vjp_conditional,
    "while": vjp_while,
}
