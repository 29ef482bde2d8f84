"""Elementwise rules whose integer semantics are XLA's own, not NumPy's.

XLA's integer division truncates toward zero, defines ``x / 0 = -1`` (all ones for unsigned),
``x % 0 = x``, ``INT_MIN / -1 = INT_MIN`` and ``INT_MIN % -1 = 0``; shift amounts are read as
unsigned and an amount of at least the bit width gives 0 (sign fill for arithmetic shifts).
``power`` uses only the low 6 bits of the exponent, as XLA's emitter does.

>>> _int_divide(np.array([7, -7, 7, -128], np.int8), np.array([2, 2, 0, -1], np.int8)).tolist()
[3, -3, -1, -128]
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from fusion.evaluator.complex_division import divide as divide_floats
from fusion.evaluator.numerics import int_bits, signed_twin, unsigned_twin, widen


def _is_integer(array: np.ndarray) -> bool:
    return array.dtype.kind in "iu"


def _division_guards(lhs: np.ndarray, rhs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(rhs is zero, the op overflows) masks."""
    zero = rhs == 0
    if lhs.dtype.kind == "i":
        overflow = (lhs == np.iinfo(lhs.dtype).min) & (rhs == -1)
    else:
        overflow = np.zeros(np.broadcast_shapes(lhs.shape, rhs.shape), bool)
    return zero, overflow


def _int_divide(lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    zero, overflow = _division_guards(lhs, rhs)
    safe_rhs = np.where(zero | overflow, np.ones((), rhs.dtype), rhs)
    # fmod is C's truncating remainder, so lhs - fmod is an exact multiple of rhs.
    quotient = (lhs - np.fmod(lhs, safe_rhs)) // safe_rhs
    all_ones = np.array(-1).astype(lhs.dtype) if lhs.dtype.kind == "i" else np.array(
        np.iinfo(lhs.dtype).max, lhs.dtype
    )
    quotient = np.where(zero, all_ones, quotient)
    return np.where(overflow, lhs, quotient).astype(lhs.dtype)


def _int_remainder(lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    zero, overflow = _division_guards(lhs, rhs)
    safe_rhs = np.where(zero | overflow, np.ones((), rhs.dtype), rhs)
    remainder = np.fmod(lhs, safe_rhs)
    remainder = np.where(overflow, np.zeros((), lhs.dtype), remainder)
    return np.where(zero, lhs, remainder).astype(lhs.dtype)


#: How many exponent bits XLA's integer power looks at (its squaring loop is unrolled 6 times).
_POWER_EXPONENT_BITS = 6


def _int_power(base: np.ndarray, exponent: np.ndarray) -> np.ndarray:
    base, exponent = np.broadcast_arrays(base, exponent)
    dtype = base.dtype
    accumulator = np.ones(base.shape, dtype)
    square = base.astype(dtype, copy=True)
    remaining = exponent.astype(unsigned_twin(exponent.dtype))
    one = np.ones((), remaining.dtype)
    # XLA's EmitIntegerPow squares exactly 6 times: only the low 6 bits of the exponent
    # count (3 ** 64 == 1 on XLA:CPU), whatever the width.
    for _ in range(_POWER_EXPONENT_BITS):
        odd = (remaining & one) == one
        accumulator = np.where(odd, accumulator * square, accumulator).astype(dtype)
        square = (square * square).astype(dtype)
        remaining = remaining >> one
    # An exponent negative when read as signed (for unsigned types too) gives 0 except for
    # bases 1 (1) and -1, i.e. all ones (the power above, +-1 by parity).
    negative = exponent.astype(signed_twin(exponent.dtype)) < 0
    all_ones = base == np.array(-1).astype(dtype)
    negative_result = np.where(base == 1, np.ones((), dtype),
                               np.where(all_ones, accumulator, np.zeros((), dtype)))
    return np.where(negative, negative_result, accumulator).astype(dtype)


def eval_arith(
    integer_function: Callable[[np.ndarray, np.ndarray], np.ndarray],
    float_function: Callable[[np.ndarray, np.ndarray], np.ndarray],
) -> Callable[..., np.ndarray]:
    def rule(ev: Any, instr: Any, args: list) -> np.ndarray:
        lhs, rhs = widen(args[0]), widen(args[1])
        if _is_integer(lhs):
            return integer_function(lhs, rhs)
        return float_function(lhs, rhs)

    return rule


#: ml_dtypes' sub-byte integer dtypes and their widths.
SUB_BYTE_BITS = {"int2": 2, "int4": 4, "uint2": 2, "uint4": 4}


def wrap_integer(values: np.ndarray, target: np.dtype) -> np.ndarray:
    """``values`` (int64) truncated to ``target``'s width, as an integer conversion in XLA does.

    >>> import ml_dtypes
    >>> wrap_integer(np.array([7, 8, 200, -9]), np.dtype(ml_dtypes.int4)).tolist()
    [7, -8, -8, 7]
    """
    bits = SUB_BYTE_BITS.get(target.name, target.itemsize * 8)
    if bits >= 64:
        return values
    low = values & ((1 << bits) - 1)
    if target.kind == "i" or target.name in ("int2", "int4"):  # ml_dtypes' are kind 'V'
        low = np.where(low >= 1 << (bits - 1), low - (1 << bits), low)
    return low


def _sub_byte_shift(kind: str, lhs: np.ndarray, rhs: np.ndarray) -> np.ndarray:
    bits = SUB_BYTE_BITS[lhs.dtype.name]
    x = lhs.astype(np.int64)
    amount = rhs.astype(np.int64) & ((1 << bits) - 1)  # the amount's bits, read unsigned
    too_far = amount >= bits
    safe = np.where(too_far, 0, amount)
    if kind == "arithmetic":
        shifted = np.where(too_far, np.where(x < 0, -1, 0), x >> safe)
    elif kind == "left":
        shifted = np.where(too_far, 0, x << safe)
    else:
        shifted = np.where(too_far, 0, (x & ((1 << bits) - 1)) >> safe)
    return wrap_integer(shifted, lhs.dtype).astype(lhs.dtype)


def eval_shift(kind: str) -> Callable[..., np.ndarray]:
    def rule(ev: Any, instr: Any, args: list) -> np.ndarray:
        lhs, rhs = args
        if lhs.dtype.name in SUB_BYTE_BITS:
            return _sub_byte_shift(kind, lhs, rhs)
        unsigned = unsigned_twin(lhs.dtype)
        bits = int_bits(lhs.dtype)
        amount = rhs.astype(unsigned)
        too_far = amount >= bits
        safe = np.where(too_far, np.zeros((), unsigned), amount)
        if kind == "arithmetic":
            signed = lhs.astype(signed_twin(lhs.dtype))
            fill = np.where(signed < 0, np.array(-1, signed.dtype), np.zeros((), signed.dtype))
            shifted = np.where(too_far, fill, signed >> safe.astype(signed.dtype))
        else:
            bits_view = lhs.astype(unsigned)
            moved = bits_view << safe if kind == "left" else bits_view >> safe
            shifted = np.where(too_far, np.zeros((), unsigned), moved)
        return shifted.astype(lhs.dtype)

    return rule


def eval_popcnt(ev: Any, instr: Any, args: list) -> np.ndarray:
    return np.bitwise_count(args[0].astype(unsigned_twin(args[0].dtype)))


def eval_count_leading_zeros(ev: Any, instr: Any, args: list) -> np.ndarray:
    bits = int_bits(args[0].dtype)
    smeared = args[0].astype(unsigned_twin(args[0].dtype))
    shift = 1
    while shift < bits:
        # After smearing, every bit below the highest set bit is set: popcount = bit length.
        smeared = smeared | (smeared >> np.array(shift, smeared.dtype))
        shift *= 2
    return bits - np.bitwise_count(smeared).astype(np.int64)


INTEGER_RULES: dict[str, Callable[..., Any]] = {
    "count-leading-zeros": eval_count_leading_zeros,
    "divide": eval_arith(_int_divide, divide_floats),
    "popcnt": eval_popcnt,
    "power": eval_arith(_int_power, np.power),
    "remainder": eval_arith(_int_remainder, np.fmod),
    "shift-left": eval_shift("left"),
    "shift-right-arithmetic": eval_shift("arithmetic"),
    "shift-right-logical": eval_shift("logical"),
}
