"""Type conversion rules: ``convert``, ``bitcast-convert``, ``reduce-precision``.

XLA's float-to-integer conversion saturates: NaN gives 0, values beyond the integer's range
(infinities included) give its min or max.  Conversion to pred is ``x != 0``.

>>> _float_to_int(np.array([np.nan, 1e10, -1e10, -2.7], np.float32), np.dtype(np.int8)).tolist()
[0, 127, -128, -2]
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from fusion.evaluator.failures import op_error
from fusion.evaluator.integer_ops import SUB_BYTE_BITS, wrap_integer
from fusion.evaluator.numerics import is_float_dtype, numpy_dtype, widen


def _float_to_int(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    wide = x.astype(np.float64) if x.dtype.itemsize < 8 else x
    truncated = np.trunc(wide)
    # Powers of two, hence exact in every float type: the range is [low, high_exclusive).
    low = float(info.min)
    high_exclusive = float(info.max) + 1.0 if dtype.itemsize < 8 else 2.0 ** (info.bits - (dtype.kind == "i"))
    in_range = (truncated >= low) & (truncated < high_exclusive)
    safe = np.where(in_range, truncated, 0).astype(dtype)
    out = np.where(truncated >= high_exclusive, np.array(info.max, dtype), safe)
    out = np.where(truncated < low, np.array(info.min, dtype), out)
    return np.where(np.isnan(wide), np.zeros((), dtype), out)


def eval_convert(ev: Any, instr: Any, args: list) -> np.ndarray:
    x = args[0]
    target = numpy_dtype(instr.array_shape)
    if target == np.bool_:
        return x != 0
    if np.iscomplexobj(x) and target.kind != "c":
        x = np.real(x)
    if target.kind in "iu" and is_float_dtype(x.dtype):
        return _float_to_int(widen(x), target)
    if target.name in SUB_BYTE_BITS:  # NumPy cannot cast to or between these: via int64
        if is_float_dtype(x.dtype):  # saturating, NaN -> 0, as for every integer type
            bits, signed = SUB_BYTE_BITS[target.name], target.name.startswith("int")
            low, high = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
            wide = np.trunc(widen(x).astype(np.float64))
            clipped = np.where(np.isnan(wide), 0.0, np.clip(wide, low, high))
            return clipped.astype(np.int64).astype(target)
        return wrap_integer(np.asarray(x).astype(np.int64), target).astype(target)
    if x.dtype.name in SUB_BYTE_BITS:
        x = x.astype(np.int64)  # exact in every wider type
    if target.kind in "iu" or x.dtype == np.bool_:
        return x.astype(target)
    if x.dtype.kind in "iu" and target.itemsize < 8 and target.kind != "c":
        # Integers go through f64 (exact up to 2**53) for a single rounding to the target.
        return x.astype(np.float64).astype(target)
    result = x.astype(target)
    if target.name == "float4_e2m1fn" and is_float_dtype(x.dtype):
        # f4e2m1fn has no NaN: XLA gives -0.0 for every NaN (ml_dtypes +0.0 for a negative one)
        result = np.where(np.isnan(widen(x)), np.array(-0.0, target), result)
    if x.dtype.name.endswith("fnuz") and is_float_dtype(target):
        # A fnuz format's one NaN is the code of -0 (the sign bit alone): XLA widens it to a
        # positive NaN, ml_dtypes to a negative one.
        result = np.where(np.isnan(result), np.abs(result), result)
    return result


def eval_bitcast_convert(ev: Any, instr: Any, args: list) -> np.ndarray:
    x = np.array(args[0], order="C", copy=None)
    target = numpy_dtype(instr.array_shape)
    source_bits = instr_bits(x.dtype)
    target_bits = instr_bits(target)
    if source_bits is None or target_bits is None:
        raise op_error(instr, f"bitcast-convert between {x.dtype} and {target} is not supported")
    if source_bits == target_bits:
        return x.view(target)
    if source_bits > target_bits:
        # The wider element splits into a new minor dim (little-endian element order).
        return x.view(target).reshape(x.shape + (source_bits // target_bits,))
    return x.view(target).reshape(x.shape[:-1])


def instr_bits(dtype: np.dtype) -> int | None:
    """Bits of a dtype that can be reinterpreted byte-wise (sub-byte types cannot)."""
    dtype = np.dtype(dtype)
    if dtype.name in ("int2", "int4", "uint2", "uint4", "float4_e2m1fn"):
        return None
    return dtype.itemsize * 8


_FLOAT_FORMATS = {"float16": (5, 10, np.uint16), "float32": (8, 23, np.uint32),
                  "float64": (11, 52, np.uint64)}


def eval_reduce_precision(ev: Any, instr: Any, args: list) -> np.ndarray:
    # f16 rounds in its own format, as XLA does (its denormals differ from the f32 widening);
    # bf16 widens to f32 exactly, denormals included (same exponent range).
    x = args[0] if np.asarray(args[0]).dtype == np.float16 else widen(args[0])
    if x.dtype.name not in _FLOAT_FORMATS:
        raise op_error(instr, f"reduce-precision of {args[0].dtype} is not supported")
    return reduce_precision(x, instr.attr("exponent_bits"), instr.attr("mantissa_bits"))


def reduce_precision(x: np.ndarray, exponent_bits: int, mantissa_bits: int) -> np.ndarray:
    """XLA's ReducePrecision: round to nearest even, then flush/overflow the exponent.

    >>> reduce_precision(np.array([1.00390625, 70000.0], np.float32), 5, 10).tolist()
    [1.00390625, inf]
    """
    source_exponent_bits, source_mantissa_bits, uint = _FLOAT_FORMATS[x.dtype.name]
    bits = np.array(x, order="C", copy=None).view(uint).copy()
    width = x.dtype.itemsize * 8
    if mantissa_bits < source_mantissa_bits:
        dropped = source_mantissa_bits - mantissa_bits
        last_kept = uint(1) << uint(dropped)
        base_bias = (last_kept >> uint(1)) - uint(1)
        bias = ((bits & last_kept) >> uint(dropped)) + base_bias
        bits = (bits + bias) & ~(last_kept - uint(1))
    if exponent_bits < source_exponent_bits:
        sign_mask = uint(1) << uint(width - 1)
        exponent_mask = ((uint(1) << uint(source_exponent_bits)) - uint(1)) << uint(
            source_mantissa_bits
        )
        bias = (1 << (source_exponent_bits - 1)) - 1
        reduced_bias = (1 << (exponent_bits - 1)) - 1
        max_exponent = uint(bias + reduced_bias) << uint(source_mantissa_bits)
        min_exponent = uint(bias - reduced_bias) << uint(source_mantissa_bits)
        exponent = bits & exponent_mask
        signed_zero = bits & sign_mask
        bits = np.where(
            exponent > max_exponent,
            signed_zero | exponent_mask,
            np.where(exponent <= min_exponent, signed_zero, bits),
        )
    result = bits.astype(uint).view(x.dtype)
    # NaN stays NaN (XLA keeps the input where x != x).
    return np.where(np.isnan(x), x, result)


def eval_stochastic_convert(ev: Any, instr: Any, args: list) -> np.ndarray:
    """XLA's ``StochasticConvertDecomposer``: the magnitude's integer part, plus one where the
    random bits are below its fraction scaled by ``2**bits`` (f16's fraction scaled in f32),
    the sign put back, and operands past the type's range clamped to its min and max."""
    x, random = np.asarray(args[0]), np.asarray(args[1])
    target = numpy_dtype(instr.array_shape)
    info = np.iinfo(target)
    with np.errstate(invalid="ignore"):
        magnitude = np.abs(x)
        whole = np.floor(magnitude)
        fraction = magnitude - whole
        if x.dtype == np.float16:
            fraction = fraction.astype(np.float32)
        scaled = fraction * fraction.dtype.type(2.0 ** (random.dtype.itemsize * 8))
        up = random < _float_to_int(scaled, random.dtype)
        value = _float_to_int(whole, target)
        value = np.where(up, wrap_integer(value.astype(np.int64) + 1, target), value)
        value = np.where(np.sign(x) < 0, wrap_integer(-value.astype(np.int64), target), value)
        value = np.where(x <= x.dtype.type(info.min), np.array(info.min, target), value)
        return np.where(x >= x.dtype.type(info.max), np.array(info.max, target), value)


CONVERSION_RULES: dict[str, Callable[..., Any]] = {
    "bitcast-convert": eval_bitcast_convert,
    "convert": eval_convert,
    "reduce-precision": eval_reduce_precision,
    "stochastic-convert": eval_stochastic_convert,
}
