"""Reference rule of the cuBLAS GEMM custom-calls (``fusion.analysis.gemm_calls``).

``activation(alpha * dot(A, B) + beta * C + bias)`` in NumPy: the dot by the evaluator's own
``dot_general`` (16-bit floats accumulated in f32), the rest in the type cuBLAS computes it
in (f32 for 16-bit floats), rounded once to the result type; the pre-activation value for an
``*_AUX`` epilogue, and a zero workspace.  Written from the formula, not from the HLO
expansion the compiler runs (``transforms.gpu_call_expansion``), so the two check each other.

>>> from fusion.text.parser import parse_hlo
>>> from fusion.evaluator import evaluate
>>> m = parse_hlo('''HloModule m
... ENTRY e {
...   a = f32[1,2] parameter(0)
...   b = f32[2,2] parameter(1)
...   c = (f32[1,2], s8[8]) custom-call(a, b), custom_call_target="__cublas$lt$matmul",
...     backend_config={"gemm_backend_config":{"alpha_real":1,"beta":0,"epilogue":"RELU",
...       "dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],
...         "rhs_contracting_dimensions":["0"]}}}
...   ROOT g = f32[1,2] get-tuple-element(c), index=0
... }''')
>>> evaluate(m, np.float32([[1, 2]]), np.float32([[1, -1], [1, -1]]))[0].tolist()
[[3.0, 0.0]]
"""
from __future__ import annotations

from typing import Any

import numpy as np

from fusion.analysis.gemm_calls import gemm_call
from fusion.errors import UnsupportedOpError
from fusion.evaluator.dot_ops import dot_general
from fusion.evaluator.failures import op_error
from fusion.evaluator.library_epilogues import activated, call_results
from fusion.evaluator.numerics import numpy_dtype
from fusion.ir.shape import ArrayShape


def eval_gemm_call(ev: Any, instr: Any, args: list) -> Any:
    """The outputs of the GEMM custom-call ``instr`` on ``args`` (module docstring)."""
    try:
        call = gemm_call(instr)
    except UnsupportedOpError as err:
        raise op_error(instr, err.message) from None
    dims = dict(call.dot_attributes)
    compute = numpy_dtype(ArrayShape(call.compute_type, ()))
    x = dot_general(args[0], args[1], (dims["lhs_contracting_dims"], dims["rhs_contracting_dims"]),
                    (dims["lhs_batch_dims"], dims["rhs_batch_dims"]), compute)
    if x.shape != call.result.dims:
        raise op_error(instr, f"the dot gives {list(x.shape)}, the call's result is "
                              f"{list(call.result.dims)}")
    x = x.astype(compute)
    if call.alpha != 1:
        x = x * compute.type(call.alpha)
    if call.c is not None:
        x = x + compute.type(call.beta) * np.asarray(args[2]).astype(compute)
    if call.bias is not None:
        bias = np.asarray(args[-1]).astype(compute)
        if bias.shape != x.shape[x.ndim - bias.ndim:]:
            raise op_error(instr, f"bias {list(bias.shape)} is not the result's trailing dims "
                                  f"{list(x.shape)}")
        x = x + bias
    outputs = [activated(x, call.activation).astype(numpy_dtype(call.result))]
    if call.aux is not None:
        outputs.append(x.astype(numpy_dtype(call.aux)))  # the pre-activation value
    return call_results(instr, call, outputs)


__all__ = ["eval_gemm_call"]
