"""fusion.transforms.promote_floats: the module computed in f64, against NumPy in f64."""
from __future__ import annotations

import numpy as np
import pytest

from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo
from fusion.transforms.promote_floats import promote_floats

SOFTMAX_SUM = '''HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = bf16[8,64] parameter(0)
  w = f32[64,32] parameter(1)
  xf = f32[8,64] convert(x)
  d = f32[8,32] dot(xf, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  e = f32[8,32] exponential(d)
  z = f32[] constant(0)
  s = f32[8] reduce(e, z), dimensions={1}, to_apply=add
  h = bf16[8] convert(s)
  ROOT t = (f32[8], bf16[8]) tuple(s, h)
}'''


def test_every_narrow_float_becomes_f64_and_values_match_numpy_in_f64():
    module = parse_hlo(SOFTMAX_SUM)
    promoted = promote_floats(module)
    types = {i.shape.dtype for c in promoted.computations for i in c
             if not i.shape.is_tuple}
    assert types == {"f64"}
    rng = np.random.default_rng(0)
    x, w = rng.normal(size=(8, 64)), rng.normal(size=(64, 32)) * 0.1
    s, h = evaluate(promoted, x, w)
    want = np.exp(x @ w).sum(axis=1)
    np.testing.assert_allclose(s, want, rtol=1e-12)
    np.testing.assert_allclose(h, want, rtol=1e-12)  # the convert to bf16 no longer rounds


@pytest.mark.parametrize("body", [
    "ROOT b = s32[4] bitcast-convert(x)",
    "ROOT r = f32[4] reduce-precision(x), exponent_bits=5, mantissa_bits=10",
    "ROOT b = s32[4]{0} bitcast(x)",  # XLA's optimized form of a bitcast-convert
    "i = u32[4] bitcast-convert(x)\n  k = u32[] constant(9)\n  kk = u32[4] broadcast(k), "
    "dimensions={}\n  m = u32[4] shift-right-logical(i, kk)\n  ROOT u = f32[4] "
    "bitcast-convert(m)",  # a uniform float from random bits
])
def test_width_dependent_ops_run_at_their_own_types(body):
    """Such an op sees its operands at their own types and its float result is widened
    after it: the promoted module gives what the module gives on f32 inputs."""
    module = parse_hlo(f"HloModule m\nENTRY e {{\n  x = f32[4] parameter(0)\n  {body}\n}}")
    promoted = promote_floats(module)
    root = promoted.entry.root
    assert root.name == module.entry.root.name
    assert root.shape.dtype == ("f64" if module.entry.root.shape.dtype == "f32" else "s32")
    x = np.array([1.5, -3.25e-3, 7e5, 0.1], np.float32)
    (want,) = evaluate(module, x)
    (got,) = evaluate(promoted, x.astype(np.float64))
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want).astype(got.dtype))


def test_a_width_dependent_op_making_a_tuple_of_floats_is_not_promoted():
    text = """HloModule m
ENTRY e {
  s = u64[2] parameter(0)
  ROOT r = (u64[2], f32[4]) rng-bit-generator(s), algorithm=rng_philox
}"""
    assert promote_floats(parse_hlo(text)) is None


def test_physical_layouts_are_not_promoted_and_dot_algorithms_are_dropped():
    tiled = parse_hlo('''HloModule m
ENTRY e {
  x = bf16[256,512]{1,0:T(8,128)(2,1)} parameter(0)
  ROOT n = bf16[256,512]{1,0:T(8,128)(2,1)} negate(x)
}''')
    assert promote_floats(tiled) is None
    algorithm = parse_hlo('''HloModule m
ENTRY e {
  a = f32[4,8] parameter(0)
  b = f32[8,4] parameter(1)
  ROOT d = f32[4,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}, algorithm=dot_bf16_bf16_f32
}''')
    promoted = promote_floats(algorithm)
    assert str(promoted.entry.root.shape) == "f64[4,4]"
    assert not promoted.entry.root.has_attr("algorithm")
    # the promoted dot is the exact product the algorithm rounds
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((4, 8)), rng.standard_normal((8, 4))
    np.testing.assert_allclose(np.asarray(evaluate(promoted, a, b)[0]), a @ b, rtol=1e-12)


def test_integers_and_pred_keep_their_types():
    module = parse_hlo('''HloModule m
ENTRY e {
  x = s32[4] parameter(0)
  y = f16[4] parameter(1)
  c = f16[4] convert(x)
  p = pred[4] compare(c, y), direction=LT
  ROOT s = s32[4] select(p, x, x)
}''')
    shapes = {i.name: i.shape.dtype for i in promote_floats(module).entry}
    assert shapes == {"x": "s32", "y": "f64", "c": "f64", "p": "pred", "s": "s32"}
