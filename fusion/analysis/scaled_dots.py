"""Scaled dots: a dot of block-scaled operands (the MX and NVFP4 formats: narrow values with
one scale per block of consecutive elements), as XLA computes them.  Two spellings:

* the HLO op ``scaled-dot(lhs, rhs, lhs_scale, rhs_scale)`` with a dot's dimension numbers
  (XLA:GPU makes it of the ``xla.scaled_dot`` composite ``jax.lax.scaled_dot`` lowers to).
  XLA's ``ScaledDotRewriter`` computes it: each operand and its scale converted to their
  common type (:func:`common_type`), the scale repeated over its block along every dim where
  it is smaller than the operand (a scalar scale is one block), the two multiplied; both
  sides converted to their common type; the dot computed in the common type of that and the
  result's, then converted to the result type;
* the custom-call ``__op$block_scaled_dot(lhs, rhs, lhs_scale[, rhs_scale])`` that
  ``jax.nn.scaled_matmul`` lowers to for CUDA: ``[b,] m, k`` times ``[b,] n, k``, the scales
  blocked along ``k`` only.  XLA's ``BlockScalingRewriter`` dequantizes each side in the
  backend config's ``dequantize_type`` (the result type, as JAX writes it) and computes the
  dot in the result type.

:class:`ScaledDot` holds what either computes; the shape rule (``shapes/rules_dot``), the
NumPy reference (``evaluator/scaled_dot_ops``) and the expansion the compiler runs
(``transforms/scaled_dot_expansion``) all read it.

>>> from fusion.ir.shape import ArrayShape
>>> i = HloInstruction("d", "scaled-dot", ArrayShape("f32", (4, 6)), ("a", "b", "sa", "sb"),
...     (("lhs_contracting_dims", (1,)), ("rhs_contracting_dims", (1,))))
>>> sd = scaled_dot(i, (ArrayShape("f8e4m3fn", (4, 64)), ArrayShape("f8e4m3fn", (6, 64)),
...                     ArrayShape("f8e8m0fnu", (4, 2)), ArrayShape("f8e8m0fnu", (6, 2))))
>>> sd.dequantize, sd.operand_type, sd.dot_type, sd.blocks
(('bf16', 'bf16'), 'bf16', 'f32', ((1, 32), (1, 32)))
"""
from __future__ import annotations

from dataclasses import dataclass

from fusion.analysis.custom_call_configs import backend_config_of
from fusion.errors import HloVerifyError
from fusion.ir.element_types import element_type
from fusion.ir.hlo_module import HloInstruction
from fusion.ir.shape import ArrayShape, Shape

#: The custom-call target of ``jax.nn.scaled_matmul`` on CUDA.
BLOCK_SCALED_DOT_TARGET = "__op$block_scaled_dot"

_PRECISION_ATTRIBUTES = ("algorithm", "operand_precision")

# backend_config's dequantize_type (XLA's PrimitiveType names) -> HLO type
_CONFIG_TYPES = {"BF16": "bf16", "F16": "f16", "F32": "f32", "F64": "f64"}


def is_block_scaled_dot_call(instr: HloInstruction) -> bool:
    """A custom-call to :data:`BLOCK_SCALED_DOT_TARGET`."""
    return (instr.opcode == "custom-call"
            and instr.attr("custom_call_target", None) == BLOCK_SCALED_DOT_TARGET)


def common_type(first: str, second: str) -> str:
    """The type XLA's ``ScaledDotRewriter`` brings two types to: bf16 when both are narrower
    than 16 bits, the type itself when they are equal, f32 for two types of one width, else
    the wider.

    >>> common_type("f8e4m3fn", "f8e8m0fnu"), common_type("bf16", "f16"), common_type("f32", "bf16")
    ('bf16', 'f32', 'f32')
    """
    a, b = element_type(first).bits, element_type(second).bits
    if a < 16 and b < 16:
        return "bf16"
    if first == second:
        return first
    if a == b:
        return "f32"
    return first if a > b else second


@dataclass(frozen=True)
class ScaledDot:
    """One scaled dot (module docstring).  ``scales``: the operand index of each side's scale
    (``None``: that side is not scaled); ``blocks``: per side, the block each scale element
    covers, per operand dim (``None`` for a scalar scale, which covers the whole operand);
    ``dequantize``: the type each side is scaled in; ``operand_type``: the dot's operand
    type; ``dot_type``: the type the dot computes, converted to ``result``'s at the end."""

    scales: tuple[int | None, int | None]
    blocks: tuple[tuple[int, ...] | None, tuple[int, ...] | None]
    lhs_contracting: tuple[int, ...]
    rhs_contracting: tuple[int, ...]
    lhs_batch: tuple[int, ...]
    rhs_batch: tuple[int, ...]
    dequantize: tuple[str, str]
    operand_type: str
    dot_type: str
    result: ArrayShape

    def dot_attributes(self, instr: HloInstruction) -> dict[str, object]:
        """The attributes of the dot of the dequantized sides: these dimension numbers and
        ``instr``'s precision config (XLA keeps it on the dot)."""
        kept = {k: v for k, v in instr.attributes if k in _PRECISION_ATTRIBUTES}
        return {"lhs_batch_dims": self.lhs_batch, "lhs_contracting_dims": self.lhs_contracting,
                "rhs_batch_dims": self.rhs_batch, "rhs_contracting_dims": self.rhs_contracting,
                **kept}


def scaled_dot(instr: HloInstruction, operands: tuple[Shape, ...] | list[Shape]) -> ScaledDot:
    """What the ``scaled-dot`` op or block-scaled-dot custom-call ``instr`` computes, given
    its operand shapes; ``HloVerifyError`` located at it when the operands do not fit."""
    if not all(isinstance(s, ArrayShape) for s in (*operands, instr.shape)):
        raise _error(instr, "takes and gives arrays, not tuples")
    result = instr.shape
    if instr.opcode == "scaled-dot":
        if len(operands) != 4:
            raise _error(instr, f"takes 4 operands (lhs, rhs, lhs_scale, rhs_scale), not "
                                f"{len(operands)}")
        dims = tuple(_dims(instr, name) for name in (
            "lhs_contracting_dims", "rhs_contracting_dims", "lhs_batch_dims", "rhs_batch_dims"))
        scales: tuple[int | None, int | None] = (2, 3)
        dequantize = tuple(common_type(operands[i].dtype, operands[i + 2].dtype) for i in (0, 1))
        operand_type = common_type(*dequantize)
        dot_type = common_type(operand_type, result.dtype)
    else:
        if len(operands) not in (3, 4):
            raise _error(instr, f"takes 3 or 4 operands (lhs, rhs, lhs_scale[, rhs_scale]), "
                                f"not {len(operands)}")
        rank = operands[0].rank
        if rank not in (2, 3) or operands[1].rank != rank:
            raise _error(instr, f"multiplies two operands of rank 2 or 3 ([b,] m, k and [b,] n, "
                                f"k), not {operands[0]} and {operands[1]}")
        batch = (0,) if rank == 3 else ()
        dims = ((rank - 1,), (rank - 1,), batch, batch)
        scales = (2, 3 if len(operands) == 4 else None)
        config = backend_config_of(instr, "scaled_dot_backend_config")
        named = str(config.get("dequantize_type", "")).upper()
        dequantize_type = _CONFIG_TYPES.get(named, result.dtype)
        dequantize = (dequantize_type, dequantize_type)
        operand_type = dot_type = result.dtype
    blocks = tuple(_blocks(instr, side, operands[i], operands[s] if s is not None else None,
                           only_minor=instr.opcode != "scaled-dot")
                   for side, i, s in (("lhs", 0, scales[0]), ("rhs", 1, scales[1])))
    return ScaledDot(scales, blocks, *dims, dequantize, operand_type, dot_type, result)


def _blocks(instr: HloInstruction, side: str, operand: ArrayShape, scale: ArrayShape | None,
            only_minor: bool) -> tuple[int, ...] | None:
    if scale is None:
        return tuple(1 for _ in operand.dims)
    if scale.rank == 0 and not only_minor:
        return None
    if scale.rank != operand.rank:
        raise _error(instr, f"the {side} scale {scale} needs the rank of the {side} {operand}")
    blocks = []
    for d, (size, scaled) in enumerate(zip(operand.dims, scale.dims)):
        if scaled == 0 or size % scaled or (only_minor and d < operand.rank - 1 and size != scaled):
            rule = ("its dims equal the operand's but the last, which divides it" if only_minor
                    else "each of its dims divides the operand's")
            raise _error(instr, f"the {side} scale {scale} does not fit the {side} {operand}: "
                                f"{rule} (dim {d}: {scaled} against {size})")
        blocks.append(size // scaled)
    return tuple(blocks)


def _dims(instr: HloInstruction, key: str) -> tuple[int, ...]:
    value = instr.attr(key, ())
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _error(instr: HloInstruction, why: str) -> HloVerifyError:
    what = (instr.opcode if instr.opcode == "scaled-dot"
            else f"custom-call {BLOCK_SCALED_DOT_TARGET}")
    return HloVerifyError(f"{what} ({instr.name}): {why}", **instr._located())


__all__ = ["BLOCK_SCALED_DOT_TARGET", "ScaledDot", "common_type", "is_block_scaled_dot_call",
           "scaled_dot"]
