"""The evaluator against XLA itself: JAX functions lowered to HLO (plain and optimized), parsed,
evaluated by us, and compared with what jax computes for the same inputs."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy
lax = jax.lax

from fusion.evaluator import evaluate  # noqa: E402
from fusion.text.parser import parse_hlo  # noqa: E402

RNG = np.random.default_rng(1234)


def _compare(got: np.ndarray, want: np.ndarray, rtol: float, exact: bool, label: str) -> None:
    want = np.asarray(want)
    assert got.shape == want.shape, label
    assert got.dtype == want.dtype, label
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=label)
        return
    got64, want64 = got.astype(np.float64), want.astype(np.float64)
    if exact:
        np.testing.assert_array_equal(got64, want64, err_msg=label)
        np.testing.assert_array_equal(np.signbit(got64), np.signbit(want64), err_msg=label)
        return
    np.testing.assert_allclose(got64, want64, rtol=rtol, atol=rtol, err_msg=label)


def check(f, *args, rtol: float = 2e-6, exact: bool = False, optimized: bool = True) -> None:
    """Lower ``f``; evaluate the plain and the optimized HLO; compare with jax's result."""
    args = tuple(jax.device_put(a) for a in args)  # jnp.asarray would compile a copy per shape
    lowered = jax.jit(f).lower(*args)
    compiled = lowered.compile()  # what jax.jit(f)(*args) runs
    texts = {"before": lowered.as_text(dialect="hlo")}
    if optimized:
        texts["after"] = compiled.as_text()
    want = [np.asarray(w) for w in jax.tree.leaves(compiled(*args))]
    for label, text in texts.items():
        got = evaluate(parse_hlo(text), *[np.asarray(a) for a in args])
        assert len(got) == len(want), label
        for i, (g, w) in enumerate(zip(got, want)):
            _compare(g, w, rtol, exact, f"{label} output {i}\n{text}")


def _f32(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _special_f32() -> np.ndarray:
    return np.array([0.0, -0.0, 1.5, -2.5, 2.5, 0.5, -0.5, np.inf, -np.inf, np.nan, 1e30, -3e9,
                     7.0, 0.49999997], np.float32)


UNARY = {
    "abs": jnp.abs, "neg": jnp.negative, "exp": jnp.exp, "expm1": jnp.expm1,
    "tanh": jnp.tanh, "logistic": jax.nn.sigmoid, "sin": jnp.sin, "cos": jnp.cos,
    "floor": jnp.floor, "ceil": jnp.ceil, "round_even": jnp.round, "sign": jnp.sign,
    "round_afz": lambda x: lax.round(x, lax.RoundingMethod.AWAY_FROM_ZERO),
    "is_finite": jnp.isfinite, "erf": jax.scipy.special.erf, "cbrt": jnp.cbrt,
}


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_float_ops(name):
    x = np.concatenate([_f32(5, 7).reshape(-1), _special_f32()])
    check(UNARY[name], x, rtol=5e-6)


@pytest.mark.parametrize("name", ["log", "log1p", "sqrt", "rsqrt", "tan"])
def test_unary_ops_on_positive_inputs(name):
    function = {"log": jnp.log, "log1p": jnp.log1p, "sqrt": jnp.sqrt, "rsqrt": lax.rsqrt,
                "tan": jnp.tan}[name]
    check(function, np.abs(_f32(3, 11)) + 0.01, rtol=5e-6)


def test_binary_float_ops():
    a = np.concatenate([_f32(13), _special_f32()])
    b = np.concatenate([_f32(13), _special_f32()[::-1]])
    check(lambda x, y: (x + y, x - y, x * y, x / y, lax.max(x, y), lax.min(x, y),
                        lax.rem(x, y), jnp.arctan2(x, y), lax.pow(jnp.abs(x), y)), a, b,
          rtol=5e-6)


def test_integer_division_and_remainder_edge_cases():
    a = np.array([7, -7, 7, -7, 5, -2**31, -2**31, 0, 13], np.int32)
    b = np.array([2, 2, -2, -2, 0, -1, 0, 0, 5], np.int32)
    check(lambda x, y: (lax.div(x, y), lax.rem(x, y)), a, b, exact=True)
    ua = np.array([7, 0, 255, 9], np.uint8)
    ub = np.array([2, 0, 0, 4], np.uint8)
    check(lambda x, y: (lax.div(x, y), lax.rem(x, y)), ua, ub, exact=True)


def test_shifts_with_out_of_range_amounts():
    a = np.array([1, -8, 2**30, -1, 12345, -2**31, 7, 9], np.int32)
    s = np.array([0, 1, 2, 31, 32, 33, -1, 100], np.int32)
    check(lambda x, y: (lax.shift_left(x, y), lax.shift_right_logical(x, y),
                        lax.shift_right_arithmetic(x, y)), a, s, exact=True)
    check(lambda x, y: (lax.shift_left(x, y), lax.shift_right_arithmetic(x, y)),
          a.astype(np.uint32), s.astype(np.uint32), exact=True)


def test_bit_ops():
    a = np.array([0, 1, -1, 2**31 - 1, -2**31, 12345, 256, 3], np.int32)
    b = np.array([5, -3, 7, 0, 1, 99, -256, 3], np.int32)
    check(lambda x, y: (lax.population_count(x), lax.clz(x), ~x, x & y, x | y, x ^ y,
                        x + y, x * y, x - y, -x, jnp.abs(x), jnp.sign(x),
                        lax.max(x, y), lax.min(x, y)), a, b, exact=True)
    check(lambda x: (lax.clz(x), lax.population_count(x)), np.array([0, 1, 128, 255], np.uint8),
          exact=True)


def test_convert_saturates_and_wraps():
    x = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, 2.7, -2.7, 127.5, -128.9, 300.0,
                  0.0, -0.0], np.float32)
    check(lambda v: (v.astype(jnp.int32), v.astype(jnp.int8), v.astype(jnp.uint8),
                     v.astype(jnp.uint32), v.astype(jnp.bool_), v.astype(jnp.bfloat16),
                     v.astype(jnp.float16)), x, exact=True)
    i = np.array([-129, 255, 256, 2**31 - 1, -2**31, 16777217, 0], np.int32)
    check(lambda v: (v.astype(jnp.int8), v.astype(jnp.uint8), v.astype(jnp.float32),
                     v.astype(jnp.bfloat16), v.astype(jnp.bool_)), i, exact=True)


def test_bitcast_convert_widths():
    x = _f32(2, 3)
    check(lambda v: (lax.bitcast_convert_type(v, jnp.int32),
                     lax.bitcast_convert_type(v, jnp.uint8),
                     lax.bitcast_convert_type(lax.bitcast_convert_type(v, jnp.uint16),
                                              jnp.float32)), x, exact=True)


def test_reduce_precision():
    x = np.concatenate([_f32(20) * 1e4, _special_f32(), np.array([1e-6, 7e-8], np.float32)])
    check(lambda v: (lax.reduce_precision(v, 5, 10), lax.reduce_precision(v, 8, 7),
                     lax.reduce_precision(v, 4, 3)), x, exact=True)


def test_compare_and_select_with_nans():
    a = _special_f32()
    b = _special_f32()[::-1].copy()
    check(lambda x, y: (x < y, x <= y, x == y, x != y, x > y, x >= y,
                        jnp.where(x < y, x, y), jnp.clip(x, -1.0, 2.0)), a, b, exact=True)


def test_sort_total_order_and_multi_operand():
    keys = np.array([[3.0, np.nan, -0.0, 0.0, -np.inf, 1.0, -np.nan, 3.0]], np.float32)
    check(lambda k: jnp.sort(k, axis=-1), keys, exact=True)
    k = np.array([[2, 1, 2, 0, 1, 2], [5, 5, 4, 4, 3, 3]], np.int32)
    v = np.arange(12, dtype=np.float32).reshape(2, 6)
    check(lambda a, b: lax.sort((a, b), dimension=1, num_keys=1, is_stable=True), k, v,
          exact=True)
    check(lambda a: jnp.argsort(a, axis=0, stable=True), k.T.copy(), exact=True)


def test_dots():
    check(lambda a, b: a @ b, _f32(3, 7), _f32(7, 5), rtol=1e-5)
    check(lambda a, b: jnp.einsum("bij,bkj->bik", a, b), _f32(2, 3, 4), _f32(2, 5, 4), rtol=1e-5)
    check(lambda a, b: jnp.einsum("ijk,jkl->il", a, b), _f32(3, 4, 2), _f32(4, 2, 5), rtol=1e-5)
    i8 = RNG.integers(-128, 128, (4, 9)).astype(np.int8)
    j8 = RNG.integers(-128, 128, (9, 3)).astype(np.int8)
    check(lambda a, b: lax.dot(a, b, preferred_element_type=jnp.int32), i8, j8, exact=True)
    bf = _f32(4, 16).astype(ml_dtypes.bfloat16)
    bg = _f32(16, 3).astype(ml_dtypes.bfloat16)
    check(lambda a, b: a @ b, bf, bg, rtol=8e-3)


def test_reductions():
    x = _f32(5, 7)
    check(lambda v: (jnp.sum(v, axis=0), jnp.max(v, axis=1), jnp.min(v), jnp.prod(v, axis=1),
                     jnp.argmax(v, axis=1), jnp.argmin(v, axis=0)), x, rtol=1e-5)
    check(lambda v: (jnp.sum(v, axis=1), jnp.max(v, axis=1, initial=-1.0)),
          np.zeros((3, 0), np.float32))
    check(lambda v: (jnp.all(v > 0, axis=1), jnp.any(v > 1, axis=0)), x, exact=True)
    check(lambda v: jnp.sum(v, axis=(0, 2)), np.arange(60, dtype=np.int32).reshape(3, 4, 5),
          exact=True)
    check(lambda v: jnp.cumsum(v, axis=1), x, rtol=1e-5)


def test_reduce_windows_and_select_and_scatter():
    x = _f32(1, 5, 7, 2)
    check(lambda v: lax.reduce_window(v, -jnp.inf, lax.max, (1, 3, 2, 1), (1, 2, 1, 1),
                                      ((0, 0), (1, 1), (0, 1), (0, 0))), x, exact=True)
    check(lambda v: lax.reduce_window(v, 0.0, lax.add, (2, 3), (1, 2), "SAME",
                                      base_dilation=(2, 1), window_dilation=(1, 2)),
          _f32(4, 9), rtol=1e-5)

    def pool_grad(v):
        pool = lambda a: jnp.sum(lax.reduce_window(a, -jnp.inf, lax.max, (2, 2), (2, 2),
                                                   "VALID") ** 2)
        return jax.grad(pool)(v)

    check(pool_grad, _f32(6, 5), rtol=1e-6)


def test_gather_and_scatter():
    x = _f32(6, 3)
    idx = np.array([4, 0, 5, 9, -3], np.int32)
    check(lambda a, i: a.at[i].get(mode="clip"), x, idx, exact=True)
    check(lambda a, i: a.at[i].get(mode="fill", fill_value=-1.0), x, idx, exact=True)
    x3 = _f32(4, 5, 3)
    i0 = np.array([[0, 3], [2, 2]], np.int32)
    i2 = np.array([[1, 0], [2, 1]], np.int32)
    check(lambda a, p, q: a[p, :, q], x3, i0, i2, exact=True)
    check(lambda a, p: jnp.take_along_axis(a, p, axis=1), _f32(3, 4),
          np.array([[0, 3], [1, 1], [2, 0]], np.int32), exact=True)
    dup = np.array([1, 1, 4, 7, -9], np.int32)
    u = _f32(5, 3)
    check(lambda a, i, w: (a.at[i].add(w, mode="drop"), a.at[i].max(w, mode="drop"),
                           a.at[i].mul(w, mode="drop")), x, dup, u, rtol=1e-6)
    check(lambda a, i, w: a.at[i].set(w, mode="drop"), x, np.array([5, 0, 2, 6, 3], np.int32),
          u, exact=True)
    check(lambda a, i, w: a.at[:, i].add(w), _f32(2, 5), np.array([[0], [4], [0]], np.int32),
          _f32(2, 3, 1), rtol=1e-6)


def test_slicing_ops():
    x = _f32(5, 6)
    check(lambda v, i: (lax.dynamic_slice(v, (i, i), (2, 3)),
                        lax.dynamic_update_slice(v, jnp.ones((2, 4), v.dtype), (i, i - 9))),
          x, np.int32(4), exact=True)
    check(lambda v: (v[1:4:2, ::3], jnp.flip(v, 1), v.T, jnp.concatenate([v, v[:, :2]], 1),
                     lax.pad(v, 0.5, ((1, -2, 1), (-1, 3, 0))), v.reshape(3, 10),
                     jnp.broadcast_to(v[:, None, :], (5, 2, 6))), x, exact=True)
    check(lambda v: v.reshape(0, 4) + 1.0, np.zeros((2, 0), np.float32), exact=True)


def test_control_flow():
    check(lambda v: lax.fori_loop(0, 5, lambda i, a: a * 1.5 + i, v), _f32(4), rtol=1e-6)
    check(lambda p, v: lax.cond(p > 0, jnp.sin, jnp.cos, v), np.int32(-1), _f32(3), rtol=1e-6)
    branches = [lambda v: v + 1.0, lambda v: v * 2.0, lambda v: v - 3.0]
    for index in (0, 2, 7):
        check(lambda i, v: lax.switch(i, branches, v), np.int32(index), _f32(3), rtol=1e-6)
    check(lambda v: lax.while_loop(lambda c: c[0] < 10, lambda c: (c[0] + 3, c[1] * 2.0),
                                   (jnp.int32(0), v)), _f32(2), exact=True)


def test_bf16_chain_rounds_per_op():
    x = _f32(8, 33).astype(ml_dtypes.bfloat16)
    check(lambda v: jax.nn.gelu(v, approximate=True), x, rtol=1.6e-2)
    check(lambda v: jax.nn.softmax(v, axis=-1), x, rtol=1.6e-2)
    check(lambda v: (v * v + v, v / (v + 3.0)), x, rtol=0, exact=True, optimized=False)


def test_iota_and_convert():
    check(lambda v: (jnp.arange(12, dtype=jnp.int32).reshape(3, 4) + v,
                     jnp.arange(5, dtype=jnp.bfloat16) * 1.5), np.ones((3, 4), np.int32),
          exact=True)
