"""NumPy dtype facts the op rules share: which dtype holds a shape, and how XLA computes in it.

XLA computes 16- and 8-bit float ops in f32 and rounds each op's result to the declared type;
``widen`` gives the dtype an op computes in, and the interpreter rounds the result back.

>>> import ml_dtypes
>>> widen(np.zeros(2, ml_dtypes.bfloat16)).dtype
dtype('float32')
>>> widen(np.zeros(2, np.int8)).dtype
dtype('int8')
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from fusion.ir.element_types import ELEMENT_TYPES, ElementType, element_type_of_numpy
from fusion.ir.shape import ArrayShape


@lru_cache(maxsize=None)
def _narrow_float_dtypes() -> frozenset[np.dtype]:
    out = set()
    for t in ELEMENT_TYPES.values():
        if t.is_float and t.bits < 32:
            out.add(t.numpy_dtype())
    return frozenset(out)


def is_narrow_float(dtype: np.dtype) -> bool:
    """True for the float types XLA computes in f32 (f16, bf16, the f8 and f4 types).

    >>> is_narrow_float(np.dtype(np.float16)), is_narrow_float(np.dtype(np.float32))
    (True, False)
    """
    return np.dtype(dtype) in _narrow_float_dtypes()


def is_float_dtype(dtype: np.dtype) -> bool:
    """True for every real float dtype, the ml_dtypes ones included."""
    dtype = np.dtype(dtype)
    return dtype.kind == "f" or dtype in _narrow_float_dtypes()


def widen(array: np.ndarray) -> np.ndarray:
    """The array in the dtype XLA computes in: narrow floats become f32, others are kept."""
    array = np.asarray(array)
    if is_narrow_float(array.dtype):
        return array.astype(np.float32)
    return array


def numpy_dtype(shape: ArrayShape) -> np.dtype:
    """The NumPy dtype holding the values of an array shape.

    >>> numpy_dtype(ArrayShape("s32", (2,)))
    dtype('int32')
    """
    return shape.element_type.numpy_dtype()


def hlo_type_of(dtype: np.dtype) -> ElementType:
    """The HLO element type of a NumPy dtype."""
    return element_type_of_numpy(dtype)


def int_bits(dtype: np.dtype) -> int:
    """Bit width of an integer or bool dtype (bool counts 8, as XLA's pred)."""
    return np.dtype(dtype).itemsize * 8


def unsigned_twin(dtype: np.dtype) -> np.dtype:
    """The unsigned integer dtype of the same width (for bit reinterpretation).

    >>> unsigned_twin(np.dtype(np.int16))
    dtype('uint16')
    """
    return np.dtype(f"u{np.dtype(dtype).itemsize}")


def signed_twin(dtype: np.dtype) -> np.dtype:
    """The signed integer dtype of the same width."""
    return np.dtype(f"i{np.dtype(dtype).itemsize}")


def total_order_key(array: np.ndarray) -> np.ndarray:
    """Signed integers ordered as XLA's float total order: -NaN < -inf < -0 < +0 < inf < NaN.

    >>> k = total_order_key(np.array([np.nan, -0.0, 0.0, -np.inf], np.float32))
    >>> [int(i) for i in np.argsort(k)]
    [3, 1, 2, 0]
    """
    array = np.asarray(array)
    if not is_float_dtype(array.dtype):
        return array
    bits = np.array(array, order="C", copy=None).view(signed_twin(array.dtype))
    magnitude_mask = np.array(np.iinfo(bits.dtype).max, bits.dtype)
    # Negative floats order backwards in their bit pattern: flip all but the sign bit.
    return np.where(bits < 0, bits ^ magnitude_mask, bits)
