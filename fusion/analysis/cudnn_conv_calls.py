"""cuDNN convolution custom-calls: what a ``__cudnn$convForward`` computes.

XLA:GPU's ``ConvRewriter`` turns each convolution into a custom-call to cuDNN that keeps the
convolution's own ``window``, ``dim_labels`` and group counts, and its fused-conv rewriter
folds a scale, a side input, a bias and an activation into
``__cudnn$convBiasActivationForward``; ``cudnn_conv_backend_config`` (XLA's
``CudnnConvBackendConfig``) holds the rest::

    y = activation(conv_result_scale * conv(x, w) + side_input_scale * side + broadcast(bias))

with operands ``(x, w)`` for ``convForward`` and ``(x, w, bias[, side])`` for the fused form,
the bias a vector along the output feature dim, and ``activation_mode`` one of ``kNone``,
``kRelu``, ``kRelu6``, ``kElu``, ``kLeakyRelu`` (slope ``leakyrelu_alpha``), ``kSigmoid``,
``kTanh``.  cuDNN computes 16-bit floats in f32 and rounds once; the result is a tuple of
``y`` and a ``u8`` scratch buffer.  The backward convolutions (``convBackwardInput``,
``convBackwardFilter``) carry the forward convolution's window and are refused by name.
This module decodes; ``evaluator/cudnn_conv_ops`` computes, ``transforms/gpu_call_expansion``
writes the HLO ops.

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

from dataclasses import dataclass

from fusion.analysis.custom_call_configs import backend_config_of, config_number, custom_call_error
from fusion.ir.convolution import parse_dim_labels
from fusion.ir.hlo_module import HloInstruction
from fusion.ir.shape import ArrayShape, TupleShape

#: The forward convolution targets (fused: with scale, side input, bias and activation).
CONV_TARGETS = {"__cudnn$convForward": False, "__cudnn$convBiasActivationForward": True}
#: cuDNN targets recognised but not computed here, and why.
REFUSED_CONV_TARGETS = {
    "__cudnn$convBackwardFilter": "a backward (filter) convolution",
    "__cudnn$convBackwardInput": "a backward (input) convolution",
}
#: ``activation_mode`` (stream_executor's ``dnn::ActivationMode``) -> the activation computed.
ACTIVATIONS = {"kElu": "elu", "kLeakyRelu": "leaky_relu", "kNone": None, "kRelu": "relu",
               "kRelu6": "relu6", "kSigmoid": "sigmoid", "kTanh": "tanh"}
# Enum numbers, as a protobuf-text or older JSON dump may give them.
_ACTIVATION_NUMBERS = {"0": "kNone", "1": "kSigmoid", "2": "kRelu", "3": "kRelu6",
                       "5": "kTanh", "7": "kElu", "8": "kLeakyRelu"}
_FLOATS = ("bf16", "f16", "f32", "f64")


@dataclass(frozen=True)
class CudnnConvCall:
    """One cuDNN forward convolution custom-call, decoded (module docstring).

    ``bias``/``side_input``: operand names or None; ``feature_dim``: the result dim the bias
    runs along; ``conv_attributes``: the convolution's HLO attributes (window, dim_labels,
    group counts); ``workspace``/``tuple_result`` as a GEMM call's."""

    target: str
    input: str
    filter: str
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
    aux: None = None

    @property
    def compute_type(self) -> str:
        """f32 for 16-bit floats (cuDNN's accumulation and epilogue), else the result's."""
        return "f32" if self.result.dtype in ("bf16", "f16") else self.result.dtype


def is_cudnn_conv_call(instr: HloInstruction) -> bool:
    """A custom-call to a cuDNN convolution target, computed or refused by name."""
    return instr.opcode == "custom-call" and (
        instr.attr("custom_call_target", None) in CONV_TARGETS
        or instr.attr("custom_call_target", None) in REFUSED_CONV_TARGETS)


def cudnn_conv_call(instr: HloInstruction) -> CudnnConvCall:
    """What the cuDNN convolution custom-call ``instr`` computes; ``UnsupportedOpError``
    (located, naming the target and the field) for what this project does not compute."""
    target = instr.attr("custom_call_target")
    if target in REFUSED_CONV_TARGETS:
        raise custom_call_error(instr, f"{REFUSED_CONV_TARGETS[target]} is not supported (dump the "
                                  "module before XLA:GPU's optimizations to compile it)")
    fused = CONV_TARGETS[target]
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
                                  f"of (input, filter{', bias' if fused else ''}"
                                  f"{', side input' if expected == 4 else ''})")
    result, workspace, is_tuple = _outputs(instr)
    if result.dtype not in _FLOATS:
        raise custom_call_error(instr, f"a {result.dtype} convolution is not supported (float "
                                  "results only)")
    try:
        feature_dim = parse_dim_labels(str(instr.attr("dim_labels"))).out_feature
    except (ValueError, KeyError) as err:
        raise custom_call_error(instr, f"dim_labels: {err}") from None
    attrs = tuple((k, v) for k, v in instr.attributes
                  if k in ("window", "dim_labels", "feature_group_count", "batch_group_count"))
    return CudnnConvCall(target, instr.operands[0], instr.operands[1],
                         instr.operands[2] if fused else None,
                         instr.operands[3] if expected == 4 else None, scale, side_scale,
                         ACTIVATIONS[mode], config_number(config, "leakyrelu_alpha", 0, instr),
                         result, feature_dim, workspace, is_tuple, attrs)


def _outputs(instr: HloInstruction) -> tuple[ArrayShape, bool, bool]:
    shape = instr.shape
    if isinstance(shape, ArrayShape):
        return shape, False, False
    parts = list(shape.elements) if isinstance(shape, TupleShape) else []
    if not parts or not all(isinstance(p, ArrayShape) for p in parts) or len(parts) > 2 \
            or (len(parts) == 2 and (parts[1].dtype not in ("u8", "s8") or parts[1].rank != 1)):
        raise custom_call_error(instr, f"result {shape} is not (result[, u8 scratch])")
    return parts[0], len(parts) == 2, True


__all__ = ["ACTIVATIONS", "CONV_TARGETS", "CudnnConvCall", "REFUSED_CONV_TARGETS",
           "cudnn_conv_call", "is_cudnn_conv_call"]
