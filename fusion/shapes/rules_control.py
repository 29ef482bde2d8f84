"""Shape rules of the ops that call computations: async-start (with async-update; its
async-done is the collectives' rule), call, conditional, fusion, while; and custom-call,
whose shape is whatever its target declares.

>>> FUSION_KINDS
('kCustom', 'kInput', 'kLoop', 'kOutput')
"""
from __future__ import annotations

from typing import Sequence

from fusion.ir.hlo_module import HloInstruction, HloModule
from fusion.ir.shape import ArrayShape, Shape, TupleShape
from fusion.shapes.checks import (
    callee,
    expect_callee_params,
    expect_operand_count,
    expect_scalar,
    fail,
    signature,
)

FUSION_KINDS = ("kCustom", "kInput", "kLoop", "kOutput")


def shape_async_start(instr: HloInstruction, operands: Sequence[Shape],
                      module: HloModule | None) -> Shape:
    """``async-start(args...), calls=f``: ``((args...), f's root, context...)``, the context
    elements (the runtime's) as declared."""
    comp = callee(instr, module, "calls")
    expect_callee_params(instr, comp, operands, "calls")
    declared = instr.shape
    if not isinstance(declared, TupleShape) or len(declared.elements) < 2:
        fail(instr, f"async-start's shape {declared} is not ((operands...), result, context...)")
    return TupleShape((TupleShape(tuple(operands)), signature(comp)[1], *declared.elements[2:]))


def shape_async_update(instr: HloInstruction, operands: Sequence[Shape],
                       module: HloModule | None) -> Shape:
    """``async-update(start)``: the async-start's tuple, passed on."""
    expect_operand_count(instr, operands, 1, 1)
    return operands[0]


def shape_call(instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None) -> Shape:
    """``call(args...), to_apply=f``: f's parameters are the args; the result is f's root."""
    comp = callee(instr, module, "to_apply")
    expect_callee_params(instr, comp, operands, "to_apply")
    return signature(comp)[1]


def shape_conditional(
    instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None
) -> Shape:
    """A pred selector with true/false computations, or an s32 index into branch_computations."""
    expect_operand_count(instr, operands, 1, -1)
    selector = expect_scalar(instr, operands[0], "the branch selector")
    if instr.has_attr("branch_computations"):
        keys = [("branch_computations", n) for n in range(len(instr.attr("branch_computations")))]
        if selector.dtype != "s32":
            fail(instr, f"branch index of a conditional must be s32[], got {selector}")
    else:
        keys = [("true_computation", None), ("false_computation", None)]
        if selector.dtype != "pred":
            fail(instr, f"predicate of a conditional must be pred[], got {selector}")
    if len(operands) != len(keys) + 1:
        fail(instr, f"conditional with {len(keys)} branches needs {len(keys) + 1} operands, "
             f"got {len(operands)}")
    roots = []
    for (key, n), arg in zip(keys, operands[1:]):
        comp = _branch(instr, module, key, n)
        expect_callee_params(instr, comp, (arg,), key)
        roots.append(signature(comp)[1])
    for comp_root in roots[1:]:
        if not comp_root.same_dims_and_type(roots[0]):
            fail(instr, f"conditional branches return different shapes {roots[0]} and {comp_root}")
    return roots[0]


def _branch(instr: HloInstruction, module: HloModule | None, key: str, n: int | None):
    if n is None:
        return callee(instr, module, key)
    name = instr.attr(key)[n]
    if module is None or not module.has_computation(name):
        fail(instr, f"called computation '{name}' ({key}) does not exist")
    return module.computation(name)


def shape_custom_call(
    instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None
) -> Shape:
    """Opaque to the verifier: the declared shape is accepted as is."""
    return instr.shape


def shape_fusion(instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None) -> Shape:
    """``fusion(args...), kind=kLoop, calls=f``: like call, plus a valid kind."""
    kind = instr.attr("kind", None)
    if kind not in FUSION_KINDS:
        fail(instr, f"fusion has invalid kind {kind!r}", expected="kind=" + "|".join(FUSION_KINDS))
    comp = callee(instr, module, "calls")
    expect_callee_params(instr, comp, operands, "fused")
    return signature(comp)[1]


def shape_while(instr: HloInstruction, operands: Sequence[Shape], module: HloModule | None) -> Shape:
    """The loop state keeps its shape: body maps it to itself, condition maps it to pred[]."""
    expect_operand_count(instr, operands, 1)
    state = operands[0]
    body = callee(instr, module, "body")
    condition = callee(instr, module, "condition")
    expect_callee_params(instr, body, (state,), "body")
    expect_callee_params(instr, condition, (state,), "condition")
    body_root = signature(body)[1]
    if not body_root.same_dims_and_type(state):
        fail(instr, f"while body '{body.name}' returns {body_root}, not the loop state {state}",
             expected=str(state))
    cond_root = signature(condition)[1]
    if not (isinstance(cond_root, ArrayShape) and cond_root.dtype == "pred" and not cond_root.dims):
        fail(instr, f"while condition '{condition.name}' returns {cond_root}", expected="pred[]")
    return state
