"""XLA's dot algorithms (``algorithm=`` on a ``dot``): what the evaluator computes for each.

An algorithm names the type the products are taken in, the accumulation type and, for the
split ones, how many products of parts each product is made of (``xla_data.proto``'s
``PrecisionConfig.Algorithm``).  JAX writes one where asked (``precision=
jax.lax.DotAlgorithmPreset.BF16_BF16_F32_X3``) and on bf16 dots whose result it asks in f32.

* **Operand rounding** (:data:`OPERAND_ROUNDING_ALGORITHMS`): both operands rounded to the
  named type, the products summed in f32 (f64 for ``dot_f64_f64_f64``) and rounded once to the
  result type.  The 16-bit accumulators ``dot_bf16_bf16_bf16`` and ``dot_f16_f16_f16`` name
  are a floor here, not a promise: an f32 sum rounded once is at least as exact, and the order
  of a 16-bit sum's roundings is unspecified anyway.
* **bf16 splits** (:data:`SPLIT_ALGORITHMS`, f32 operands): each operand is written as a sum
  of two (``_x3``) or three (``_x6``, ``_x9``) bf16 values, as XLA:GPU's
  ``DotAlgorithmRewriter`` splits it: every part but the last is the remainder truncated to
  bf16's bits, the last one the remainder rounded to bf16.  The products of the named pairs of
  parts (exact in f32) are summed in XLA's order, smallest first; a NaN in that sum becomes 0
  (``inf * 0`` from a zero low part must not hide an infinite high product), and the product
  of the high parts is added last.
* **As computed** (:data:`PLAIN_ALGORITHMS`): ``dot_f32_f32_f32`` and the fp8 ones are the
  plain dot; the TF32 ones are computed exactly, as on XLA:CPU (a TF32 check allows for
  TF32's rounding: ``triton_backend.host.output_check``).

(``fusion.evaluator.dot_ops`` computes them.)

>>> sorted(SPLIT_ALGORITHMS)[0], OPERAND_ROUNDING_ALGORITHMS["dot_bf16_bf16_f32"]
('dot_bf16_bf16_f32_x3', 'bf16')
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

#: Algorithms that round both operands to one type (named here) and sum the products in
#: f32 or wider (``fusion.transforms.dot_operand_rounding`` writes them so).
OPERAND_ROUNDING_ALGORITHMS: dict[str, str] = {
    "dot_bf16_bf16_bf16": "bf16",
    "dot_bf16_bf16_f32": "bf16",
    "dot_f16_f16_f16": "f16",
    "dot_f16_f16_f32": "f16",
    "dot_f64_f64_f64": "f64",
}

#: The bf16 split algorithms: ``(parts per operand, pairs of (lhs part, rhs part) summed before
#: the high parts' product, in XLA's order)``; part 0 is the high one.
SPLIT_ALGORITHMS: dict[str, tuple[int, tuple[tuple[int, int], ...]]] = {
    "dot_bf16_bf16_f32_x3": (2, ((1, 0), (0, 1))),
    "dot_bf16_bf16_f32_x6": (3, ((1, 1), (0, 2), (2, 0), (0, 1), (1, 0))),
    "dot_bf16_bf16_f32_x9": (3, ((2, 2), (1, 2), (2, 1), (1, 1), (2, 0), (0, 2), (1, 0),
                                 (0, 1))),
}

#: Algorithms whose dot the evaluator computes as it computes a dot without one.
PLAIN_ALGORITHMS: frozenset[str] = frozenset({
    "dot_any_f8_any_f8_f32",
    "dot_any_f8_any_f8_f32_fast_accum",
    "dot_f32_f32_f32",
    "dot_tf32_tf32_f32",
    "dot_tf32_tf32_f32_x3",
})

#: Every algorithm name the evaluator knows.
KNOWN_ALGORITHMS: frozenset[str] = frozenset(OPERAND_ROUNDING_ALGORITHMS) \
    | frozenset(SPLIT_ALGORITHMS) | PLAIN_ALGORITHMS

_HIGH_BITS = np.uint32(0xFFFF0000)


def bf16_parts(x: np.ndarray, parts: int) -> list[np.ndarray]:
    """f32 ``x`` as ``parts`` bf16 values held in f32, high part first (module docstring).

    >>> [float(p[0]) for p in bf16_parts(np.float32([1 + 2**-9 + 2**-17]), 3)]
    [1.0, 0.001953125, 7.62939453125e-06]
    """
    rest, out = np.asarray(x, np.float32), []
    with np.errstate(invalid="ignore"):
        for _ in range(parts - 1):
            high = (rest.view(np.uint32) & _HIGH_BITS).view(np.float32)
            out.append(high)
            rest = rest - high
    out.append(rest.astype(ml_dtypes.bfloat16).astype(np.float32))
    return out


__all__ = ["KNOWN_ALGORITHMS", "OPERAND_ROUNDING_ALGORITHMS", "PLAIN_ALGORITHMS",
           "SPLIT_ALGORITHMS", "bf16_parts"]
