"""``vjp``'s contract: parameters and results, which parameters are differentiated, dead code
dropped, and clear located errors for what it cannot differentiate."""
from __future__ import annotations

import numpy as np
import pytest

from fusion.autodiff import vjp
from fusion.errors import BadArgumentError, UnsupportedOpError
from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo
from fusion.text.printer import print_hlo
from fusion.ir.shape import TupleShape

FORWARD = parse_hlo("""HloModule f
ENTRY e {
  x = f32[3] parameter(0)
  n = s32[3] parameter(1)
  w = f32[3] parameter(2)
  c = f32[3] convert(n)
  m = f32[3] multiply(x, w)
  s = f32[3] add(m, c)
  e = f32[3] exponential(w)
  ROOT t = (f32[3], s32[3], f32[3]) tuple(s, n, e)
}
""")


def test_parameters_and_result() -> None:
    backward = vjp(FORWARD)
    params = backward.entry.parameters
    # The forward's parameters, then one cotangent per output leaf (integers included).
    assert [str(p.shape) for p in params] == ["f32[3]", "s32[3]", "f32[3]", "f32[3]", "s32[3]",
                                              "f32[3]"]
    assert backward.entry.root.shape == TupleShape((params[0].shape, params[2].shape))
    x, n, w = np.float32([1, 2, 3]), np.int32([1, 1, 1]), np.float32([0.5, -1, 2])
    ct_s, ct_e = np.float32([1, -2, 0.5]), np.float32([0.25, 1, -1])
    gx, gw = evaluate(backward, x, n, w, ct_s, np.zeros(3, np.int32), ct_e)
    np.testing.assert_allclose(gx, ct_s * w, rtol=1e-6)
    np.testing.assert_allclose(gw, ct_s * x + ct_e * np.exp(w), rtol=1e-6)


def test_wrt_picks_and_orders_the_gradients() -> None:
    backward = vjp(FORWARD, [2, 0])
    x, n, w = np.float32([1, 2, 3]), np.int32([0, 0, 0]), np.float32([0.5, -1, 2])
    ct = np.float32([1, 1, 1])
    gw, gx = evaluate(backward, x, n, w, ct, n, np.zeros(3, np.float32))
    np.testing.assert_allclose(gw, x)
    np.testing.assert_allclose(gx, w)


def test_values_no_gradient_reads_are_not_computed() -> None:
    # Only x is differentiated: exp(w) and the convert feed no gradient of x.
    opcodes = {i.opcode for i in vjp(FORWARD, [0]).entry.instructions}
    assert "exponential" not in opcodes and "convert" not in opcodes
    assert "exponential" in {i.opcode for i in vjp(FORWARD, [2]).entry.instructions}


def test_backward_module_prints_and_parses_back() -> None:
    backward = vjp(FORWARD)
    assert parse_hlo(print_hlo(backward)) == backward


@pytest.mark.parametrize("wrt, message", [
    ([3], "wrt index 3 is not a parameter"),
    ([1], "only floating-point and complex arrays have gradients"),
    ([0, 0], "names a parameter twice"),
])
def test_bad_wrt_is_an_argument_error(wrt, message) -> None:
    with pytest.raises(BadArgumentError, match=message):
        vjp(FORWARD, wrt)


def test_an_op_without_a_rule_is_a_located_error() -> None:
    module = parse_hlo("""HloModule m
ENTRY e {
  x = f32[3] parameter(0)
  y = f32[3] parameter(1)
  c = f32[3] custom-call(x), custom_call_target="opaque"
  d = f32[3] custom-call(y), custom_call_target="opaque"
  ROOT s = f32[3] add(c, d)
}""")
    with pytest.raises(UnsupportedOpError) as info:
        vjp(module)
    assert info.value.line == 6 and info.value.column == 3
    assert "no VJP rule for op custom-call (%d)" in str(info.value)
    # Off the differentiated paths the op needs no rule: y alone is not differentiated.
    with pytest.raises(UnsupportedOpError):
        vjp(module, [1])


def test_a_loop_without_a_known_trip_count_is_a_located_error() -> None:
    module = parse_hlo("""HloModule m
body {
  s = (s32[], f32[2]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  one = s32[] constant(1)
  j = s32[] add(i, one)
  v = f32[2] get-tuple-element(s), index=1
  w = f32[2] multiply(v, v)
  ROOT t = (s32[], f32[2]) tuple(j, w)
}
cond {
  s = (s32[], f32[2]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  v = f32[2] get-tuple-element(s), index=1
  z = f32[] constant(0)
  r = f32[] reduce(v, z), dimensions={0}, to_apply=add
  k = s32[] convert(r)
  ROOT lt = pred[] compare(i, k), direction=LT
}
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] add(a, b)
}
ENTRY e {
  x = f32[2] parameter(0)
  z = s32[] constant(0)
  t = (s32[], f32[2]) tuple(z, x)
  w = (s32[], f32[2]) while(t), condition=cond, body=body
  ROOT r = f32[2] get-tuple-element(w), index=1
}""")
    with pytest.raises(UnsupportedOpError, match="no VJP for while %w: .*trip count") as info:
        vjp(module)
    assert info.value.line == 29


def _counted_loop(trips: int) -> str:
    return f"""HloModule m
body {{
  s = (s32[], f32[2]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  one = s32[] constant(1)
  j = s32[] add(i, one)
  v = f32[2] get-tuple-element(s), index=1
  w = f32[2] sine(v)
  ROOT t = (s32[], f32[2]) tuple(j, w)
}}
cond {{
  s = (s32[], f32[2]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant({trips})
  ROOT lt = pred[] compare(i, n), direction=LT
}}
ENTRY e {{
  x = f32[2] parameter(0)
  z = s32[] constant(0)
  t = (s32[], f32[2]) tuple(z, x)
  w = (s32[], f32[2]) while(t), condition=cond, body=body
  ROOT r = f32[2] get-tuple-element(w), index=1
}}"""


def test_a_long_counted_loop_stays_a_loop_of_a_fixed_size() -> None:
    # Past flatten.MAX_UNROLLED_TRIPS the backward is a stacking loop and a reverse loop,
    # the same instructions for 40 trips as for 4000; the gradient is the chain rule's.
    sizes = []
    for trips in (40, 4000):
        backward = vjp(parse_hlo(_counted_loop(trips)))
        sizes.append(sum(len(c.instructions) for c in backward.computations))
        assert sum(i.opcode == "while" for i in backward.entry.instructions) == 2
    assert sizes[0] == sizes[1]
    x, ct = np.float32([0.5, -1.0]), np.float32([1.0, 2.0])
    (grad,) = evaluate(vjp(parse_hlo(_counted_loop(40))), x, ct)
    value, derivative = x.astype(np.float64), np.ones(2)
    for _ in range(40):
        derivative *= np.cos(value)
        value = np.sin(value)
    np.testing.assert_allclose(grad, ct * derivative, rtol=1e-4)
