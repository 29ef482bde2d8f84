"""``stochastic-convert`` written as the elementwise ops XLA's ``StochasticConvertDecomposer``
writes before fusion: the magnitude's integer part (``floor(|x|)``), plus one where the
random bits are below the fraction scaled by ``2**bits`` (the fraction of an ``f16`` scaled in
``f32``), the sign put back, and operands past the target's range clamped to its min and max.
They fuse with their readers as any elementwise ops (``fusion.evaluator.conversion_ops``
computes the same formula directly).  A module without it is returned as is.

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... ENTRY e {
...   x = f32[4] parameter(0)
...   r = u32[4] parameter(1)
...   ROOT y = s8[4] stochastic-convert(x, r)
... }''')
>>> ops = [i.opcode for i in expand_stochastic_converts(m).entry]
>>> "stochastic-convert" in ops, ops.count("floor"), ops[-1]
(False, 1, 'select')
"""
from __future__ import annotations

from fusion.ir.element_types import element_type
from fusion.ir.hlo_module import HloInstruction, HloModule
from fusion.ir.instruction_writer import InstructionWriter
from fusion.ir.shape import ArrayShape
from fusion.transforms.op_expansion import expand_ops


def expand_stochastic_converts(module: HloModule) -> HloModule:
    """``module`` with every ``stochastic-convert`` written as plain ops (module docstring);
    an invalid one is an ``HloVerifyError`` located at it."""
    return expand_ops(module, "stochastic-convert", _write, "sc")


def _write(ops: InstructionWriter, instr: HloInstruction, shapes: tuple, adder) -> None:
    operand, bits = instr.operands
    x, random = shapes
    dims = x.dims
    floats, target = ArrayShape(x.dtype, dims), ArrayShape(instr.shape.dtype, dims)
    test = ArrayShape("pred", dims)

    def like(shape: ArrayShape, value: float | int) -> str:
        return ops.splat(value, shape)

    negative = ops.add("compare", test, (ops.add("sign", floats, (operand,)), like(floats, 0)),
                       direction="LT")
    magnitude = ops.add("abs", floats, (operand,))
    whole = ops.add("floor", floats, (magnitude,))
    fraction = ops.add("subtract", floats, (magnitude, whole))
    scaled_type = floats if x.dtype != "f16" else ArrayShape("f32", dims)
    if x.dtype == "f16":  # 2**16 is past f16's range
        fraction = ops.add("convert", scaled_type, (fraction,))
    scaled = ops.add("multiply", scaled_type,
                     (fraction, like(scaled_type, 2.0 ** element_type(random.dtype).bits)))
    up = ops.add("compare", test, (bits, ops.add("convert", random, (scaled,))), direction="LT")
    value = ops.add("convert", target, (whole,))
    value = ops.add("select", target, (up, ops.add("add", target, (value, like(target, 1))),
                                       value))
    value = ops.add("select", target, (negative, ops.add("negate", target, (value,)), value))
    width = element_type(target.dtype).bits
    for direction, bound in (("LE", -2 ** (width - 1)), ("GE", 2 ** (width - 1) - 1)):
        past = ops.add("compare", test, (operand, like(floats, float(bound))),
                       direction=direction)
        value = ops.add("select", target, (past, like(target, bound), value))


__all__ = ["expand_stochastic_converts"]
