"""What the reference rules of the GPU library calls (``gemm_ops``, ``cudnn_conv_ops``)
share: the activation of their epilogues in NumPy, and their results as the call returns
them (a workspace of zeros of its declared type when the result is a tuple ending in one).

>>> x = np.float32([-1.0, 0.5, 8.0])
>>> activated(x, "relu6").tolist(), activated(x, "leaky_relu", 0.1).tolist()
([0.0, 0.5, 6.0], [-0.10000000149011612, 0.5, 8.0])
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from fusion.evaluator.numerics import numpy_dtype


def activated(x: np.ndarray, activation: str | None, slope: float = 0.0) -> np.ndarray:
    """``activation`` (a name of ``gemm_calls.EPILOGUES`` or ``cudnn_conv_calls.ACTIVATIONS``;
    None: none) of ``x``, in ``x``'s type; ``slope``: a leaky ReLU's."""
    zero = x.dtype.type(0)
    with np.errstate(over="ignore"):
        if activation == "relu":
            return np.maximum(x, zero)
        if activation == "relu6":
            return np.minimum(np.maximum(x, zero), x.dtype.type(6))
        if activation == "elu":
            return np.where(x > zero, x, np.expm1(x))
        if activation == "leaky_relu":
            return np.where(x > zero, x, x * x.dtype.type(slope))
        if activation == "sigmoid":
            return (1 / (1 + np.exp(-x))).astype(x.dtype)
        if activation == "tanh":
            return np.tanh(x)
        if activation == "gelu":  # the tanh approximation cuBLASLt computes
            return (0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
                    ).astype(x.dtype)
    return x


def call_results(instr: Any, call: Any, outputs: list[np.ndarray]) -> Any:
    """``outputs`` as the call ``instr`` returns them: the first alone for an array-shaped
    call, else a tuple ending, when ``call.workspace``, in the zero workspace."""
    if not call.tuple_result:
        return outputs[0]
    if call.workspace:
        workspace = instr.shape.elements[-1]
        outputs = [*outputs, np.zeros(workspace.dims, numpy_dtype(workspace))]
    return tuple(outputs)


__all__ = ["activated", "call_results"]
