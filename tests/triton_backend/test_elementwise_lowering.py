"""Each elementwise rule, run in the interpreter from a kernel-cache file, against NumPy.

The NumPy functions below are an independent statement of XLA's semantics (numerics_policy):
bit-exact for exact ops, ``ULP_TOLERANCE`` ulps for transcendental ones.
"""
from __future__ import annotations

import math
import warnings

import ml_dtypes
import numpy as np
import pytest
import torch

from fusion.ir.element_types import ELEMENT_TYPES as T
from fusion.errors import UnsupportedOpError
from triton_backend.reports.compile_child import child_environment
from triton_backend.lowering.rules.elementwise_rules import ELEMENTWISE_RULES, render_elementwise
from triton_backend.lowering.emitter.triton_types import (
    KERNEL_IMPORTS,
    register_dtype,
    render_load_widen,
    render_store_narrow,
    storage_dtype,
)
from triton_backend.runtime.kernel_cache import KernelCache
from triton_backend.lowering.numerics_policy import ULP_TOLERANCE

pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")
N = 64
TORCH = {"f32": torch.float32, "f64": torch.float64, "bf16": torch.bfloat16, "f16": torch.float16,
         "s8": torch.int8, "s16": torch.int16, "s32": torch.int32, "s64": torch.int64,
         "u8": torch.uint8, "u32": torch.uint32, "pred": torch.bool}
BITS_INT = {"s8": np.int8, "s16": np.int16, "s32": np.int32, "s64": np.int64, "u8": np.uint8, "u32": np.uint32}


def run_op(opcode, arrays, types, result, attributes=None):
    """Generate, cache, load and run a one-op kernel; returns the result as NumPy."""
    names = [f"x{i}" for i in range(len(arrays))]
    expr = render_elementwise(opcode, names, [T[t] for t in types], T[result], attributes)
    params = ", ".join(f"{n}_ptr" for n in names)
    loads = "".join(
        f"    {n} = {render_load_widen(f'tl.load({n}_ptr + o)', T[t])}\n" for n, t in zip(names, types))
    source = (KERNEL_IMPORTS + "\n\n@triton.jit\n"
              f"def kernel({params}, out_ptr, N: tl.constexpr):\n"
              "    o = tl.arange(0, N)\n" + loads +
              f"    r = {expr}\n"
              f"    tl.store(out_ptr + o, {render_store_narrow('r', T[result])})\n")
    module = KernelCache().load(source, {"test": opcode})
    tensors = [to_torch(a, t) for a, t in zip(arrays, types)]
    out = torch.empty(N, dtype=TORCH[result])
    module.kernel[(1,)](*tensors, out, N=N)
    return from_torch(out, result)


def to_torch(a, t):
    a = np.asarray(a)
    if t == "bf16":
        return torch.from_numpy(a.astype(ml_dtypes.bfloat16).view(np.int16).copy()).view(torch.bfloat16)
    if t == "u32":
        return torch.from_numpy(a.astype(np.uint32).view(np.int32).copy()).view(torch.uint32)
    return torch.from_numpy(a.astype(T[t].numpy_dtype()).copy())


def from_torch(x, t):
    if t == "bf16":
        return x.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    if t == "u32":
        return x.view(torch.int32).numpy().view(np.uint32)
    return x.numpy()


def pad(values, dtype):
    values = list(values)
    return np.resize(np.array(values, dtype=dtype), N)


F32_EDGE = np.array([0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 0.49999997, -0.49999997,
                     np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.1754942e-38, 3.4028235e38, -3.4028235e38,
                     8388609.0, 16777217.0, 2147483520.0, 2147483648.0, -2147483904.0, 4294967296.0,
                     300.0, -129.0, 255.5, 1e10, -1e10, 0.1, -7.3, 3.0, 100.25, -0.75],
                    dtype=np.float32)


def f32_inputs(seed=0):
    rng = np.random.default_rng(seed)
    rand = rng.standard_normal(N).astype(np.float32) * np.float32(10.0)
    x = np.concatenate([F32_EDGE, rand])[:N]
    return x


def int_inputs(t, seed=0):
    dtype = BITS_INT[t]
    info = np.iinfo(dtype)
    edge = [0, 1, 2, 3, 7, 8, 31, 32, 33, info.max, info.min, info.max - 1, info.min + 1]
    edge += [-1, -2, -7, -8, -33] if info.min < 0 else [info.max // 2, info.max // 2 + 1]
    rng = np.random.default_rng(seed)
    rand = rng.integers(info.min, info.max, size=N, endpoint=True, dtype=dtype)
    return np.concatenate([np.array(edge, dtype=dtype), rand])[:N]


def bits_of(a):
    a = np.asarray(a)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def assert_bits_equal(actual, expected):
    """Bit-exact, except that any NaN matches any NaN."""
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    if actual.dtype.kind == "f" or actual.dtype == ml_dtypes.bfloat16:
        both_nan = np.isnan(actual.astype(np.float64)) & np.isnan(expected.astype(np.float64))
        bad = ~both_nan & (bits_of(actual) != bits_of(expected))
    else:
        bad = actual != expected
    assert not bad.any(), f"mismatch at {np.flatnonzero(bad)[:8]}: got {actual[bad][:8]}, want {expected[bad][:8]}"


def ulp_distance(a, b):
    """Distance in f32 ulps (ordered bit patterns); NaN vs NaN is 0, NaN vs number is huge."""
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    def key(x):
        i = x.view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)
    d = np.abs(key(a) - key(b))
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    return np.where(nan_a & nan_b, 0, np.where(nan_a | nan_b, 1 << 40, d))


def as_result(values_f64, t):
    return np.asarray(values_f64, dtype=np.float64).astype(T[t].numpy_dtype())


# ---------------------------------------------------------------- exact float ops
def np_round_afz(x):
    return np.where(np.abs(x) - np.floor(np.abs(x)) >= 0.5, np.copysign(np.floor(np.abs(x)) + 1, x),
                    np.copysign(np.floor(np.abs(x)), x)).astype(x.dtype)


def np_sign(x):
    return np.where(np.isnan(x), x, np.where(x > 0, 1, np.where(x < 0, -1, x))).astype(x.dtype)


def np_max(x, y):
    # XLA (llvm.maximum): NaN propagates, -0.0 < +0.0 in either order (checked against XLA in
    # test_numerics_audit.test_evaluator_agrees_with_xla).
    tie = np.where(np.signbit(y), x, y)
    return np.where((x > y) | np.isnan(x), x, np.where(x == y, tie, y))


def np_min(x, y):
    tie = np.where(np.signbit(y), y, x)
    return np.where((x < y) | np.isnan(x), x, np.where(x == y, tie, y))


EXACT_UNARY_FLOAT = {
    "abs": np.abs, "negate": np.negative, "floor": np.floor, "ceil": np.ceil,
    "round-nearest-even": np.rint, "round-nearest-afz": np_round_afz, "sign": np_sign,
    "sqrt": np.sqrt,
}
EXACT_BINARY_FLOAT = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": np.divide,
    "maximum": np_max, "minimum": np_min, "remainder": np.fmod,
}
FLOATS = ["f32", "bf16", "f16", "f64"]


@pytest.mark.parametrize("t", FLOATS)
@pytest.mark.parametrize("opcode", sorted(EXACT_UNARY_FLOAT))
def test_exact_unary_float(opcode, t):
    x = f32_inputs().astype(T[t].numpy_dtype())
    got = run_op(opcode, [x], [t], t)
    # 16-bit ops: XLA computes in f32 and rounds once, which is exact for these ops too.
    want = EXACT_UNARY_FLOAT[opcode](x.astype(np.float32)).astype(T[t].numpy_dtype()) if t != "f64" else \
        EXACT_UNARY_FLOAT[opcode](x)
    assert_bits_equal(got, want)


@pytest.mark.parametrize("t", FLOATS)
@pytest.mark.parametrize("opcode", sorted(EXACT_BINARY_FLOAT))
def test_exact_binary_float(opcode, t):
    x = f32_inputs(0).astype(T[t].numpy_dtype())
    y = np.roll(f32_inputs(1), 7).astype(T[t].numpy_dtype())
    y[:4] = [0.0, -0.0, np.nan, np.inf]
    x[4:6] = [-0.0, 0.0]
    y[4:6] = [0.0, -0.0]
    got = run_op(opcode, [x, y], [t, t], t)
    wide = np.float64 if t == "f64" else np.float32
    with np.errstate(all="ignore"):
        want = EXACT_BINARY_FLOAT[opcode](x.astype(wide), y.astype(wide)).astype(T[t].numpy_dtype())
    assert_bits_equal(got, want)


def test_bf16_rounds_after_each_op():
    # 1 + 2^-9 is not a bf16: the sum must be rounded to bf16 (to even: 1.0), not kept in f32.
    x = np.full(N, 1.0, np.float32)
    y = np.full(N, 2.0 ** -9, np.float32)
    got = run_op("add", [x, y], ["bf16", "bf16"], "bf16")
    assert_bits_equal(got, (x + y).astype(ml_dtypes.bfloat16))
    assert float(got[0]) == 1.0


# ---------------------------------------------------------------- transcendental
def np_ref_unary(opcode, x64):
    with np.errstate(all="ignore"):
        return {
            "exponential": np.exp, "exponential-minus-one": np.expm1, "log": np.log,
            "log-plus-one": np.log1p, "tanh": np.tanh, "logistic": lambda v: 1 / (1 + np.exp(-v)),
            "rsqrt": lambda v: 1 / np.sqrt(v), "cbrt": np.cbrt, "sine": np.sin, "cosine": np.cos,
            "tan": np.tan, "erf": np.vectorize(math.erf, otypes=[np.float64]),
        }[opcode](x64)


@pytest.mark.parametrize("t", ["f32", "bf16"])
@pytest.mark.parametrize("opcode", sorted(set(ULP_TOLERANCE) - {"atan2", "power"}))
def test_transcendental_unary(opcode, t):
    x = f32_inputs()
    if opcode in ("exponential-minus-one", "log-plus-one", "tanh", "erf"):
        x[40:50] = np.float32([1e-7, -1e-7, 1e-20, -3e-5, 3e-5, 0.3, -0.3, -0.999, 88.0, -88.0])
    x = x.astype(T[t].numpy_dtype())
    got = run_op(opcode, [x], [t], t)
    want = as_result(np_ref_unary(opcode, x.astype(np.float64)), t)
    if t == "f32":
        dist = ulp_distance(got, want)
        assert dist.max() <= ULP_TOLERANCE[opcode], (x[dist.argmax()], got[dist.argmax()], want[dist.argmax()])
    else:
        # bf16: the f32 result (within tolerance) rounds to the same bf16 or a neighbour.
        g, w = got.astype(np.float32), want.astype(np.float32)
        assert ulp_distance(g, w).max() <= 1 << 16


@pytest.mark.parametrize("opcode", ["atan2", "power"])
def test_transcendental_binary(opcode):
    x = f32_inputs(0)
    y = np.roll(f32_inputs(1), 5)
    x[:12] = np.float32([0.0, -0.0, 0.0, -0.0, np.inf, -np.inf, -1.0, -2.0, -2.0, 1.0, np.nan, -8.0])
    y[:12] = np.float32([0.0, 0.0, -0.0, -1.0, np.inf, np.inf, np.inf, 3.0, 0.5, np.nan, 0.0, 1.0 / 3])
    got = run_op(opcode, [x, y], ["f32", "f32"], "f32")
    with np.errstate(all="ignore"):
        ref = np.arctan2 if opcode == "atan2" else np.power
        want = ref(x.astype(np.float64), y.astype(np.float64)).astype(np.float32)
    dist = ulp_distance(got, want)
    assert dist.max() <= ULP_TOLERANCE[opcode], (x[dist.argmax()], y[dist.argmax()], got[dist.argmax()])


def test_is_finite():
    for t in FLOATS:
        x = f32_inputs().astype(T[t].numpy_dtype())
        got = run_op("is-finite", [x], [t], "pred")
        np.testing.assert_array_equal(got, np.isfinite(x.astype(np.float64)))


# ---------------------------------------------------------------- integers
INTS = ["s8", "s32", "u8", "u32", "s64"]


def np_int_div(x, y):
    info = np.iinfo(x.dtype)
    quotients, remainders = [], []
    for a, b in zip(x.tolist(), y.tolist()):
        if b == 0:
            quotients.append(-1 if info.min < 0 else info.max)
            remainders.append(a)
            continue
        q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)  # C: truncate toward zero
        remainders.append(a - q * b)
        quotients.append(q if q <= info.max else info.min)  # INT_MIN / -1 wraps to INT_MIN
    return np.array(quotients, dtype=x.dtype), np.array(remainders, dtype=x.dtype)


def np_shift(kind, x, y, bits):
    u = np.dtype(f"u{x.dtype.itemsize}")
    s = np.dtype(f"i{x.dtype.itemsize}")
    amount = y.view(u).astype(np.uint64)
    oob = amount >= bits
    safe = np.where(oob, 0, amount).astype(u)
    if kind == "shift-left":
        return np.where(oob, 0, x.view(u) << safe).astype(u).view(x.dtype)
    if kind == "shift-right-logical":
        return np.where(oob, 0, x.view(u) >> safe).astype(u).view(x.dtype)
    return (x.view(s) >> np.where(oob, bits - 1, amount).astype(s)).view(x.dtype)


def np_popcnt(x):
    u = x.view(np.dtype(f"u{x.dtype.itemsize}"))
    return np.array([bin(int(v)).count("1") for v in u]).astype(x.dtype)


def np_clz(x):
    bits = x.dtype.itemsize * 8
    u = x.view(np.dtype(f"u{x.dtype.itemsize}"))
    return np.array([bits - int(v).bit_length() for v in u]).astype(x.dtype)


def np_int_pow(x, e):
    bits = x.dtype.itemsize * 8
    out = []
    for b, p in zip(x.tolist(), e.tolist()):
        # XLA's EmitIntegerPow: only the low 6 exponent bits count; a negative exponent gives
        # 1 for base 1, +-1 for base -1, else 0 (checked against XLA in test_numerics_audit).
        power = pow(b, p & 63, 1 << bits)
        if p < 0:
            out.append(1 if b == 1 else (power if b == -1 else 0))
        else:
            out.append(power)
    return np.array(out, dtype=np.uint64 if x.dtype.itemsize == 8 else np.int64).astype(x.dtype, casting="unsafe")


@pytest.mark.parametrize("t", INTS)
def test_integer_binary_ops(t):
    x = int_inputs(t, 0)
    y = np.roll(int_inputs(t, 1), 3)
    y[:8] = [0, 0, 1, 2, 0, 0, 0, 0] if t.startswith("u") else [0, 0, 1, 2, -1, -1, 0, 7]
    x[:8] = [5, 0, 9, 9, 5, 0, np.iinfo(x.dtype).max, 0]
    if not t.startswith("u"):
        x[4] = np.iinfo(x.dtype).min  # INT_MIN / -1
    div, rem = np_int_div(x, y)
    with np.errstate(all="ignore"):
        cases = {"add": x + y, "subtract": x - y, "multiply": x * y, "divide": div, "remainder": rem,
                 "maximum": np.maximum(x, y), "minimum": np.minimum(x, y), "and": x & y, "or": x | y,
                 "xor": x ^ y}
    for opcode, want in cases.items():
        assert_bits_equal(run_op(opcode, [x, y], [t, t], t), want)


@pytest.mark.parametrize("t", INTS)
def test_integer_shifts(t):
    bits = np.dtype(BITS_INT[t]).itemsize * 8
    x = int_inputs(t, 2)
    y = np.resize(np.arange(0, 41), N).astype(BITS_INT[t])
    if not t.startswith("u"):
        y[-3:] = [-1, -8, np.iinfo(y.dtype).min]
    for opcode in ("shift-left", "shift-right-logical", "shift-right-arithmetic"):
        assert_bits_equal(run_op(opcode, [x, y], [t, t], t), np_shift(opcode, x, y, bits))


@pytest.mark.parametrize("t", INTS)
def test_integer_unary_ops(t):
    x = int_inputs(t, 3)
    signed = not t.startswith("u")
    with np.errstate(all="ignore"):
        cases = {"abs": np.abs(x) if signed else x, "negate": (np.zeros_like(x) - x),
                 "not": ~x, "sign": np.sign(x).astype(x.dtype), "popcnt": np_popcnt(x),
                 "count-leading-zeros": np_clz(x)}
    for opcode, want in cases.items():
        assert_bits_equal(run_op(opcode, [x], [t], t), want)


@pytest.mark.parametrize("t", ["s8", "s32", "u8"])
def test_integer_power(t):
    x = np.resize(np.arange(-5, 6), N).astype(BITS_INT[t]) if t != "u8" else np.resize(np.arange(0, 9), N).astype(np.uint8)
    e = np.resize(np.arange(-2, 13), N).astype(BITS_INT[t]) if t != "u8" else np.resize(np.arange(0, 15), N).astype(np.uint8)
    x[:4], e[:4] = [1, 1, 2, 3], ([-5, 0, 31, 40] if t != "u8" else [200, 0, 31, 40])
    assert_bits_equal(run_op("power", [x, e], [t, t], t), np_int_pow(x, e))


def test_pred_ops():
    x = np.resize([True, False], N)
    y = np.resize([True, True, False, False], N)
    for opcode, want in {"and": x & y, "or": x | y, "xor": x ^ y, "maximum": x | y, "minimum": x & y}.items():
        np.testing.assert_array_equal(run_op(opcode, [x, y], ["pred", "pred"], "pred"), want)
    np.testing.assert_array_equal(run_op("not", [x], ["pred"], "pred"), ~x)


# ---------------------------------------------------------------- compare / select / clamp
def total_order_key(x):
    i = x.astype(np.float32).view(np.int32).astype(np.int64)
    return np.where(i < 0, i ^ 0x7FFFFFFF, i)


@pytest.mark.parametrize("t", ["f32", "bf16", "s32", "u8", "pred"])
@pytest.mark.parametrize("direction", ["EQ", "NE", "LT", "LE", "GT", "GE"])
def test_compare(direction, t):
    if t == "pred":
        x, y = np.resize([True, False], N), np.resize([True, True, False, False], N)
    elif T[t].is_float:
        x = f32_inputs(0).astype(T[t].numpy_dtype())
        y = np.roll(x, 1)
        y[:3] = [np.nan, -0.0, 0.0]
    else:
        x, y = int_inputs(t, 0), np.roll(int_inputs(t, 0), 2)
    ops = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal,
           "GT": np.greater, "GE": np.greater_equal}
    got = run_op("compare", [x, y], [t, t], "pred", {"direction": direction})
    np.testing.assert_array_equal(got, ops[direction](x, y))
    if T[t].is_float:
        got = run_op("compare", [x, y], [t, t], "pred", {"direction": direction, "type": "TOTALORDER"})
        np.testing.assert_array_equal(got, ops[direction](total_order_key(x), total_order_key(y)))


def test_select_and_clamp():
    p = np.resize([True, False, False], N)
    x = f32_inputs(0)
    y = f32_inputs(1)
    assert_bits_equal(run_op("select", [p, x, y], ["pred", "f32", "f32"], "f32"), np.where(p, x, y))
    lo, hi = np.full(N, -1.0, np.float32), np.full(N, 2.0, np.float32)
    lo[0], hi[1] = np.nan, np.nan
    want = np_min(np_max(x, lo), hi)
    assert_bits_equal(run_op("clamp", [lo, x, hi], ["f32"] * 3, "f32"), want)
    xi = int_inputs("s8")
    assert_bits_equal(run_op("clamp", [np.full(N, -3, np.int8), xi, np.full(N, 5, np.int8)], ["s8"] * 3, "s8"),
                      np.clip(xi, -3, 5))


# ---------------------------------------------------------------- convert / bitcast-convert
def np_float_to_int(x, dtype):
    info = np.iinfo(dtype)
    out = [0 if math.isnan(v) else min(max(int(v) if math.isfinite(v) else (info.max if v > 0 else info.min),
                                           info.min), info.max) for v in x.astype(np.float64).tolist()]
    return np.array(out, dtype=dtype)


@pytest.mark.parametrize("src", ["f32", "bf16", "f16"])
@pytest.mark.parametrize("dst", ["s8", "s32", "u8", "u32", "s64", "pred"])
def test_convert_float_to_int(src, dst):
    x = f32_inputs().astype(T[src].numpy_dtype())
    got = run_op("convert", [x], [src], dst)
    want = (x.astype(np.float64) != 0) if dst == "pred" else np_float_to_int(x, BITS_INT[dst])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("src", "dst"), [("s32", "s8"), ("s32", "u8"), ("u32", "s32"), ("s8", "u32"),
                                          ("s8", "s64"), ("u8", "s32"), ("s64", "s32"), ("s32", "pred")])
def test_convert_int_to_int(src, dst):
    x = int_inputs(src)
    got = run_op("convert", [x], [src], dst)
    want = x != 0 if dst == "pred" else x.astype(BITS_INT[dst], casting="unsafe")
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize(("src", "dst"), [("s32", "f32"), ("s32", "bf16"), ("u8", "f16"), ("pred", "bf16"),
                                          ("f32", "bf16"), ("f32", "f16"), ("bf16", "f32"), ("f16", "bf16"),
                                          ("bf16", "f16"), ("f32", "f64"), ("f64", "f32"), ("pred", "s32")])
def test_convert_to_float(src, dst):
    x = f32_inputs() if T[src].is_float else (np.resize([True, False], N) if src == "pred" else int_inputs(src))
    x = x.astype(T[src].numpy_dtype())
    if src == "s32":
        x[:3] = [16842753, -16842753, 2147483647]  # double rounding through f32, as XLA does
    got = run_op("convert", [x], [src], dst)
    # XLA converts via f32 whenever a 16-bit float is involved.
    via = x.astype(np.float32) if (src in ("bf16", "f16") or dst in ("bf16", "f16")) and src != "f64" else x
    want = via.astype(T[dst].numpy_dtype())
    assert_bits_equal(got, want)


@pytest.mark.parametrize(("src", "dst"), [("f32", "s32"), ("s32", "f32"), ("f32", "u32"), ("u32", "f32"),
                                          ("s16", "bf16"), ("bf16", "s16"), ("s8", "u8")])
def test_bitcast_convert(src, dst):
    if T[src].is_float:
        x = f32_inputs().astype(T[src].numpy_dtype())
    elif src == "s16":
        x = np.resize(np.array([0, -32768, 0x7F80, -128, 0x3F80, 0x7F7F, 1, -1], np.int16), N)
    else:
        x = int_inputs(src)
    got = run_op("bitcast-convert", [x], [src], dst)
    assert_bits_equal(got, x.view(T[dst].numpy_dtype()))


# ---------------------------------------------------------------- registry, errors
def test_registry_is_alphabetical_and_complete():
    assert list(ELEMENTWISE_RULES) == sorted(ELEMENTWISE_RULES)
    required = {"abs", "negate", "exponential", "exponential-minus-one", "log", "log-plus-one", "tanh",
                "logistic", "sqrt", "rsqrt", "cbrt", "sine", "cosine", "tan", "atan2", "floor", "ceil",
                "round-nearest-afz", "round-nearest-even", "sign", "not", "popcnt", "count-leading-zeros",
                "is-finite", "add", "subtract", "multiply", "divide", "remainder", "power", "maximum",
                "minimum", "and", "or", "xor", "shift-left", "shift-right-logical",
                "shift-right-arithmetic", "compare", "select", "clamp", "convert", "bitcast-convert", "erf"}
    assert required <= set(ELEMENTWISE_RULES)


def test_unsupported_inputs_raise_located_errors():
    with pytest.raises(UnsupportedOpError, match="no elementwise lowering for opcode 'fft'"):
        render_elementwise("fft", ["a"], [T["f32"]], T["f32"])
    with pytest.raises(UnsupportedOpError, match="^xor: bitwise op on floats"):
        render_elementwise("xor", ["a", "b"], [T["f32"]] * 2, T["f32"])
    with pytest.raises(UnsupportedOpError, match="compare direction"):
        render_elementwise("compare", ["a", "b"], [T["f32"]] * 2, T["pred"], {"direction": "XX"})
    with pytest.raises(UnsupportedOpError, match="c64"):
        render_elementwise("add", ["a", "b"], [T["c64"]] * 2, T["c64"])
    assert (storage_dtype(T["u32"]), register_dtype(T["bf16"])) == ("tl.uint32", "tl.float32")


# ---------------------------------------------------------------- the GPU (libdevice) path compiles
GPU_CASES = [
    (op, ["f32"], "f32", None) for op in
    ["abs", "cbrt", "ceil", "cosine", "erf", "exponential", "exponential-minus-one", "floor", "log",
     "log-plus-one", "logistic", "negate", "round-nearest-afz", "round-nearest-even", "rsqrt", "sign",
     "sine", "sqrt", "tan", "tanh"]
] + [(op, ["bf16", "bf16"], "bf16", None) for op in ["add", "atan2", "divide", "maximum", "power", "remainder"]] + [
    (op, ["s32", "s32"], "s32", None) for op in
    ["divide", "power", "remainder", "shift-left", "shift-right-arithmetic", "shift-right-logical"]
] + [("popcnt", ["u8"], "u8", None), ("count-leading-zeros", ["s64"], "s64", None),
     ("convert", ["f32"], "s32", None), ("convert", ["bf16"], "u8", None),
     ("compare", ["f32", "f32"], "pred", {"direction": "LT", "type": "TOTALORDER"}),
     ("bitcast-convert", ["bf16"], "s16", None)]


SIG_TYPES = {"pred": "i1", "s16": "i16", "s32": "i32", "s64": "i64", "u8": "u8", "f32": "fp32", "bf16": "bf16"}


def test_every_rule_compiles_for_sm90_outside_the_interpreter():
    import subprocess
    import sys

    from triton_backend.reports.ptx_report import find_ptxas

    if find_ptxas(90) is None:
        pytest.skip("ptxas not found in the Triton wheel")
    lines, params, sig = [], [], {}
    for i, (op, types, result, attrs) in enumerate(GPU_CASES):
        names = []
        for j, t in enumerate(types):
            params.append(f"a{i}_{j}")
            sig[f"a{i}_{j}"] = "*" + SIG_TYPES[t]
            lines.append(f"    v{i}_{j} = {render_load_widen(f'tl.load(a{i}_{j} + o)', T[t])}")
            names.append(f"v{i}_{j}")
        params.append(f"out{i}")
        sig[f"out{i}"] = "*" + SIG_TYPES[result]
        expr = render_elementwise(op, names, [T[t] for t in types], T[result], attrs)
        lines.append(f"    tl.store(out{i} + o, {render_store_narrow(expr, T[result])})")
    sig["BLOCK"] = "constexpr"
    source = (KERNEL_IMPORTS + "\n\n@triton.jit\n" + f"def all_ops({', '.join(params)}, BLOCK: tl.constexpr):\n"
              "    o = tl.arange(0, BLOCK)\n" + "\n".join(lines) + "\n")
    path = KernelCache().write(source, {"test": "all-ops-gpu"})
    child = (
        "import importlib.util, json, sys\n"
        "from triton_backend.reports.ptx_report import compile_for_target\n"
        "spec = importlib.util.spec_from_file_location('all_ops_kernel', sys.argv[1])\n"
        "m = importlib.util.module_from_spec(spec); sys.modules['all_ops_kernel'] = m; spec.loader.exec_module(m)\n"
        "r = compile_for_target(m.all_ops, json.loads(sys.argv[2]), {'BLOCK': 128}, arch=90)\n"
        "import re\n"
        "print('CALLS', sorted(set(re.findall(r'__nv_\\w+', r.ptx))), 'SPILLS', r.spills)\n"
    )
    env = child_environment()
    import json
    result = subprocess.run([sys.executable, "-c", child, str(path), json.dumps(sig)], capture_output=True,
                            text=True, env=env, timeout=600, check=False)
    assert result.returncode == 0, result.stderr[-4000:]
    out = result.stdout
    # libdevice bodies are inlined; these names survive in the PTX's declarations/comments.
    for fn in ("__nv_atan2f", "__nv_powf", "__nv_cbrtf", "__nv_log1pf", "__nv_tanf", "__nv_erff"):
        assert fn in out, out
    assert "SPILLS 0" in out
