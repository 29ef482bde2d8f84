"""Scaled dots (``fusion.analysis.scaled_dots``: the ``scaled-dot`` op and the
``__op$block_scaled_dot`` custom-call) written as the ops XLA's ``ScaledDotRewriter`` and
``BlockScalingRewriter`` write: each side converted to its dequantize type and multiplied by
its scale, broadcast over a new block dim after each scaled dim and reshaped to the
operand's dims; the sides converted to the dot's operand type; a plain ``dot`` in the dot's
type, converted to the result type.  The fusion pass judges the dequantization as any dot
prologue: inside the dot's kernel, reading the narrow operand once, where the dot computes
it few times (the weights of a small batch: a decoding step is one kernel), else a kernel of
its own.  A module without scaled dots is returned as is.

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... ENTRY e {
...   a = f8e4m3fn[4,64] parameter(0)
...   b = f8e4m3fn[8,64] parameter(1)
...   sa = f8e8m0fnu[4,2] parameter(2)
...   sb = f8e8m0fnu[8,2] parameter(3)
...   ROOT d = f32[4,8] scaled-dot(a, b, sa, sb), lhs_contracting_dims={1}, rhs_contracting_dims={1}
... }''')
>>> ops = [(i.opcode, str(i.shape)) for i in expand_scaled_dots(m).entry]
>>> ops[4:9]  # doctest: +NORMALIZE_WHITESPACE
[('convert', 'bf16[4,64]'), ('convert', 'bf16[4,2]'), ('broadcast', 'bf16[4,2,32]'),
 ('reshape', 'bf16[4,64]'), ('multiply', 'bf16[4,64]')]
>>> expand_scaled_dots(m).entry.root.opcode
'dot'
"""
from __future__ import annotations

from fusion.analysis.scaled_dots import ScaledDot, is_block_scaled_dot_call, scaled_dot
from fusion.ir.hlo_module import HloInstruction, HloModule
from fusion.ir.instruction_writer import InstructionWriter
from fusion.ir.shape import ArrayShape
from fusion.transforms.op_expansion import expand_ops


def expand_scaled_dots(module: HloModule) -> HloModule:
    """``module`` with every scaled dot written as plain ops (module docstring); an invalid
    one is an ``HloVerifyError`` located at it."""
    return expand_ops(module, ("custom-call", "scaled-dot"), _write, "sd")


def _write(ops: InstructionWriter, instr: HloInstruction, shapes: tuple, adder) -> bool:
    if instr.opcode == "custom-call" and not is_block_scaled_dot_call(instr):
        return False
    sd = scaled_dot(instr, shapes)
    sides = tuple(_convert(ops, _dequantized(ops, sd, instr, side, shapes), sd.operand_type,
                           ArrayShape(sd.dequantize[side], shapes[side].dims))
                  for side in (0, 1))
    dot = ops.add("dot", ArrayShape(sd.dot_type, sd.result.dims), sides,
                  **sd.dot_attributes(instr))
    if sd.dot_type != sd.result.dtype:
        ops.add("convert", sd.result, (dot,))
    return True


def _dequantized(ops: InstructionWriter, sd: ScaledDot, instr: HloInstruction, side: int,
                 shapes: tuple) -> str:
    """Side ``side`` in its dequantize type, times its scale repeated over its blocks."""
    dtype, scale_index, blocks = sd.dequantize[side], sd.scales[side], sd.blocks[side]
    operand = shapes[side]
    value = _convert(ops, instr.operands[side], dtype, operand)
    if scale_index is None:
        return value
    scale = _convert(ops, instr.operands[scale_index], dtype, shapes[scale_index])
    at = ArrayShape(dtype, operand.dims)
    if blocks is None:  # a scalar scale
        scale = ops.add("broadcast", at, (scale,), dimensions=())
    elif any(b != 1 for b in blocks):
        dims: list[int] = []
        kept: list[int] = []
        for size, block in zip(operand.dims, blocks):
            kept.append(len(dims))
            dims += [size // block] + ([block] if block != 1 else [])
        scale = ops.add("broadcast", ArrayShape(dtype, tuple(dims)), (scale,),
                        dimensions=tuple(kept))
        scale = ops.add("reshape", at, (scale,))
    return ops.add("multiply", at, (value, scale))


def _convert(ops: InstructionWriter, name: str, dtype: str, shape: ArrayShape) -> str:
    """``name`` (of ``shape``) converted to ``dtype``; itself when it already has it."""
    if shape.dtype == dtype:
        return name
    return ops.add("convert", ArrayShape(dtype, shape.dims), (name,))


__all__ = ["expand_scaled_dots"]
