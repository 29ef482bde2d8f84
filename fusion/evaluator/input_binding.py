"""Checking the caller's arrays against the ENTRY parameters.

Dims must match exactly; a dtype is converted only when every value survives the conversion
unchanged (so ``[1, 2]`` as int64 feeds an s32 parameter, ``[0.5]`` does not).

>>> bind_array(np.array([1, 2]), ArrayShape("f32", (2,)), "parameter 0 (%x)").dtype
dtype('float32')
"""
from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from fusion.errors import EvaluationError
from fusion.evaluator.numerics import numpy_dtype
from fusion.ir.shape import ArrayShape, Shape, TupleShape


def bind_array(value: Any, shape: ArrayShape, what: str) -> np.ndarray:
    """``value`` as an array of ``shape``'s dtype; ``EvaluationError`` naming ``what``."""
    if isinstance(value, (tuple, list)) and not _is_nested_numbers(value):
        raise EvaluationError(f"{what} expects an array of shape {shape}, got a tuple",
                              where=what)
    array = np.asarray(value)
    if array.shape != tuple(shape.dims):
        raise EvaluationError(
            f"{what} expects dims {list(shape.dims)} ({shape}), got an array of dims "
            f"{list(array.shape)}", where=what
        )
    dtype = numpy_dtype(shape)
    if array.dtype == dtype:
        return array
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            converted = array.astype(dtype)
            back = converted.astype(array.dtype)
        except (TypeError, ValueError) as error:
            raise EvaluationError(
                f"{what} expects {shape.dtype}; cannot convert {array.dtype}: {error}",
                where=what,
            ) from None
        same = (back == array) | (_is_nan(back) & _is_nan(array))
    if not np.all(same):
        raise EvaluationError(
            f"{what} expects {shape.dtype} ({dtype}); the {array.dtype} values are not all "
            f"exactly representable", where=what
        )
    return converted


def bind_value(value: Any, shape: Shape, what: str) -> Any:
    """An array, or for a tuple shape a tuple of bound values."""
    if isinstance(shape, TupleShape):
        if not isinstance(value, (tuple, list)) or len(value) != len(shape.elements):
            raise EvaluationError(
                f"{what} expects a tuple of {len(shape.elements)} values for shape {shape}",
                where=what,
            )
        return tuple(
            bind_value(v, s, f"{what} element {i}")
            for i, (v, s) in enumerate(zip(value, shape.elements))
        )
    return bind_array(value, shape, what)


def _is_nan(array: np.ndarray) -> np.ndarray:
    try:
        return np.isnan(array)
    except TypeError:
        return np.zeros(np.shape(array), bool)


def _is_nested_numbers(value: Any) -> bool:
    try:
        return np.asarray(value).dtype != object
    except ValueError:
        return False
