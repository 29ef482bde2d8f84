"""``scaled-dot`` and the ``__op$block_scaled_dot`` custom-call (``fusion.analysis.scaled_dots``):
each side converted to its dequantize type and multiplied by its scale, every scale element
repeated over its block (``np.repeat`` per dim); then the dot of the two sides in the dot's
type, converted to the result type.

>>> import ml_dtypes
>>> from fusion.text.parser import parse_hlo
>>> from fusion.evaluator import evaluate
>>> m = parse_hlo('''HloModule m
... ENTRY e {
...   a = f8e4m3fn[1,4] parameter(0)
...   b = f8e4m3fn[1,4] parameter(1)
...   sa = f8e8m0fnu[1,2] parameter(2)
...   sb = f8e8m0fnu[1,1] parameter(3)
...   ROOT d = f32[1,1] scaled-dot(a, b, sa, sb), lhs_contracting_dims={1}, rhs_contracting_dims={1}
... }''')
>>> ones = np.ones((1, 4), ml_dtypes.float8_e4m3fn)
>>> scales = np.array([[2, 8]], ml_dtypes.float8_e8m0fnu)
>>> float(evaluate(m, ones, ones, scales, np.array([[1]], ml_dtypes.float8_e8m0fnu))[0][0, 0])
20.0
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from fusion.analysis.scaled_dots import scaled_dot
from fusion.evaluator.conversion_ops import eval_convert
from fusion.evaluator.dot_ops import eval_dot
from fusion.ir.shape import ArrayShape


def eval_scaled_dot(ev: Any, instr: Any, args: list) -> np.ndarray:
    sd = scaled_dot(instr, ev.operand_shapes(instr))

    def convert(x: np.ndarray, dtype: str) -> np.ndarray:
        return eval_convert(ev, instr.replace(opcode="convert", shape=ArrayShape(dtype, x.shape)),
                            [x])

    sides = []
    for side, (blocks, scale_index, dtype) in enumerate(zip(sd.blocks, sd.scales, sd.dequantize)):
        value = convert(args[side], dtype)
        if scale_index is not None:
            scale = convert(args[scale_index], dtype)
            if blocks is None:
                scale = np.broadcast_to(scale, value.shape)
            for dim, block in enumerate(blocks or ()):
                scale = np.repeat(scale, block, axis=dim)
            value = value * scale
        sides.append(convert(value, sd.operand_type))
    dot = instr.replace(opcode="dot", operands=instr.operands[:2],
                        shape=ArrayShape(sd.dot_type, sd.result.dims),
                        attributes=tuple(sd.dot_attributes(instr).items()))
    return convert(eval_dot(ev, dot, sides), sd.result.dtype)


SCALED_DOT_RULES: dict[str, Callable[..., Any]] = {"scaled-dot": eval_scaled_dot}

__all__ = ["SCALED_DOT_RULES", "eval_scaled_dot"]
