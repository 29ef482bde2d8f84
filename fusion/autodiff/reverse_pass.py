"""The reverse pass: a flat forward computation's cotangents, from its root back to its
parameters, one VJP rule per instruction.

The forward instructions are first copied into the backward computation (the rules read the
primal values they need; dead-code elimination later drops the others).  Only *active*
instructions, those depending on a differentiated parameter through floating-point values,
run a rule: an op with no rule on a path that carries no gradient is no error.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from fusion.autodiff.cotangents import Cotangent, accumulate, is_differentiable, is_zero, prune
from fusion.autodiff.graph_builder import GraphBuilder
from fusion.errors import UnsupportedOpError
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.ir.shape import ArrayShape, Shape

Rule = Callable[["VjpContext", HloInstruction, Cotangent], Sequence[Cotangent]]


@dataclass
class VjpContext:
    """What a VJP rule reads: the builder of the backward computation, the forward module
    (for called computations), the forward shapes and the backward names of primal values.

    ``differentiate`` is the reverse pass itself, for rules that differentiate a called
    computation (``conditional``).
    """

    b: GraphBuilder
    module: HloModule
    forward: HloComputation
    env: dict[str, str]
    differentiate: Callable[..., list[Cotangent]]
    active: set[str] = field(default_factory=set)

    def is_active(self, forward_name: str) -> bool:
        """Whether a forward value depends on a differentiated parameter."""
        return forward_name in self.active

    def value(self, forward_name: str) -> str:
        """The backward module's name of a forward value."""
        return self.env[forward_name]

    def operand(self, instr: HloInstruction, k: int) -> str:
        return self.env[instr.operands[k]]

    def out(self, instr: HloInstruction) -> str:
        return self.env[instr.name]

    def shape(self, forward_name: str) -> Shape:
        return self.forward.instruction(forward_name).shape

    def operand_shape(self, instr: HloInstruction, k: int) -> ArrayShape:
        shape = self.shape(instr.operands[k])
        assert isinstance(shape, ArrayShape)
        return shape


def copy_forward(b: GraphBuilder, comp: HloComputation, params: Sequence[str]) -> dict[str, str]:
    """Copy ``comp``'s instructions into ``b`` with parameter ``k`` read as ``params[k]``;
    returns forward name -> backward name."""
    env: dict[str, str] = {}
    for instr in comp.instructions:
        if instr.opcode == "parameter":
            env[instr.name] = params[instr.attr("parameter_number")]
        else:
            env[instr.name] = b.copy(instr, [env[o] for o in instr.operands])
    return env


def active_values(comp: HloComputation, params: set[int]) -> set[str]:
    """Instructions whose value depends, through floating-point values, on ``params``."""
    active: set[str] = set()
    for instr in comp.instructions:
        if not is_differentiable(instr.shape):
            continue
        if instr.opcode == "parameter":
            if instr.attr("parameter_number") in params:
                active.add(instr.name)
        elif any(o in active for o in instr.operands):
            active.add(instr.name)
    return active


def reverse(ctx: VjpContext, rules: dict[str, Rule], root_ct: Cotangent,
            params: set[int]) -> dict[int, Cotangent]:
    """The cotangent of each parameter in ``params`` given the root's cotangent ``root_ct``."""
    comp = ctx.forward
    active = active_values(comp, params)
    ctx.active = active
    cts: dict[str, Cotangent] = {comp.root_name: prune(root_ct, comp.root.shape)}
    out: dict[int, Cotangent] = {}
    for instr in reversed(comp.instructions):
        ct = cts.pop(instr.name, None)
        if instr.name not in active or is_zero(ct):
            continue
        if instr.opcode == "parameter":
            out[instr.attr("parameter_number")] = ct
            continue
        rule = rules.get(instr.opcode)
        if rule is None:
            raise UnsupportedOpError(
                f"no VJP rule for op {instr.opcode} (%{instr.name}); it lies on a path from a "
                "differentiated parameter to the result", **instr._located())
        operand_cts = rule(ctx, instr, ct)
        assert len(operand_cts) == len(instr.operands), f"vjp_{instr.opcode} arity"
        for operand, oct in zip(instr.operands, operand_cts):
            if operand in active and not is_zero(oct):
                oct = prune(oct, comp.instruction(operand).shape)
                cts[operand] = accumulate(ctx.b, cts.get(operand), oct)
    return out


def differentiate(b: GraphBuilder, module: HloModule, comp: HloComputation,
                  params: Sequence[str], root_ct_of: Callable[[], Cotangent],
                  wrt: set[int], rules: dict[str, Rule]) -> list[Cotangent]:
    """Copy the flat ``comp`` into ``b`` (parameters bound to ``params``), then run the
    reverse pass from the cotangent ``root_ct_of()`` returns (made after the copy, so that the
    forward values keep their names).  Returns one cotangent per parameter of ``comp``
    (``None`` for those not in ``wrt``)."""
    env = copy_forward(b, comp, params)

    def recurse(b2: GraphBuilder, comp2: HloComputation, params2: Sequence[str],
                root_ct_of2: Callable[[], Cotangent], wrt2: set[int]) -> list[Cotangent]:
        return differentiate(b2, module, comp2, params2, root_ct_of2, wrt2, rules)

    ctx = VjpContext(b, module, comp, env, recurse)
    got = reverse(ctx, rules, root_ct_of(), wrt)
    return [got.get(k) for k in range(len(params))]
