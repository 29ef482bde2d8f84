"""Reference rule of the cuDNN convolution custom-calls (``fusion.analysis.cudnn_conv_calls``).

``activation(scale * conv(x, w) + side_input_scale * side + bias)`` in NumPy: the convolution
(a backward one's: the gradient's, ``convolution_to_run``) by the evaluator's own
``convolve`` in the type cuDNN computes in (f32 for 16-bit floats),
the rest in that type, rounded once; a zero scratch buffer.  Written from the formula, not
from the HLO expansion the compiler runs (``transforms.gpu_call_expansion``).

>>> from fusion.text.parser import parse_hlo
>>> from fusion.evaluator import evaluate
>>> m = parse_hlo('''HloModule m
... ENTRY e {
...   x = f32[1,3,1] parameter(0)
...   w = f32[1,1,1] parameter(1)
...   b = f32[1] parameter(2)
...   c = (f32[1,3,1], u8[0]) custom-call(x, w, b), window={size=1},
...     dim_labels=b0f_0io->b0f, custom_call_target="__cudnn$convBiasActivationForward",
...     backend_config={"cudnn_conv_backend_config":{"activation_mode":"kRelu6",
...       "conv_result_scale":2,"side_input_scale":0}}
...   ROOT g = f32[1,3,1] get-tuple-element(c), index=0
... }''')
>>> x = np.float32([1, -3, 9]).reshape(1, 3, 1)
>>> evaluate(m, x, np.ones((1, 1, 1), np.float32), np.float32([0.5]))[0].ravel().tolist()
[2.5, 0.0, 6.0]
"""
from __future__ import annotations

from typing import Any

import numpy as np

from fusion.analysis.cudnn_conv_calls import convolution_to_run, cudnn_conv_call
from fusion.errors import FusionCompilerError
from fusion.evaluator.convolution_ops import convolve
from fusion.evaluator.failures import op_error
from fusion.evaluator.library_epilogues import activated, call_results
from fusion.evaluator.numerics import numpy_dtype
from fusion.ir.convolution import conv_dims
from fusion.ir.shape import ArrayShape


def eval_cudnn_conv_call(ev: Any, instr: Any, args: list) -> Any:
    """The outputs of the cuDNN convolution custom-call ``instr`` on ``args``."""
    lhs, rhs = np.asarray(args[0]), np.asarray(args[1])
    try:
        call = cudnn_conv_call(instr)
        attributes, steps = convolution_to_run(call, lhs.shape, rhs.shape)
        conv = conv_dims(instr.replace(attributes=attributes))
    except FusionCompilerError as err:
        raise op_error(instr, err.message) from None
    for step, values in steps:  # the kernel a backward input convolution convolves with
        rhs = {"reshape": np.reshape, "transpose": np.transpose, "reverse": np.flip}[step](
            rhs, values)
    compute = numpy_dtype(ArrayShape(call.compute_type, ()))
    x = convolve(lhs, rhs, conv.dims, conv.window, conv.feature_group_count,
                 conv.batch_group_count, compute).astype(compute)
    if x.shape != call.result.dims:
        raise op_error(instr, f"the convolution gives {list(x.shape)}, the call's result is "
                              f"{list(call.result.dims)}")
    if call.scale != 1:
        x = x * compute.type(call.scale)
    if call.side_input is not None:
        x = x + compute.type(call.side_input_scale) * np.asarray(args[3]).astype(compute)
    if call.bias is not None:
        shape = [1] * x.ndim
        shape[call.feature_dim] = -1
        x = x + np.asarray(args[2]).astype(compute).reshape(shape)
    y = activated(x, call.activation, call.leakyrelu_alpha).astype(numpy_dtype(call.result))
    return call_results(instr, call, [y])


__all__ = ["eval_cudnn_conv_call"]
