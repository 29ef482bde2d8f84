"""Elementwise op rules: math, logic, comparison and selection.

Operands are widened first (narrow floats to f32, see ``numerics.widen``); the interpreter
rounds each result to the declared type.  Integer arithmetic wraps, as in XLA.

>>> _round_afz(np.array([0.5, -0.5, 2.5, 0.49999997], np.float32)).tolist()
[1.0, -1.0, 3.0, 0.0]
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from fusion.evaluator.failures import op_error
from fusion.evaluator.integer_ops import INTEGER_RULES
from fusion.evaluator.numerics import is_float_dtype, numpy_dtype, total_order_key, widen


def eval_unary(function: Callable[[np.ndarray], np.ndarray]) -> Callable[..., np.ndarray]:
    def rule(ev: Any, instr: Any, args: list) -> np.ndarray:
        return function(widen(args[0]))

    return rule


def eval_binary(function: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[..., Any]:
    def rule(ev: Any, instr: Any, args: list) -> np.ndarray:
        return function(widen(args[0]), widen(args[1]))

    return rule


def _abs(x: np.ndarray) -> np.ndarray:
    return np.abs(x)


def _atan2(y: np.ndarray, x: np.ndarray) -> np.ndarray:
    if np.iscomplexobj(y):  # XLA's: -i log((x + iy) / sqrt(x^2 + y^2))
        return (-1j * np.log((x + 1j * y) / np.sqrt(x * x + y * y))).astype(y.dtype)
    return np.arctan2(y, x)


def _sign(x: np.ndarray) -> np.ndarray:
    if np.iscomplexobj(x):
        magnitude = np.abs(x)
        return np.where(magnitude == 0, x, x / np.where(magnitude == 0, 1, magnitude))
    if x.dtype == np.bool_:
        return x
    # np.sign(-0.0) is +0.0; XLA keeps the zero's sign.
    return np.where(x == 0, x, np.sign(x))


def _round_afz(x: np.ndarray) -> np.ndarray:
    truncated = np.trunc(x)
    # x - trunc(x) is exact, so this never double-rounds the way floor(x + 0.5) does.
    return np.where(np.abs(x - truncated) >= 0.5, truncated + np.sign(x), truncated)


def _logistic(x: np.ndarray) -> np.ndarray:
    one = np.ones((), x.dtype)
    return one / (one + np.exp(-x))


def _rsqrt(x: np.ndarray) -> np.ndarray:
    return np.ones((), x.dtype) / np.sqrt(x)


_ERF = np.frompyfunc(math.erf, 1, 1)


def _erf(x: np.ndarray) -> np.ndarray:
    # Computed in f64 and rounded to the result type: at least as accurate as XLA's polynomial.
    # (np.asarray: on a rank-0 array a ufunc from frompyfunc returns a bare Python float)
    return np.asarray(_ERF(x.astype(np.float64)), dtype=np.float64).astype(x.dtype)


def _not(x: np.ndarray) -> np.ndarray:
    return np.logical_not(x) if x.dtype == np.bool_ else np.invert(x)


def _is_finite(x: np.ndarray) -> np.ndarray:
    return np.isfinite(x)


def _real(x: np.ndarray) -> np.ndarray:
    return np.real(x)


def _imag(x: np.ndarray) -> np.ndarray:
    return np.imag(x) if np.iscomplexobj(x) else np.zeros_like(x)


def eval_complex(ev: Any, instr: Any, args: list) -> np.ndarray:
    real, imag = np.broadcast_arrays(widen(args[0]), widen(args[1]))
    out = np.empty(real.shape, numpy_dtype(instr.shape))
    out.real = real
    out.imag = imag
    return out


def eval_logical(function: Callable, bool_function: Callable) -> Callable[..., Any]:
    def rule(ev: Any, instr: Any, args: list) -> np.ndarray:
        lhs, rhs = args
        if lhs.dtype == np.bool_:
            return bool_function(lhs, rhs)
        return function(lhs, rhs)

    return rule


def eval_compare(ev: Any, instr: Any, args: list) -> np.ndarray:
    lhs, rhs = widen(args[0]), widen(args[1])
    direction = instr.attr("direction")
    if instr.attr("type", None) == "TOTALORDER" and is_float_dtype(args[0].dtype):
        # The key is taken on the operands' own bits (no widening needed for an order).
        lhs, rhs = total_order_key(args[0]), total_order_key(args[1])
    functions = {
        "EQ": np.equal, "NE": np.not_equal, "LT": np.less,
        "LE": np.less_equal, "GT": np.greater, "GE": np.greater_equal,
    }
    if direction not in functions:
        raise op_error(instr, f"unknown comparison direction {direction!r}")
    return functions[direction](lhs, rhs)


def eval_select(ev: Any, instr: Any, args: list) -> Any:
    predicate, on_true, on_false = args
    return np.where(predicate, on_true, on_false)


def _maximum(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """XLA's maximum: IEEE 754-2019 (NaN propagates, ``-0.0 < +0.0`` in either order).

    >>> np.signbit(_maximum(np.float32([0.0, -0.0]), np.float32([-0.0, 0.0]))).tolist()
    [False, False]
    """
    result = np.maximum(x, y)
    if x.dtype.kind != "f":
        return result
    # np.maximum returns the second operand of two equal zeros.
    return np.where((x == 0) & (y == 0), np.where(np.signbit(x), y, x), result)


def _minimum(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """XLA's minimum: IEEE 754-2019 (NaN propagates, ``-0.0 < +0.0`` in either order).

    >>> np.signbit(_minimum(np.float32([0.0, -0.0]), np.float32([-0.0, 0.0]))).tolist()
    [True, True]
    """
    result = np.minimum(x, y)
    if x.dtype.kind != "f":
        return result
    return np.where((x == 0) & (y == 0), np.where(np.signbit(x), x, y), result)


def eval_clamp(ev: Any, instr: Any, args: list) -> np.ndarray:
    low, x, high = (widen(a) for a in args)
    return _minimum(_maximum(x, low), high)


ELEMENTWISE_RULES: dict[str, Callable[..., Any]] = {
    "abs": eval_unary(_abs),
    "add": eval_binary(np.add),
    "and": eval_logical(np.bitwise_and, np.logical_and),
    "atan2": eval_binary(_atan2),
    "cbrt": eval_unary(np.cbrt),
    "ceil": eval_unary(np.ceil),
    "clamp": eval_clamp,
    "compare": eval_compare,
    "complex": eval_complex,
    "cosine": eval_unary(np.cos),
    "erf": eval_unary(_erf),
    "exponential": eval_unary(np.exp),
    "exponential-minus-one": eval_unary(np.expm1),
    "floor": eval_unary(np.floor),
    "imag": eval_unary(_imag),
    "is-finite": eval_unary(_is_finite),
    "log": eval_unary(np.log),
    "log-plus-one": eval_unary(np.log1p),
    "logistic": eval_unary(_logistic),
    "maximum": eval_binary(_maximum),
    "minimum": eval_binary(_minimum),
    "multiply": eval_binary(np.multiply),
    "negate": eval_unary(np.negative),
    "not": eval_unary(_not),
    "or": eval_logical(np.bitwise_or, np.logical_or),
    "real": eval_unary(_real),
    "round-nearest-afz": eval_unary(_round_afz),
    "round-nearest-even": eval_unary(np.rint),
    "rsqrt": eval_unary(_rsqrt),
    "select": eval_select,
    "sign": eval_unary(_sign),
    "sine": eval_unary(np.sin),
    "sqrt": eval_unary(np.sqrt),
    "subtract": eval_binary(np.subtract),
    "tan": eval_unary(np.tan),
    "tanh": eval_unary(np.tanh),
    "xor": eval_logical(np.bitwise_xor, np.logical_xor),
    **INTEGER_RULES,
}
"""Rules for elementwise ops; ``INTEGER_RULES`` adds those with integer-specific semantics."""
