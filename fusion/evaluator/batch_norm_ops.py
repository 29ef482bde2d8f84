"""The batch-norm ops (``tf.nn.fused_batch_norm``, Keras' fused ``BatchNormalization``), as
the plain ops XLA's ``BatchNormExpander`` writes them: XLA defines their values by that
expansion, on CPU and GPU alike.

Over ``N`` = the elements per feature (every dim but ``feature_index``), in the operand's type:

* training: ``mean = sum(x) / N``, ``var = sum(x * x) / N - mean * mean`` (E[x^2] - E[x]^2,
  as XLA computes it), ``y = (x - mean) * rsqrt(var + eps) * scale + offset``;
* inference: ``y = x * s + (offset - mean * s)`` with ``s = scale * rsqrt(var + eps)``;
* grad: ``grad_offset = sum(dy)``, ``grad_scale = sum(dy * (x - mean)) * rsqrt(var + eps)``,
  ``grad_x = (scale * rsqrt(var + eps) / N) * (N * dy - grad_offset - (x - mean) *
  sum(dy * (x - mean)) / (var + eps))``.

:func:`batch_norm_instructions` writes those ops; the evaluator runs them
(``eval_batch_norm``) and ``fusion.transforms.batch_norm_expansion`` puts them in the module,
so the evaluator and the compiled module compute the same ops.  The tests hold both to
NumPy's f64 formulas and to XLA running the op itself.

>>> import numpy as np
>>> from fusion.text.parser import parse_hlo
>>> from fusion.evaluator import evaluate
>>> m = parse_hlo('''HloModule m
... ENTRY e {
...   x = f32[4,2] parameter(0)
...   s = f32[2] parameter(1)
...   o = f32[2] parameter(2)
...   ROOT b = (f32[4,2], f32[2], f32[2]) batch-norm-training(x, s, o), epsilon=0, feature_index=1
... }''')
>>> x = np.float32([[1, 0], [3, 0], [5, 2], [7, 2]])
>>> y, mean, var = evaluate(m, x, np.float32([1, 1]), np.float32([0, 10]))
>>> mean.tolist(), var.tolist(), y[:, 1].tolist()
([4.0, 1.0], [5.0, 1.0], [9.0, 9.0, 11.0, 11.0])
"""
from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule, binary_computation
from fusion.ir.instruction_writer import InstructionWriter
from fusion.ir.shape import ArrayShape, TupleShape


class _Writer(InstructionWriter):
    """The batch-norm op's instructions, with the per-feature helpers its formulas use."""

    def __init__(self, instr: HloInstruction, fresh: Callable[[], str], x: ArrayShape) -> None:
        super().__init__(instr, fresh)
        self.x = x
        self.feature = instr.attr("feature_index")
        self.per_feature = ArrayShape(x.dtype, (x.dims[self.feature],))

    def count(self, shape: ArrayShape) -> str:
        """N, the elements per feature, as XLA writes it: an s32 converted to the type."""
        n = math.prod(d for i, d in enumerate(self.x.dims) if i != self.feature)
        scalar = self.add("convert", ArrayShape(self.x.dtype, ()), (self.scalar(n, "s32"),))
        return self.add("broadcast", shape, (scalar,), dimensions=())

    def binary(self, opcode: str, a: str, b: str, shape: ArrayShape) -> str:
        return self.add(opcode, shape, (a, b))

    def spread(self, per_feature: str) -> str:
        return self.add("broadcast", self.x, (per_feature,), dimensions=(self.feature,))

    def total(self, x: str, reducer: str) -> str:
        kept = tuple(d for d in range(self.x.rank) if d != self.feature)
        return self.add("reduce", self.per_feature, (x, self.scalar(0.0, self.x.dtype)),
                        dimensions=kept, to_apply=reducer)


def batch_norm_instructions(instr: HloInstruction, x: ArrayShape, fresh: Callable[[], str],
                            reducer: str) -> list[HloInstruction]:
    """The ops computing ``instr`` (a batch-norm op whose operand 0 has shape ``x``), the last
    one named ``instr.name``; ``reducer`` names a scalar add computation of ``x``'s type."""
    w = _Writer(instr, fresh, x)
    eps = float(instr.attr("epsilon"))
    f, big = w.per_feature, x
    ops = instr.operands
    if instr.opcode == "batch-norm-training":
        operand, scale, offset = ops
        mean = w.binary("divide", w.total(operand, reducer), w.count(f), f)
        squares = w.binary("multiply", operand, operand, big)
        square_mean = w.binary("divide", w.total(squares, reducer), w.count(f), f)
        var = w.binary("subtract", square_mean, w.binary("multiply", mean, mean, f), f)
        rsqrt = w.add("rsqrt", big, (w.binary("add", w.spread(var), w.splat(eps, big), big),))
        centred = w.binary("subtract", operand, w.spread(mean), big)
        scaled = w.binary("multiply", w.binary("multiply", centred, rsqrt, big), w.spread(scale),
                          big)
        y = w.binary("add", scaled, w.spread(offset), big)
        outputs = (y, mean, var)
    elif instr.opcode == "batch-norm-inference":
        operand, scale, offset, mean, var = ops
        true_scale = w.binary("multiply", scale, w.add(
            "rsqrt", f, (w.binary("add", var, w.splat(eps, f), f),)), f)
        true_shift = w.binary("subtract", offset, w.binary("multiply", mean, true_scale, f), f)
        w.binary("add", w.binary("multiply", operand, w.spread(true_scale), big),
                 w.spread(true_shift), big)
        return w.named_last(instr.name)
    else:
        operand, scale, mean, var, dy = ops
        var_eps = w.binary("add", w.spread(var), w.splat(eps, big), big)
        rsqrt_big = w.add("rsqrt", big, (var_eps,))
        rsqrt = w.add("rsqrt", f, (w.binary("add", var, w.splat(eps, f), f),))
        centred = w.binary("subtract", operand, w.spread(mean), big)
        dy_centred = w.total(w.binary("multiply", dy, centred, big), reducer)
        grad_offset = w.total(dy, reducer)
        grad_scale = w.binary("multiply", dy_centred, rsqrt, f)
        i5 = w.binary("divide", w.binary("multiply", w.spread(dy_centred), centred, big),
                      var_eps, big)
        factor = w.binary("divide", w.binary("multiply", w.spread(scale), rsqrt_big, big),
                          w.count(big), big)
        i1 = w.binary("multiply", dy, w.count(big), big)
        i6 = w.binary("subtract", w.binary("subtract", i1, w.spread(grad_offset), big), i5, big)
        outputs = (w.binary("multiply", factor, i6, big), grad_scale, grad_offset)
    w.out.append(HloInstruction(instr.name, "tuple", TupleShape((big, f, f)), outputs,
                                location=instr.location))
    return w.out


def eval_batch_norm(ev: Any, instr: HloInstruction, args: list) -> Any:
    x = ev.operand_shapes(instr)[0]
    names = (f"bn.{k}" for k in itertools.count())
    reducer = binary_computation("bn.add", "add", x.dtype)
    # One parameter per operand position (an operand may be repeated: scale == offset).
    params = tuple(HloInstruction(f"bn.p{k}", "parameter", s, (), (("parameter_number", k),))
                   for k, s in enumerate(ev.operand_shapes(instr)))
    inner = instr.replace(operands=tuple(p.name for p in params))
    body = params + tuple(batch_norm_instructions(inner, x, lambda: next(names), reducer.name))
    comp = HloComputation("bn.ops", body, instr.name)
    # An evaluator of the ops alone, of the running one's class (whose module imports this).
    return type(ev)(HloModule("bn", (reducer, comp), comp.name)).call(comp.name, args)


BATCH_NORM_RULES: dict[str, Callable[..., Any]] = {
    "batch-norm-grad": eval_batch_norm,
    "batch-norm-inference": eval_batch_norm,
    "batch-norm-training": eval_batch_norm,
}

__all__ = ["BATCH_NORM_RULES", "batch_norm_instructions", "eval_batch_norm"]
