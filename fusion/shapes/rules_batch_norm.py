"""Shape rules of the batch-norm ops (XLA's ``ShapeInference::InferBatchNorm*Shape``).

Every operand is a float array of one element type: the activations ``x`` of rank >= 1, and
per-feature vectors of ``x.dims[feature_index]`` elements (scale, offset, mean, variance);
``batch-norm-grad``'s output gradient has ``x``'s shape.

* ``batch-norm-training(x, scale, offset)`` -> ``(y, batch_mean, batch_var)``;
* ``batch-norm-inference(x, scale, offset, mean, variance)`` -> ``y``;
* ``batch-norm-grad(x, scale, mean, variance, grad_y)`` -> ``(grad_x, grad_scale,
  grad_offset)``.

>>> from fusion.ir.hlo_module import HloInstruction
>>> x, f = ArrayShape("f32", (2, 3, 5)), ArrayShape("f32", (3,))
>>> bn = HloInstruction("b", "batch-norm-training", x, ("x", "s", "o"),
...                     (("epsilon", 0.001), ("feature_index", 1)))
>>> str(shape_batch_norm_training(bn, (x, f, f), None))
'(f32[2,3,5], f32[3], f32[3])'
"""
from __future__ import annotations

from collections.abc import Sequence

from fusion.ir.hlo_module import HloInstruction, HloModule
from fusion.ir.shape import ArrayShape, Shape, TupleShape
from fusion.shapes.checks import expect_array, expect_kind, expect_operand_count, fail, int_attr

#: What each operand of each op is, in order ("x": the activations' shape; else per feature).
OPERANDS = {
    "batch-norm-grad": ("operand", "scale", "mean", "variance", "grad_output"),
    "batch-norm-inference": ("operand", "scale", "offset", "mean", "variance"),
    "batch-norm-training": ("operand", "scale", "offset"),
}


def _checked(instr: HloInstruction, operands: Sequence[Shape]) -> tuple[ArrayShape, ArrayShape]:
    """The activations' shape and the per-feature shape, after checking every operand."""
    names = OPERANDS[instr.opcode]
    expect_operand_count(instr, operands, len(names))
    arrays = [expect_array(instr, s, n) for s, n in zip(operands, names)]
    x = arrays[0]
    if x.rank < 1:
        fail(instr, f"{instr.opcode} needs an operand of rank >= 1, got {x}")
    expect_kind(instr, x, "float", "operand")
    feature = int_attr(instr, "feature_index")
    if not 0 <= feature < x.rank:
        fail(instr, f"feature_index {feature} is out of range for the operand {x}",
             expected=f"0 <= feature_index < {x.rank}")
    epsilon = instr.attr("epsilon", None)
    if not isinstance(epsilon, float):
        fail(instr, f"{instr.opcode} needs a number attribute 'epsilon', got {epsilon}")
    per_feature = ArrayShape(x.dtype, (x.dims[feature],))
    for shape, name in zip(arrays[1:], names[1:]):
        want = x if name == "grad_output" else per_feature
        if shape.dtype != want.dtype or shape.dims != want.dims:
            fail(instr, f"{name} of {instr.opcode} is {shape}", expected=str(want))
    return ArrayShape(x.dtype, x.dims), per_feature


def shape_batch_norm_grad(instr: HloInstruction, operands: Sequence[Shape],
                          module: HloModule | None) -> Shape:
    x, per_feature = _checked(instr, operands)
    return TupleShape((x, per_feature, per_feature))


def shape_batch_norm_inference(instr: HloInstruction, operands: Sequence[Shape],
                               module: HloModule | None) -> Shape:
    x, _ = _checked(instr, operands)
    return x


def shape_batch_norm_training(instr: HloInstruction, operands: Sequence[Shape],
                              module: HloModule | None) -> Shape:
    x, per_feature = _checked(instr, operands)
    return TupleShape((x, per_feature, per_feature))


__all__ = ["OPERANDS", "shape_batch_norm_grad", "shape_batch_norm_inference",
           "shape_batch_norm_training"]
