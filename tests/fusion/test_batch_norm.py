"""The batch-norm ops (TensorFlow's fused batch norm as tf2xla writes it): the evaluator
against NumPy's f64 formulas (XLA's operation semantics) and against XLA running the op
itself, the verifier's located errors, and the expansion the compiler starts from."""
from __future__ import annotations

import numpy as np
import pytest

from fusion.errors import FusionCompilerError
from fusion.evaluator import evaluate
from fusion.shapes.verifier import verify_module
from fusion.text.parser import parse_hlo
from fusion.transforms.plain_ops import plain_ops

EPS = 0.001


def training_text(dims: tuple[int, ...], feature: int, dtype: str = "f32") -> str:
    """A module that is one training batch norm."""
    x = f"{dtype}[{','.join(map(str, dims))}]"
    f = f"{dtype}[{dims[feature]}]"
    return f"""HloModule bn
ENTRY e {{
  x = {x} parameter(0)
  s = {f} parameter(1)
  o = {f} parameter(2)
  ROOT t = ({x}, {f}, {f}) batch-norm-training(x, s, o), epsilon={EPS}, feature_index={feature}
}}
"""


def module_text(dims: tuple[int, ...], feature: int, dtype: str = "f32") -> str:
    """Training, inference with the batch statistics, and grad, of one activation."""
    x = f"{dtype}[{','.join(map(str, dims))}]"
    f = f"{dtype}[{dims[feature]}]"
    attrs = f"epsilon={EPS}, feature_index={feature}"
    return f"""HloModule bn
ENTRY e {{
  x = {x} parameter(0)
  s = {f} parameter(1)
  o = {f} parameter(2)
  dy = {x} parameter(3)
  t = ({x}, {f}, {f}) batch-norm-training(x, s, o), {attrs}
  y = {x} get-tuple-element(t), index=0
  mean = {f} get-tuple-element(t), index=1
  var = {f} get-tuple-element(t), index=2
  yi = {x} batch-norm-inference(x, s, o, mean, var), {attrs}
  g = ({x}, {f}, {f}) batch-norm-grad(x, s, mean, var, dy), {attrs}
  gx = {x} get-tuple-element(g), index=0
  gs = {f} get-tuple-element(g), index=1
  go = {f} get-tuple-element(g), index=2
  ROOT r = ({x}, {f}, {f}, {x}, {x}, {f}, {f}) tuple(y, mean, var, yi, gx, gs, go)
}}
"""


def inputs(dims: tuple[int, ...], feature: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(dims) * 2 + 0.5
    s, o = rng.standard_normal(dims[feature]), rng.standard_normal(dims[feature])
    return [a.astype(np.float32) for a in (x, s, o, rng.standard_normal(dims))]


def formulas(x, s, o, dy, feature: int) -> list[np.ndarray]:
    """XLA's operation semantics in f64: the batch statistics (biased variance), the
    normalized output, and the gradients of the training output."""
    x, s, o, dy = (np.asarray(a, np.float64) for a in (x, s, o, dy))
    axes = tuple(d for d in range(x.ndim) if d != feature)
    shape = [1] * x.ndim
    shape[feature] = -1
    mean, var = x.mean(axis=axes), x.var(axis=axes)
    r = 1 / np.sqrt(var + EPS)
    xhat = (x - mean.reshape(shape)) * r.reshape(shape)
    y = xhat * s.reshape(shape) + o.reshape(shape)
    go, gs = dy.sum(axis=axes), (dy * xhat).sum(axis=axes)
    n = x.size / x.shape[feature]
    gx = (s * r).reshape(shape) / n * (n * dy - go.reshape(shape) - xhat * gs.reshape(shape))
    return [y, mean, var, y, gx, gs, go]


CASES = [((6, 5), 1), ((4, 3, 5, 2), 1), ((4, 3, 5, 2), 3), ((7,), 0), ((3, 4, 5), 0)]


@pytest.mark.parametrize("dims, feature", CASES)
def test_the_evaluator_computes_xlas_formulas(dims, feature):
    args = inputs(dims, feature)
    got = evaluate(parse_hlo(module_text(dims, feature)), *args)
    for g, w in zip(got, formulas(*args, feature)):
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("dims, feature", CASES[:3])
def test_the_evaluator_matches_xla_running_the_ops(dims, feature, dtype):
    pytest.importorskip("jax")
    import ml_dtypes

    from tests.conformance.xla_oracle import run_xla

    text = module_text(dims, feature, dtype)
    args = inputs(dims, feature, seed=1)
    if dtype == "bf16":
        args = [a.astype(ml_dtypes.bfloat16) for a in args]
    want = run_xla(text, *args)
    got = evaluate(parse_hlo(text), *args)
    tol = 1e-5 if dtype == "f32" else 0.0
    for n, (g, w) in enumerate(zip(got, want)):
        g, w = np.asarray(g, np.float32), np.asarray(w, np.float32)
        # bf16: the same ops rounded per op; XLA's reductions may sum in another order.
        limit = tol + (2e-2 * np.abs(w).max() if dtype == "bf16" else 0.0)
        assert np.abs(g - w).max() <= limit + 1e-5 * np.abs(w).max(), f"o{n}"


def test_plain_ops_writes_them_as_reductions_and_elementwise_ops():
    m = plain_ops(parse_hlo(module_text((4, 3, 5, 2), 1)))
    verify_module(m)
    opcodes = {i.opcode for c in m.computations for i in c}
    assert not any(op.startswith("batch-norm") for op in opcodes)
    assert {"reduce", "rsqrt", "broadcast"} <= opcodes
    args = inputs((4, 3, 5, 2), 1)
    for g, w in zip(evaluate(m, *args), formulas(*args, 1)):
        np.testing.assert_allclose(g, w, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("line, message", [
    ("batch-norm-training(x, s, o), epsilon=0.001, feature_index=2", "feature_index 2"),
    ("batch-norm-training(x, s, w), epsilon=0.001, feature_index=1", "offset"),
    ("batch-norm-training(x, s, o), feature_index=1", "epsilon"),
    ("batch-norm-training(x, s), epsilon=0.001, feature_index=1", "operand"),
])
def test_a_wrong_batch_norm_is_a_located_error(line, message):
    text = f"""HloModule m
ENTRY e {{
  x = f32[4,3] parameter(0)
  s = f32[3] parameter(1)
  o = f32[3] parameter(2)
  w = f32[4] parameter(3)
  ROOT t = (f32[4,3], f32[3], f32[3]) {line}
}}
"""
    with pytest.raises(FusionCompilerError) as error:
        verify_module(parse_hlo(text))
    assert message in str(error.value) and str(error.value).startswith("7:3:")


def test_an_integer_activation_is_refused():
    text = """HloModule m
ENTRY e {
  x = s32[4,3] parameter(0)
  s = s32[3] parameter(1)
  ROOT y = s32[4,3] batch-norm-inference(x, s, s, s, s), epsilon=0.5, feature_index=1
}
"""
    with pytest.raises(FusionCompilerError, match="element type s32"):
        verify_module(parse_hlo(text))


@pytest.mark.parametrize("dims, feature", [((4, 3, 5), 1), ((6, 4), 0)])
def test_the_vjp_differentiates_the_expansion(dims, feature):
    # f64, so central differences are exact enough; grad's own gradient included.
    from tests.fusion.autodiff.finite_differences import check_directional_derivatives

    module = parse_hlo(module_text(dims, feature, "f64"))
    args = [a.astype(np.float64) for a in inputs(dims, feature, seed=2)]
    check_directional_derivatives(module, args, eps=1e-6, rtol=1e-5)
