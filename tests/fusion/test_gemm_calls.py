"""XLA:GPU's cuBLAS GEMM custom-calls (``__cublas$gemm``, ``__cublas$lt$matmul``): decoded
(``fusion.analysis.gemm_calls``), evaluated (``evaluator/gemm_ops``) and written as HLO ops
(``transforms/gpu_call_expansion``).  Both are checked against the formula computed here with
torch (its own matmul and tanh GELU), and against each other; the compiled kernels in
``tests/triton_backend/test_gemm_custom_calls.py``.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion.analysis.gemm_calls import gemm_call
from fusion.errors import UnsupportedOpError
from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo
from fusion.transforms.gpu_call_expansion import expand_gpu_library_calls
from fusion.shapes.verifier import verify_module


def gemm_module(*, target="__cublas$lt$matmul", dtype="f32", m=4, k=8, n=6, alpha=1.0,
                beta=0.0, epilogue="DEFAULT", out_layout="{1,0}", workspace=True,
                aux=False, tuple_result=True, root="pick", wrapper=True, batch=0) -> str:
    """HLO text as XLA:GPU prints a GEMM custom-call, ``a[m,k] x b[k,n]`` (with ``batch``:
    ``a[batch,m,k] x b[batch,k,n]``)."""
    lead = f"{batch}," if batch else ""
    params = [f"a = {dtype}[{lead}{m},{k}] parameter(0)",
              f"b = {dtype}[{lead}{k},{n}] parameter(1)"]
    operands = ["a", "b"]
    if beta != 0:
        params.append(f"c = {dtype}[{lead}{m},{n}]{out_layout} parameter({len(params)})")
        operands.append("c")
    if "BIAS" in epilogue:
        params.append(f"z = {dtype}[{n}] parameter({len(params)})")
        operands.append("z")
    result = f"{dtype}[{lead}{m},{n}]{out_layout}"
    parts = [result] + ([result] if aux else []) + (["s8[1024]{0}"] if workspace else [])
    shape = f"({', '.join(parts)})" if tuple_result else result
    gemm = {"alpha_real": alpha, "alpha_imag": 0, "beta": beta, "epilogue": epilogue,
            "dot_dimension_numbers": {"lhs_contracting_dimensions": ["2" if batch else "1"],
                                      "rhs_contracting_dimensions": ["1" if batch else "0"],
                                      "lhs_batch_dimensions": ["0"] if batch else [],
                                      "rhs_batch_dimensions": ["0"] if batch else []},
            "precision_config": {"operand_precision": ["DEFAULT", "DEFAULT"],
                                 "algorithm": "ALG_UNSET"}}
    config = {"operation_queue_id": "0", "gemm_backend_config": gemm} if wrapper else gemm
    lines = params + [
        f'g = {shape} custom-call({", ".join(operands)}), custom_call_target="{target}", '
        f"backend_config={json.dumps(config, separators=(',', ':'))}"]
    if not tuple_result:
        lines.append(f"ROOT r = {result} negate(g)")
    elif root == "whole":
        lines.append(f"ROOT t = ({shape}) tuple(g)")
    else:
        lines.append(f"d = {result} get-tuple-element(g), index=0")
        if aux:
            lines.append(f"x = {result} get-tuple-element(g), index=1")
            lines.append(f"ROOT r = ({result}, {result}) tuple(d, x)")
        else:
            lines.append(f"ROOT r = {result} negate(d)")
    return "HloModule m\nENTRY e {\n  " + "\n  ".join(lines) + "\n}\n"


def _inputs(text: str, seed: int = 0) -> list[np.ndarray]:
    module = parse_hlo(text)
    rng = np.random.default_rng(seed)
    dtypes = {"f32": np.float32, "f16": np.float16, "f64": np.float64}
    import ml_dtypes  # noqa: PLC0415

    dtypes["bf16"] = ml_dtypes.bfloat16
    return [rng.standard_normal(p.shape.dims).astype(np.float32).astype(dtypes[p.shape.dtype])
            for p in module.entry.parameters]


def _formula(arrays, alpha, beta, epilogue) -> tuple[np.ndarray, np.ndarray]:
    """D and the pre-activation value, in f64 by torch (the independent truth)."""
    a, b, *rest = [torch.from_numpy(np.asarray(x, np.float64)) for x in arrays]  # a @ b batches
    x = alpha * (a @ b)
    if beta != 0:
        x = x + beta * rest.pop(0)
    if "BIAS" in epilogue:
        x = x + rest.pop(0)
    pre = x
    if "RELU" in epilogue:
        x = torch.relu(x)
    elif "GELU" in epilogue:
        x = torch.nn.functional.gelu(x, approximate="tanh")
    return x.numpy(), pre.numpy()


CASES = {
    "gemm_plain": dict(target="__cublas$gemm"),
    "gemm_alpha_beta": dict(target="__cublas$gemm", alpha=0.5, beta=2.0),
    "gemm_beta_one_bf16": dict(target="__cublas$gemm", dtype="bf16", beta=1.0),
    "lt_bias": dict(epilogue="BIAS"),
    "lt_relu_f16": dict(epilogue="RELU", dtype="f16"),
    "lt_bias_relu_column_major": dict(epilogue="BIAS_RELU", out_layout="{0,1}"),
    "lt_gelu": dict(epilogue="GELU"),
    "lt_bias_gelu_bf16": dict(epilogue="BIAS_GELU", dtype="bf16", alpha=2.0),
    "lt_bias_gelu_aux": dict(epilogue="BIAS_GELU_AUX", aux=True),
    "lt_no_workspace": dict(epilogue="RELU", workspace=False),
    "lt_array_result": dict(tuple_result=False, workspace=False, beta=1.0),
    "lt_taken_whole": dict(epilogue="BIAS", root="whole"),
    "old_dump_without_wrapper": dict(target="__cublas$gemm", wrapper=False, alpha=3.0),
    "batched_bias_layout": dict(batch=3, epilogue="BIAS", beta=1.0, out_layout="{1,2,0}"),
}
TOLERANCE = {"f32": 1e-5, "f16": 4e-3, "bf16": 2e-2}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_evaluator_and_the_expansion_compute_the_formula(name):
    case = CASES[name]
    text = gemm_module(**case)
    module = parse_hlo(text)
    expanded = expand_gpu_library_calls(module)
    verify_module(expanded)
    assert not any(i.opcode == "custom-call" for i in expanded.entry)
    arrays = _inputs(text)
    got = evaluate(module, *arrays)
    again = evaluate(expanded, *arrays)
    for x, y in zip(got, again):  # the same ops in the same types: bit for bit
        np.testing.assert_array_equal(x, y)
    want, pre = _formula(arrays, case.get("alpha", 1.0), case.get("beta", 0.0),
                         case.get("epilogue", "DEFAULT"))
    tol = TOLERANCE[case.get("dtype", "f32")] * max(1.0, np.abs(want).max())
    d = np.asarray(got[0], np.float64)  # the ROOT's outputs, flattened
    negated = case.get("root") != "whole" and not case.get("aux")
    np.testing.assert_allclose(-d if negated else d, want, atol=tol)
    if case.get("aux"):
        np.testing.assert_allclose(np.asarray(got[1], np.float64), pre, atol=tol)
    if case.get("root") == "whole" and case.get("workspace", True):
        assert not np.asarray(got[-1]).any()  # the workspace, zero


def test_only_read_outputs_are_built():
    expanded = expand_gpu_library_calls(parse_hlo(gemm_module(epilogue="RELU")))
    ops = [(i.name, i.opcode) for i in expanded.entry]
    assert ("d", "maximum") in ops  # D's op under its reader's name
    assert not any(op in ("tuple", "get-tuple-element") for _, op in ops)
    assert not any(i.shape.dtype == "s8" for i in expanded.entry)  # no workspace filled
    whole = expand_gpu_library_calls(parse_hlo(gemm_module(root="whole")))
    assert whole.entry.instruction("g").opcode == "tuple"


@pytest.mark.parametrize("change, message", [
    (dict(target="__cublas$gemm", epilogue="SILU"), "epilogue SILU is not supported"),
    (dict(beta=1.0), None),
])
def test_bad_configurations_are_located_errors(change, message):
    text = gemm_module(**change)
    if message is None:  # beta given but C dropped: the operand count says so
        text = text.replace("custom-call(a, b, c)", "custom-call(a, b)")
        message = "takes 2 operands; beta=1 and epilogue DEFAULT mean 3"
    module = parse_hlo(text)
    with pytest.raises(UnsupportedOpError, match=message) as err:
        expand_gpu_library_calls(module)
    call_line = next(n for n, line in enumerate(text.splitlines(), 1) if "custom-call" in line)
    assert (err.value.line, err.value.column) == (call_line, 3)


def test_complex_alpha_and_fp8_are_refused_by_name():
    text = gemm_module().replace('"alpha_imag":0', '"alpha_imag":1')
    with pytest.raises(UnsupportedOpError, match="complex alpha"):
        gemm_call(parse_hlo(text).entry.instruction("g"))
    fp8 = parse_hlo(gemm_module(target="__cublas$lt$matmul$f8"))
    assert expand_gpu_library_calls(fp8) is fp8  # not a GEMM this project computes: left for coverage


def test_a_gemm_call_differentiates_as_what_it_computes():
    from fusion.autodiff import vjp  # noqa: PLC0415

    text = gemm_module(target="__cublas$gemm", alpha=0.5, beta=2.0, tuple_result=False,
                       workspace=False)
    module = parse_hlo(text)
    arrays = _inputs(text, seed=1)
    ct = np.random.default_rng(2).standard_normal((4, 6)).astype(np.float32)
    grads = evaluate(vjp(module), *arrays, ct)
    a, b, c = (torch.tensor(x, dtype=torch.float64, requires_grad=True) for x in arrays)
    (-(0.5 * (a @ b) + 2.0 * c)).backward(torch.from_numpy(ct.astype(np.float64)))
    for got, want in zip(grads, (a.grad, b.grad, c.grad)):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=True)
    | st.sampled_from(["", "1", "x", "BIAS", "kRelu", "ALG_DOT_BF16_BF16_F32"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["lhs_contracting_dimensions", "operand_precision", "algorithm"]),
        inner, max_size=3), max_leaves=6)
_GEMM_KEYS = ["alpha_real", "alpha_imag", "beta", "epilogue", "dot_dimension_numbers",
              "precision_config"]


@settings(max_examples=150, deadline=None)
@given(key=st.sampled_from(_GEMM_KEYS), value=_JSON_VALUES,
       conv=st.booleans())
def test_any_backend_config_value_is_computed_or_a_located_error(key, value, conv):
    """Garbage in a GEMM's or a convolution's backend config: never a raw traceback."""
    from fusion.errors import FusionCompilerError  # noqa: PLC0415
    from tests.fusion.test_cudnn_conv_calls import conv_module  # noqa: PLC0415

    if conv:
        text = conv_module()
        key = {"alpha_real": "conv_result_scale", "beta": "side_input_scale",
               "epilogue": "activation_mode"}.get(key, "leakyrelu_alpha")
        message = "cudnn_conv_backend_config"
    else:
        text = gemm_module(epilogue="BIAS")
        message = "gemm_backend_config"
    line = next(line for line in text.splitlines() if "custom-call" in line)
    config = json.loads(line.split("backend_config=", 1)[1])
    config[message][key] = value
    changed = text.replace(line, line.split("backend_config=", 1)[0] + "backend_config="
                           + json.dumps(config, separators=(",", ":")))
    module = parse_hlo(changed)
    try:
        expanded = expand_gpu_library_calls(module)
        verify_module(expanded)
        evaluate(module, *_inputs(changed))
    except FusionCompilerError as err:
        assert err.line is not None or err.where, err
