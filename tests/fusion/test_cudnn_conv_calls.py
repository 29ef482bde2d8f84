"""XLA:GPU's cuDNN convolution custom-calls (``__cudnn$convForward``,
``__cudnn$convBiasActivationForward``): decoded (``fusion.analysis.cudnn_conv_calls``),
evaluated (``evaluator/cudnn_conv_ops``) and written as HLO ops
(``transforms/gpu_call_expansion``), both checked against torch's ``conv2d`` and activations;
compiled in ``tests/triton_backend/test_gemm_custom_calls.py``.
"""
from __future__ import annotations

import json

import ml_dtypes
import numpy as np
import pytest
import torch

from fusion.errors import UnsupportedOpError
from fusion.evaluator import evaluate
from fusion.shapes.verifier import verify_module
from fusion.text.parser import parse_hlo
from fusion.transforms.gpu_call_expansion import expand_gpu_library_calls

ACTIVATION_OF = {"kNone": lambda x, a: x, "kRelu": lambda x, a: torch.relu(x),
                 "kRelu6": lambda x, a: torch.clamp(x, 0, 6),
                 "kElu": lambda x, a: torch.nn.functional.elu(x),
                 "kLeakyRelu": lambda x, a: torch.nn.functional.leaky_relu(x, a),
                 "kSigmoid": lambda x, a: torch.sigmoid(x), "kTanh": lambda x, a: torch.tanh(x)}


def conv_module(*, target="__cudnn$convBiasActivationForward", dtype="f32", mode="kRelu",
                scale=1.0, side_scale=0.0, alpha=0.0, layout="nhwc", groups=1, stride=1,
                scratch=True) -> str:
    """A 2-D convolution of x[2,6,6,4] (NHWC; or NCHW) with w[3,3,4/groups,8] as XLA:GPU
    prints its cuDNN custom-call."""
    fused = target.endswith("BiasActivationForward")
    out = 6 // stride
    if layout == "nhwc":
        x, w, y, labels = "[2,6,6,4]", f"[3,3,{4 // groups},8]", f"[2,{out},{out},8]", \
            "b01f_01io->b01f"
    else:
        x, w, y, labels = "[2,4,6,6]", f"[8,{4 // groups},3,3]", f"[2,8,{out},{out}]", \
            "bf01_oi01->bf01"
    params = [f"x = {dtype}{x} parameter(0)", f"w = {dtype}{w} parameter(1)"]
    operands = ["x", "w"]
    if fused:
        params.append(f"b = {dtype}[8] parameter(2)")
        operands.append("b")
        if side_scale:
            params.append(f"s = {dtype}{y} parameter(3)")
            operands.append("s")
    config = {"operation_queue_id": "0", "cudnn_conv_backend_config": {
        "activation_mode": mode, "conv_result_scale": scale, "side_input_scale": side_scale,
        "leakyrelu_alpha": alpha}}
    shape = f"({dtype}{y}, u8[0]{{0}})" if scratch else f"({dtype}{y})"
    window = f"size=3x3 stride={stride}x{stride} pad=1_1x1_1"
    groups_attr = f", feature_group_count={groups}" if groups > 1 else ""
    call = (f'c = {shape} custom-call({", ".join(operands)}), window={{{window}}}, '
            f'dim_labels={labels}{groups_attr}, custom_call_target="{target}", '
            f"backend_config={json.dumps(config, separators=(',', ':'))}")
    return _module(params, call, f"{dtype}{y}")


def _module(params: list[str], call: str, result: str) -> str:
    """The ENTRY of ``params``, the custom-call ``c`` and a ROOT reading its ``result``."""
    return ("HloModule m\nENTRY e {\n  " + "\n  ".join(params + [call]) +
            f"\n  ROOT g = {result} get-tuple-element(c), index=0\n}}\n")


def conv_inputs(text: str, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    types = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}
    return [rng.standard_normal(p.shape.dims).astype(np.float32).astype(types[p.shape.dtype])
            for p in parse_hlo(text).entry.parameters]


def _torch_truth(arrays, case) -> np.ndarray:
    t = [torch.from_numpy(np.asarray(a, np.float64)) for a in arrays]
    x, w = t[0], t[1]
    if case.get("layout", "nhwc") == "nhwc":
        x, w = x.permute(0, 3, 1, 2), w.permute(3, 2, 0, 1)
    y = torch.nn.functional.conv2d(x, w, stride=case.get("stride", 1), padding=1,
                                   groups=case.get("groups", 1)) * case.get("scale", 1.0)
    if case.get("layout", "nhwc") == "nhwc":
        y = y.permute(0, 2, 3, 1)
    fused = case.get("target", "__cudnn$convBiasActivationForward").endswith("Forward") \
        and "Bias" in case.get("target", "__cudnn$convBiasActivationForward")
    if fused:
        feature = 3 if case.get("layout", "nhwc") == "nhwc" else 1
        shape = [1, 1, 1, 1]
        shape[feature] = -1
        if case.get("side_scale"):
            y = y + case["side_scale"] * t[3]
        y = y + t[2].reshape(shape)
        y = ACTIVATION_OF[case.get("mode", "kRelu")](y, case.get("alpha", 0.0))
    return y.numpy()


CASES = {
    "forward_f32": dict(target="__cudnn$convForward", mode="kNone"),
    "forward_bf16_scaled_nchw": dict(target="__cudnn$convForward", mode="kNone", dtype="bf16",
                                     scale=0.5, layout="nchw"),
    "bias_relu": dict(),
    "bias_relu6_side_f16": dict(mode="kRelu6", dtype="f16", side_scale=0.5),
    "bias_elu_strided": dict(mode="kElu", stride=2),
    "bias_leaky_grouped": dict(mode="kLeakyRelu", alpha=0.1, groups=2),
    "bias_sigmoid": dict(mode="kSigmoid"),
    "bias_tanh_no_scratch": dict(mode="kTanh", scratch=False),
}
TOLERANCE = {"f32": 2e-5, "f16": 4e-3, "bf16": 2e-2}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_evaluator_and_the_expansion_compute_the_formula(name):
    case = CASES[name]
    text = conv_module(**case)
    module = parse_hlo(text)
    expanded = expand_gpu_library_calls(module)
    verify_module(expanded)
    arrays = conv_inputs(text)
    want = _torch_truth(arrays, case)
    tol = TOLERANCE[case.get("dtype", "f32")] * max(1.0, np.abs(want).max())
    for got in (evaluate(module, *arrays)[0], evaluate(expanded, *arrays)[0]):
        np.testing.assert_allclose(np.asarray(got, np.float64), want, atol=tol)


def backward_module(direction: str, *, stride: int = 1, dtype: str = "f32",
                    scale: float = 1.0, groups: int = 1) -> str:
    """cuDNN's backward convolution of the forward x[2,6,6,4] (b01f) * w[3,3,4/groups,8]
    (01io), pad 1, ``stride``, ``groups`` feature groups: ``convBackwardInput(dy, w) -> x``
    or ``convBackwardFilter(x, dy) -> w``."""
    out = (6 + 2 - 3) // stride + 1
    x, w, dy = f"{dtype}[2,6,6,4]", f"{dtype}[3,3,{4 // groups},8]", f"{dtype}[2,{out},{out},8]"
    target, params, result = {
        "input": ("__cudnn$convBackwardInput", [f"dy = {dy} parameter(0)", f"w = {w} parameter(1)"], x),
        "filter": ("__cudnn$convBackwardFilter", [f"x = {x} parameter(0)", f"dy = {dy} parameter(1)"], w),
    }[direction]
    operands = "dy, w" if direction == "input" else "x, dy"
    config = {"cudnn_conv_backend_config": {"activation_mode": "kNone",
                                            "conv_result_scale": scale, "side_input_scale": 0}}
    grouped = f"feature_group_count={groups}, " if groups > 1 else ""
    call = (f"c = ({result}, u8[0]{{0}}) custom-call({operands}), window={{size=3x3 "
            f"stride={stride}x{stride} pad=1_1x1_1}}, dim_labels=b01f_01io->b01f, {grouped}"
            f'custom_call_target="{target}", backend_config={json.dumps(config)}')
    return _module(params, call, result)


@pytest.mark.parametrize("direction", ["input", "filter"])
@pytest.mark.parametrize("stride, groups", [(1, 1), (2, 1), (2, 2), (1, 4)])
def test_a_backward_convolution_is_the_forward_ones_gradient(direction, stride, groups):
    text = backward_module(direction, stride=stride, scale=0.5, groups=groups)
    module = parse_hlo(text)
    expanded = expand_gpu_library_calls(module)
    verify_module(expanded)
    a, b = conv_inputs(text)
    nchw = [torch.from_numpy(np.asarray(v, np.float64)).permute(0, 3, 1, 2) for v in (a, b)]
    if direction == "input":  # a = dy, b = w (01io -> oi01)
        w = torch.from_numpy(np.asarray(b, np.float64)).permute(3, 2, 0, 1)
        want = torch.nn.grad.conv2d_input((2, 4, 6, 6), w, nchw[0], stride=stride, padding=1,
                                          groups=groups)
        want = want.permute(0, 2, 3, 1)
    else:  # a = x, b = dy
        want = torch.nn.grad.conv2d_weight(nchw[0], (8, 4 // groups, 3, 3), nchw[1],
                                           stride=stride, padding=1,
                                           groups=groups).permute(2, 3, 1, 0)
    want = 0.5 * want.numpy()
    for got in (evaluate(module, a, b)[0], evaluate(expanded, a, b)[0]):
        np.testing.assert_allclose(np.asarray(got, np.float64), want, atol=1e-4)


@pytest.mark.parametrize("text_change, message", [
    (("kRelu", "kBandPass"), "activation_mode kBandPass is not supported"),
    (("custom-call(x, w, b)", "custom-call(x, w)"), "takes 2 operands, not the 3"),
])
def test_what_is_not_computed_is_a_located_error(text_change, message):
    text = conv_module().replace(*text_change)
    with pytest.raises(UnsupportedOpError, match=message) as err:
        expand_gpu_library_calls(parse_hlo(text))
    assert (err.value.line, err.value.column) == (6, 3)  # the custom-call


def test_a_backward_convolution_with_batch_groups_is_refused_located():
    text = backward_module("filter").replace("dim_labels=", "batch_group_count=2, dim_labels=")
    with pytest.raises(UnsupportedOpError, match="with batch groups is not supported") as err:
        expand_gpu_library_calls(parse_hlo(text))
    assert err.value.line == 5
