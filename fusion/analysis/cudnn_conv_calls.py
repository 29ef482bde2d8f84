"""cuDNN convolution custom-calls: what a ``__cudnn$conv*`` call computes.

XLA:GPU's ``ConvRewriter`` turns each convolution into a custom-call to cuDNN that keeps the
convolution's own ``window``, ``dim_labels`` and group counts, and its fused-conv rewriter
folds a scale, a side input, a bias and an activation into
``__cudnn$convBiasActivationForward``; ``cudnn_conv_backend_config`` (XLA's
``CudnnConvBackendConfig``) holds the rest::

    y = activation(conv_result_scale * conv(x, w) + side_input_scale * side + broadcast(bias))

with operands ``(x, w)`` for ``convForward`` and ``(x, w, bias[, side])`` for the fused form,
the bias a vector along the output feature dim, and ``activation_mode`` one of ``kNone``,
``kRelu``, ``kRelu6``, ``kElu``, ``kLeakyRelu`` (slope ``leakyrelu_alpha``), ``kSigmoid``,
``kTanh``.  The backward convolutions carry the *forward* convolution's window and
dim_labels, its ``lhs`` labels naming the input and its output labels the output's gradient:
``convBackwardInput(dy, w)`` is the gradient with respect to the input (the result, of the
input's shape), ``convBackwardFilter(x, dy)`` with respect to the kernel
(``conv_gradients`` gives the convolutions that compute them, grouped ones too).  cuDNN
computes 16-bit floats in f32 and rounds once; the result is a tuple of ``y`` and a ``u8``
scratch buffer.  This module decodes; ``evaluator/cudnn_conv_ops`` computes,
``transforms/gpu_call_expansion`` writes the HLO ops.

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... ENTRY e {
...   x = f32[1,4,4,2] parameter(0)
...   w = f32[3,3,2,8] parameter(1)
...   b = f32[8] parameter(2)
...   c = (f32[1,4,4,8], u8[0]) custom-call(x, w, b), window={size=3x3 pad=1_1x1_1},
...     dim_labels=b01f_01io->b01f, custom_call_target="__cudnn$convBiasActivationForward",
...     backend_config={"cudnn_conv_backend_config":{"activation_mode":"kRelu",
...       "conv_result_scale":1,"side_input_scale":0}}
...   ROOT g = f32[1,4,4,8] get-tuple-element(c), index=0
... }''')
>>> call = cudnn_conv_call(m.entry.instruction("c"))
>>> call.bias, call.side_input, call.activation, call.feature_dim
('b', None, 'relu', 3)
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fusion.analysis.conv_gradients import (filter_gradient, groups_into_input_features,
                                            input_gradient)
from fusion.analysis.custom_call_configs import (REAL_FLOATS, backend_config_of, compute_type,
                                                 config_number, custom_call_error)
from fusion.ir.attributes import Window
from fusion.ir.convolution import parse_dim_labels
from fusion.ir.hlo_module import HloInstruction
from fusion.ir.shape import ArrayShape, TupleShape

#: cuDNN convolution target -> what it computes (``convolution``'s direction).
CONV_TARGETS = {"__cudnn$convBackwardFilter": "backward_filter",
                "__cudnn$convBackwardInput": "backward_input",
                "__cudnn$convBiasActivationForward": "fused_forward",
                "__cudnn$convForward": "forward"}
#: ``activation_mode`` (stream_executor's ``dnn::ActivationMode``) -> the activation computed.
ACTIVATIONS = {"kElu": "elu", "kLeakyRelu": "leaky_relu", "kNone": None, "kRelu": "relu",
               "kRelu6": "relu6", "kSigmoid": "sigmoid", "kTanh": "tanh"}
# Enum numbers, as a protobuf-text or older JSON dump may give them.
_ACTIVATION_NUMBERS = {"0": "kNone", "1": "kSigmoid", "2": "kRelu", "3": "kRelu6",
                       "5": "kTanh", "7": "kElu", "8": "kLeakyRelu"}


@dataclass(frozen=True)
class CudnnConvCall:
    """One cuDNN forward convolution custom-call, decoded (module docstring).

    ``direction``: a :data:`CONV_TARGETS` value; ``lhs``/``rhs``: operands 0 and 1 (``x, w``
    forward, ``dy, w`` backward input, ``x, dy`` backward filter); ``bias``/``side_input``:
    operand names or None; ``feature_dim``: the result dim the bias runs along;
    ``conv_attributes``: the call's convolution attributes (window, dim_labels, group
    counts: the forward convolution's); ``workspace``/``tuple_result`` as a GEMM call's."""

    target: str
    direction: str
    lhs: str
    rhs: str
    bias: str | None
    side_input: str | None
    scale: float
    side_input_scale: float
    activation: str | None
    leakyrelu_alpha: float
    result: ArrayShape
    feature_dim: int
    workspace: bool
    tuple_result: bool
    conv_attributes: tuple[tuple[str, object], ...]

    @property
    def compute_type(self) -> str:
        """The type cuDNN computes in (``custom_call_configs.compute_type``)."""
        return compute_type(self.result.dtype)


def is_cudnn_conv_call(instr: HloInstruction) -> bool:
    """A custom-call to a cuDNN convolution target (:data:`CONV_TARGETS`)."""
    return instr.opcode == "custom-call" and instr.attr("custom_call_target", None) in CONV_TARGETS


def cudnn_conv_call(instr: HloInstruction) -> CudnnConvCall:
    """What the cuDNN convolution custom-call ``instr`` computes; ``UnsupportedOpError``
    (located, naming the target and the field) for what this project does not compute."""
    target = instr.attr("custom_call_target")
    direction = CONV_TARGETS[target]
    fused = direction == "fused_forward"
    config = backend_config_of(instr, "cudnn_conv_backend_config")
    scale = config_number(config, "conv_result_scale", 1, instr)
    side_scale = config_number(config, "side_input_scale", 0, instr)
    mode = str(config.get("activation_mode", "kNone"))
    mode = _ACTIVATION_NUMBERS.get(mode, mode)
    if mode not in ACTIVATIONS or (mode != "kNone" and not fused):
        raise custom_call_error(instr, f"activation_mode {mode} is not supported")
    expected = (4 if side_scale != 0 else 3) if fused else 2
    if len(instr.operands) != expected:
        raise custom_call_error(instr, f"takes {len(instr.operands)} operands, not the {expected} "
                                  f"of ({_OPERANDS[direction]}{', bias' if fused else ''}"
                                  f"{', side input' if expected == 4 else ''})")
    result, workspace, is_tuple = _outputs(instr)
    if result.dtype not in REAL_FLOATS:
        raise custom_call_error(instr, f"a {result.dtype} convolution is not supported (float "
                                  "results only)")
    try:
        feature_dim = parse_dim_labels(str(instr.attr("dim_labels"))).out_feature
    except (ValueError, KeyError) as err:
        raise custom_call_error(instr, f"dim_labels: {err}") from None
    attrs = tuple((k, v) for k, v in instr.attributes
                  if k in ("window", "dim_labels", "feature_group_count", "batch_group_count"))
    if direction.startswith("backward") and dict(attrs).get("batch_group_count", 1) != 1:
        raise custom_call_error(instr, "a backward convolution with batch groups is not "
                                  "supported")
    return CudnnConvCall(target, direction, instr.operands[0], instr.operands[1],
                         instr.operands[2] if fused else None,
                         instr.operands[3] if expected == 4 else None, scale, side_scale,
                         ACTIVATIONS[mode], config_number(config, "leakyrelu_alpha", 0, instr),
                         result, feature_dim, workspace, is_tuple, attrs)


_OPERANDS = {"backward_filter": "input, output gradient", "backward_input": "output gradient, filter",
             "forward": "input, filter", "fused_forward": "input, filter"}


#: A step on the kernel before a backward input convolution: ``("reshape", dims)``,
#: ``("transpose", order)`` or ``("reverse", dims)``.
KernelStep = tuple[str, tuple[int, ...]]


def convolution_to_run(call: CudnnConvCall, lhs_dims: Sequence[int], rhs_dims: Sequence[int]
                       ) -> tuple[tuple[tuple[str, object], ...], tuple[KernelStep, ...]]:
    """The ``convolution`` computing ``call`` on operands of ``lhs_dims`` and ``rhs_dims``:
    its attributes, and the steps taking the rhs to the kernel it convolves with (a backward
    input convolution's: its feature groups moved into the input features, then reversed).

    >>> from fusion.ir.attributes import Window, WindowDim
    >>> w = Window((WindowDim(3, 2, 1, 1, 1, 1, False),))
    >>> call = CudnnConvCall("t", "backward_input", "dy", "w", None, None, 1, 0, None, 0,
    ...                      ArrayShape("f32", (1, 8, 4)), 2, False, False,
    ...                      (("window", w), ("dim_labels", "b0f_0io->b0f")))
    >>> attrs, steps = convolution_to_run(call, (1, 4, 16), (3, 4, 16))
    >>> dict(attrs)["dim_labels"], steps
    ('b0f_0oi->b0f', (('reverse', (0,)),))
    """
    if not call.direction.startswith("backward"):
        return call.conv_attributes, ()
    attrs = dict(call.conv_attributes)
    d = parse_dim_labels(str(attrs["dim_labels"]))
    window = attrs["window"].dims
    groups = int(attrs.get("feature_group_count", 1))
    steps: tuple[KernelStep, ...] = ()
    if call.direction == "backward_input":  # dy is the output, the result the input
        dims, transposed = input_gradient(d, window, call.result.dims, lhs_dims)
        if groups > 1:
            split, order, merged = groups_into_input_features(rhs_dims, d, groups)
            steps = (("reshape", split), ("transpose", order), ("reshape", merged))
        steps += (("reverse", tuple(d.rhs_spatial)),)
        group_attrs = (("feature_group_count", groups),) if groups > 1 else ()
    else:  # x is the input, dy the output: the feature groups become batch groups
        dims, transposed = filter_gradient(d, window, lhs_dims, rhs_dims)
        group_attrs = (("batch_group_count", groups),) if groups > 1 else ()
    return (("window", Window(transposed)), ("dim_labels", str(dims))) + group_attrs, steps


def _outputs(instr: HloInstruction) -> tuple[ArrayShape, bool, bool]:
    shape = instr.shape
    if isinstance(shape, ArrayShape):
        return shape, False, False
    parts = list(shape.elements) if isinstance(shape, TupleShape) else []
    if not parts or not all(isinstance(p, ArrayShape) for p in parts) or len(parts) > 2 \
            or (len(parts) == 2 and (parts[1].dtype not in ("u8", "s8") or parts[1].rank != 1)):
        raise custom_call_error(instr, f"result {shape} is not (result[, u8 scratch])")
    return parts[0], len(parts) == 2, True


__all__ = ["ACTIVATIONS", "CONV_TARGETS", "CudnnConvCall", "convolution_to_run",
           "cudnn_conv_call", "is_cudnn_conv_call"]
