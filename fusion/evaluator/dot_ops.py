"""The ``dot`` rule: general dot with any batch and contracting dims.

Result dims are ordered batch, lhs free, rhs free.  Narrow floats are accumulated in f32 and
rounded once to the result type; integers are multiplied and accumulated in the result type
(so s8 x s8 -> s32 is exact, and overflow wraps as in XLA).

>>> a = np.arange(6, dtype=np.int8).reshape(2, 3)
>>> dot_general(a, a, ((1,), (1,)), ((), ()), np.dtype(np.int32)).tolist()
[[5, 14], [14, 50]]
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from fusion.evaluator.failures import op_error
from fusion.evaluator.numerics import is_float_dtype, is_narrow_float, numpy_dtype
from fusion.ir.shape import ArrayShape


def dot_general(
    lhs: np.ndarray,
    rhs: np.ndarray,
    contracting: tuple[tuple[int, ...], tuple[int, ...]],
    batch: tuple[tuple[int, ...], tuple[int, ...]],
    result_dtype: np.dtype,
) -> np.ndarray:
    """``dot`` with XLA's dimension numbers, computed in the accumulation type."""
    (lhs_contract, rhs_contract), (lhs_batch, rhs_batch) = contracting, batch
    lhs_free = [d for d in range(lhs.ndim) if d not in lhs_contract and d not in lhs_batch]
    rhs_free = [d for d in range(rhs.ndim) if d not in rhs_contract and d not in rhs_batch]
    batch_dims = [lhs.shape[d] for d in lhs_batch]
    lhs_free_dims = [lhs.shape[d] for d in lhs_free]
    rhs_free_dims = [rhs.shape[d] for d in rhs_free]
    contract_size = math.prod(lhs.shape[d] for d in lhs_contract)
    accumulate = np.dtype(np.float32) if is_narrow_float(result_dtype) else result_dtype
    if result_dtype == np.bool_:
        accumulate = np.dtype(np.int64)
    left = np.transpose(lhs, list(lhs_batch) + lhs_free + list(lhs_contract)).astype(accumulate)
    right = np.transpose(rhs, list(rhs_batch) + list(rhs_contract) + rhs_free).astype(accumulate)
    batch_size = math.prod(batch_dims)
    left = left.reshape(batch_size, math.prod(lhs_free_dims), contract_size)
    right = right.reshape(batch_size, contract_size, math.prod(rhs_free_dims))
    product = np.matmul(left, right)
    if result_dtype == np.bool_:
        product = product != 0
    return product.reshape(batch_dims + lhs_free_dims + rhs_free_dims)


def eval_dot(ev: Any, instr: Any, args: list) -> np.ndarray:
    lhs, rhs = args
    contracting = (
        tuple(instr.attr("lhs_contracting_dims", ())),
        tuple(instr.attr("rhs_contracting_dims", ())),
    )
    batch = (tuple(instr.attr("lhs_batch_dims", ())), tuple(instr.attr("rhs_batch_dims", ())))
    for dims, operand, side in ((contracting[0] + batch[0], lhs, "lhs"),
                                (contracting[1] + batch[1], rhs, "rhs")):
        if any(not 0 <= d < operand.ndim for d in dims) or len(set(dims)) != len(dims):
            raise op_error(instr, f"bad {side} batch/contracting dims for rank {operand.ndim}")
    if len(contracting[0]) != len(contracting[1]) or len(batch[0]) != len(batch[1]):
        raise op_error(instr, "lhs and rhs have different numbers of batch or contracting dims")
    rounded = OPERAND_ROUNDING_ALGORITHMS.get(str(instr.attr("algorithm", "")))
    if rounded is not None and all(is_float_dtype(a.dtype) for a in (lhs, rhs)):
        # the algorithm multiplies the operands rounded to its type, accumulating in f32
        to = numpy_dtype(ArrayShape(rounded, ()))
        lhs, rhs = (a.astype(to) for a in (lhs, rhs))
    return dot_general(lhs, rhs, contracting, batch, numpy_dtype(instr.array_shape))


#: XLA's dot algorithms that round both operands to one type (named here) and accumulate
#: the products in f32 (``fusion.transforms.dot_operand_rounding`` writes them so).
OPERAND_ROUNDING_ALGORITHMS: dict[str, str] = {
    "dot_bf16_bf16_f32": "bf16",
    "dot_f16_f16_f32": "f16",
}


DOT_RULES: dict[str, Callable[..., Any]] = {
    "dot": eval_dot,
}
