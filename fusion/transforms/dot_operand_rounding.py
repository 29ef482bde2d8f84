"""Dot algorithms that only round the operands, written as the conversions they are.

XLA's ``algorithm=dot_bf16_bf16_f32`` (``dot_f16_f16_f32``) multiplies operands rounded to
bf16 (f16) and accumulates in f32.  JAX writes it on every bf16 dot whose result it asks in
f32 (``jax.nn.dot_product_attention``'s scores, ``preferred_element_type=f32``), where the
operands are bf16 already.  Such a dot is the same value as the dot of the rounded operands
with no algorithm, which every template multiplies as it does any bf16 dot: this rewrites it
so, a ``convert`` per operand of another type.  Other algorithms are left as they are.

>>> from fusion.text.parser import parse_hlo
>>> from fusion.text.printer import print_computation
>>> m = parse_hlo('''HloModule m
... ENTRY e {
...   a = f32[2,3] parameter(0)
...   b = bf16[3,4] parameter(1)
...   ROOT d = f32[2,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, algorithm=dot_bf16_bf16_f32
... }''')
>>> print(print_computation(round_dot_operands(m).entry))
ENTRY e {
  a = f32[2,3] parameter(0)
  b = bf16[3,4] parameter(1)
  d.bf16 = bf16[2,3] convert(a)
  ROOT d = f32[2,4] dot(d.bf16, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""
from __future__ import annotations

from dataclasses import replace

from fusion.ir.hlo_module import HloComputation, HloModule
from fusion.evaluator.dot_algorithms import OPERAND_ROUNDING_ALGORITHMS
from fusion.ir.shape import ArrayShape
from fusion.transforms.naming import fresh_name


_FLOATS = ("f16", "bf16", "f32", "f64")


def round_dot_operands(module: HloModule) -> HloModule:
    """``module`` with every dot of an :data:`OPERAND_ROUNDING_ALGORITHMS` algorithm (float
    operands) written as converts and a plain dot; ``module`` itself when there is none."""
    taken = {i.name for c in module.computations for i in c.instructions}
    comps = tuple(_rounded(c, taken) for c in module.computations)
    if all(new is old for new, old in zip(comps, module.computations)):
        return module
    return replace(module, computations=comps)


def _rounded(comp: HloComputation, taken: set[str]) -> HloComputation:
    out = []
    changed = False
    for instr in comp.instructions:
        target = OPERAND_ROUNDING_ALGORITHMS.get(str(instr.attr("algorithm", "")))
        shapes = [comp.instruction(o).shape for o in instr.operands]
        if instr.opcode != "dot" or target is None or not all(
                isinstance(s, ArrayShape) and s.dtype in _FLOATS for s in shapes):
            out.append(instr)
            continue
        operands = []
        for operand, shape in zip(instr.operands, shapes):
            if shape.dtype != target:
                name = fresh_name(f"{instr.name}.{target}", taken)
                out.append(instr.replace(name=name, opcode="convert",
                                         shape=ArrayShape(target, shape.dims),
                                         operands=(operand,), attributes=()))
                operand = name
            operands.append(operand)
        out.append(instr.replace(operands=tuple(operands), attributes=tuple(
            (k, v) for k, v in instr.attributes if k != "algorithm")))
        changed = True
    return replace(comp, instructions=tuple(out)) if changed else comp


__all__ = ["OPERAND_ROUNDING_ALGORITHMS", "round_dot_operands"]
