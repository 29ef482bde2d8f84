"""Rules for ops that make values from attributes alone: ``constant``, ``iota``, and
``get-dimension-size`` (a static dim's size).

>>> from fusion.ir.attributes import Literal
>>> literal_array(Literal((2, 2), (1.5, 2.0, -0.0, float("inf"))), np.dtype(np.float32)).tolist()
[[1.5, 2.0], [-0.0, inf]]
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from fusion.analysis.dimension_size import static_dimension_size
from fusion.ir.attributes import Literal
from fusion.evaluator.failures import op_error
from fusion.evaluator.numerics import is_float_dtype, numpy_dtype
from fusion.ir.shape import ArrayShape, Shape, TupleShape


def literal_array(literal: Literal, dtype: np.dtype) -> np.ndarray:
    """The values of an array literal, in ``dtype``, with the literal's dims.

    Floats go through f64, as XLA parses the decimal text to a double before converting.
    """
    if is_float_dtype(dtype) and dtype.kind != "f":
        flat = np.array(literal.values, np.float64).astype(dtype)
    else:
        flat = np.array(literal.values, dtype) if literal.values else np.zeros(0, dtype)
    return flat.reshape(literal.dims)


def _literal_value(instr: Any, literal: Literal, shape: Shape) -> Any:
    if isinstance(shape, TupleShape):
        elements = literal.elements or ()
        if len(elements) != len(shape.elements):
            raise op_error(instr, f"tuple constant has {len(elements)} elements, shape {shape}")
        return tuple(_literal_value(instr, e, s) for e, s in zip(elements, shape.elements))
    assert isinstance(shape, ArrayShape)
    count = math.prod(literal.dims)
    if len(literal.values) != count:
        # XLA prints a splat-like literal with one value only for scalars; anything else is bad.
        raise op_error(
            instr, f"constant has {len(literal.values)} values for dims {list(literal.dims)}"
        )
    return literal_array(literal, numpy_dtype(shape)).reshape(shape.dims)


def constant_value(instr: Any) -> Any:
    """The value of the ``constant`` instruction ``instr`` (an array, or a tuple of them)."""
    literal = instr.attr("literal", None)
    if not isinstance(literal, Literal):
        raise op_error(instr, "constant has no literal value")
    return _literal_value(instr, literal, instr.shape)


def eval_constant(ev: Any, instr: Any, args: list) -> Any:
    return constant_value(instr)


def eval_iota(ev: Any, instr: Any, args: list) -> np.ndarray:
    shape = instr.array_shape
    dimension = instr.attr("iota_dimension")
    if not 0 <= dimension < shape.rank:
        raise op_error(instr, f"iota_dimension {dimension} out of range for rank {shape.rank}")
    dtype = numpy_dtype(shape)
    counting = np.arange(shape.dims[dimension], dtype=np.int64)
    if is_float_dtype(dtype) or dtype.kind == "c":
        counting = counting.astype(np.float64)
    counting = counting.astype(dtype)
    view = [1] * shape.rank
    view[dimension] = shape.dims[dimension]
    return np.broadcast_to(counting.reshape(view), shape.dims)


def eval_get_dimension_size(ev: Any, instr: Any, args: list) -> np.ndarray:
    return np.int32(static_dimension_size(instr, ev.operand_shapes(instr)[0]))


CONSTANT_RULES: dict[str, Callable[..., Any]] = {
    "constant": eval_constant,
    "get-dimension-size": eval_get_dimension_size,
    "iota": eval_iota,
}
