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
from functools import reduce
from typing import Any, Callable

import numpy as np

from fusion.evaluator.dot_algorithms import (KNOWN_ALGORITHMS, OPERAND_ROUNDING_ALGORITHMS,
                                             PLAIN_ALGORITHMS, SPLIT_ALGORITHMS, bf16_parts)
from fusion.evaluator.failures import op_error
from fusion.evaluator.numerics import hlo_type_of, is_float_dtype, is_narrow_float, numpy_dtype
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
    algorithm = instr.attr("algorithm", None)
    if algorithm is None or str(algorithm) in PLAIN_ALGORITHMS:
        return dot_general(lhs, rhs, contracting, batch, numpy_dtype(instr.array_shape))
    algorithm = str(algorithm)
    if algorithm not in KNOWN_ALGORITHMS:
        raise op_error(instr, f"unknown dot algorithm {algorithm} (known: "
                              f"{', '.join(sorted(KNOWN_ALGORITHMS))})")
    if not all(is_float_dtype(a.dtype) for a in (lhs, rhs)):
        raise op_error(instr, f"dot algorithm {algorithm} takes float operands, not "
                              f"{lhs.dtype} and {rhs.dtype}")
    if algorithm in SPLIT_ALGORITHMS:
        if lhs.dtype != np.float32 or rhs.dtype != np.float32:
            types = " and ".join(hlo_type_of(a.dtype).name for a in (lhs, rhs))
            raise op_error(instr, f"dot algorithm {algorithm} splits f32 operands, not {types}")
        return split_dot(lhs, rhs, contracting, batch, algorithm).astype(
            numpy_dtype(instr.array_shape))
    # the algorithm multiplies the operands rounded to its type, accumulating in f32 or wider
    to = numpy_dtype(ArrayShape(OPERAND_ROUNDING_ALGORITHMS[algorithm], ()))
    return dot_general(lhs.astype(to), rhs.astype(to), contracting, batch,
                       numpy_dtype(instr.array_shape))


def split_dot(lhs: np.ndarray, rhs: np.ndarray,
              contracting: tuple[tuple[int, ...], tuple[int, ...]],
              batch: tuple[tuple[int, ...], tuple[int, ...]], algorithm: str) -> np.ndarray:
    """The f32 dot of f32 operands under a bf16 split algorithm (``SPLIT_ALGORITHMS``, whose
    module says how): about 16 of f32's 24 bits for ``_x3``, all of them for ``_x6``/``_x9``.

    ``x * x`` for ``x = 1 + 2**-9 + 2**-17`` is ``1 + 2**-8 + 2**-16 + 2**-18`` in f32 (and past
    it); ``_x3`` keeps ``1 + 2**-8``, in units of ``2**-18``:

    >>> x = np.float32([[1 + 2**-9 + 2**-17]])
    >>> [int((split_dot(x, x, ((1,), (0,)), ((), ()), f"dot_bf16_bf16_f32_x{n}")[0, 0] - 1)
    ...      * 2**18) for n in (3, 6, 9)]
    [1024, 1029, 1029]
    """
    parts, pairs = SPLIT_ALGORITHMS[algorithm]
    left, right = bf16_parts(lhs, parts), bf16_parts(rhs, parts)
    f32 = np.dtype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        small = reduce(np.add, [dot_general(left[i], right[j], contracting, batch, f32)
                                for i, j in pairs])
        small = np.where(np.isnan(small), np.float32(0), small)
        return small + dot_general(left[0], right[0], contracting, batch, f32)


DOT_RULES: dict[str, Callable[..., Any]] = {
    "dot": eval_dot,
}
