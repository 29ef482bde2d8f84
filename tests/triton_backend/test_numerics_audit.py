"""Numerics audit: every elementwise op and the common reductions on hostile values.

Each case is a one-op fusion run by the generated kernel (Triton interpreter) and by the
reference evaluator on the cross product of edge values (NaN of both signs and with payloads,
+-inf, -0.0, denormals, values near overflow, INT_MIN/INT_MAX, shift amounts past the width,
conversion saturation points, 16-bit rounding ties).  Exact ops must agree bit for bit
(NaN: NaN-ness and, where the op defines it, the sign); the others within
``numerics_policy.ULP_TOLERANCE``.  Where the evaluator's rule for an edge case is not
obvious, ``test_evaluator_agrees_with_xla`` checks it against XLA itself (jax on CPU).
"""
from __future__ import annotations

import itertools

import ml_dtypes
import numpy as np
import pytest
import torch

from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo
from tests.triton_backend.fusion_check import fusion_module, single_fusion_module
from tests.triton_backend.fusion_check import to_numpy as _to_numpy
from tests.triton_backend.fusion_check import to_torch as _to_torch
from triton_backend.driver.compiled_fusion import compile_fusion
from triton_backend.lowering.numerics_policy import ULP_TOLERANCE

# The interpreter computes NaN/inf edge cases with NumPy, which warns about each of them.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

NUMPY = {"f16": np.float16, "bf16": ml_dtypes.bfloat16, "f32": np.float32, "f64": np.float64,
         "s8": np.int8, "s16": np.int16, "s32": np.int32, "s64": np.int64, "u8": np.uint8,
         "u16": np.uint16, "u32": np.uint32, "pred": np.bool_}
BITS = {"f16": np.uint16, "bf16": np.uint16, "f32": np.uint32, "f64": np.uint64}
FLOATS = ("f32", "bf16", "f16")
INTS = ("s8", "s32", "s64", "u8", "u32")


def to_torch(a: np.ndarray, dtype: str) -> torch.Tensor:
    """Bit-exact: ``fusion_check.to_torch`` goes through torch's f32 -> bf16 cast, which turns
    every NaN into 0xFFFF (losing the sign and payload the audit needs)."""
    if dtype == "bf16":
        return torch.from_numpy(np.asarray(a, ml_dtypes.bfloat16).view(np.int16).copy()).view(torch.bfloat16)
    return _to_torch(a, dtype)


def to_numpy(t: torch.Tensor, dtype: str) -> np.ndarray:
    if dtype == "bf16":
        return t.contiguous().view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return _to_numpy(t, dtype)


def _from_bits(dtype: str, words) -> np.ndarray:
    return np.array(words, BITS[dtype]).view(NUMPY[dtype])


#: Bit patterns: +-0, +-denormal min/max, +-normal min, +-max, +-inf, quiet NaN of both signs,
#: a NaN with a payload, then ordinary values (one, halves, ties).
_F32_BITS = [0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007FFFFF, 0x00800000, 0x80800000,
             0x7F7FFFFF, 0xFF7FFFFF, 0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7FC12345]
_F32_VALUES = [1.0, -1.0, 0.5, -0.5, 1.5, 2.5, -2.5, 3.0, -7.0, 0.1, 255.5, 2.0 ** 31,
               -(2.0 ** 31), 2147483520.0, -2147483904.0, 2.0 ** 24 + 2, 1e30, 88.7, -103.0]
_HALF_BITS = {  # same roles as above, for the 16-bit formats
    "f16": [0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x8400, 0x7BFF, 0xFBFF, 0x7C00, 0xFC00,
            0x7E00, 0xFE00, 0x7E55],
    "bf16": [0x0000, 0x8000, 0x0001, 0x8001, 0x007F, 0x0080, 0x8080, 0x7F7F, 0xFF7F, 0x7F80, 0xFF80,
             0x7FC0, 0xFFC0, 0x7FD5],
}


def float_edges(dtype: str) -> np.ndarray:
    """Edge values of a float type (all representable in it)."""
    if dtype == "f32":
        return np.concatenate([_from_bits("f32", _F32_BITS), np.array(_F32_VALUES, np.float32)])
    if dtype == "f64":
        return np.concatenate([float_edges("f32").astype(np.float64),
                               np.array([1e300, -1e-310, 2.0 ** 53 + 1], np.float64)])
    ordinary = np.array(_F32_VALUES[:10], np.float32).astype(NUMPY[dtype])
    return np.concatenate([_from_bits(dtype, _HALF_BITS[dtype]), ordinary])


def int_edges(dtype: str) -> np.ndarray:
    info = np.iinfo(NUMPY[dtype])
    bits = info.bits
    values = {info.min, info.min + 1, info.max, info.max - 1, 0, 1, 2, 3, 7, bits - 1, bits,
              bits + 1, 2 * bits, 1 << (bits // 2), (1 << (bits - 1)) - 3}
    if info.min < 0:
        values |= {-1, -2, -3, -7, -bits, -(bits + 1)}
    return np.array(sorted(v for v in values if info.min <= v <= info.max), NUMPY[dtype])


def edges(dtype: str) -> np.ndarray:
    if dtype == "pred":
        return np.array([False, True])
    return float_edges(dtype) if dtype in BITS else int_edges(dtype)


def pairs(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """All (x, y) combinations, as two flat arrays."""
    i, j = np.meshgrid(np.arange(len(a)), np.arange(len(b)), indexing="ij")
    return a[i.ravel()], b[j.ravel()]


def run_op(opcode: str, in_types, out_type: str, arrays, attrs: str = ""):
    """(kernel result, evaluator result) of ``out = opcode(p0, p1, ...)`` on 1-D ``arrays``."""
    n = len(arrays[0])
    params = [f"{t}[{n}]" for t in in_types]
    operands = ", ".join(f"p{i}" for i in range(len(arrays)))
    text = single_fusion_module(params, f"  ROOT r = {out_type}[{n}] {opcode}({operands}){attrs}",
                                f"{out_type}[{n}]")
    module = parse_hlo(text)
    compiled = compile_fusion(module, "fusion")
    want = np.asarray(evaluate(fusion_module(module, "fusion"), *arrays)[0])
    got = to_numpy(compiled(*[to_torch(a, t) for a, t in zip(arrays, in_types)])[0], out_type)
    return got, want


def _as_float_bits(x: np.ndarray, dtype: str) -> np.ndarray:
    return np.asarray(x).astype(NUMPY[dtype]).view(BITS[dtype])


def _report(mask, inputs, got, want) -> str:
    where = np.flatnonzero(mask)[:8]
    rows = [f"  inputs={[a[k] for a in inputs]} got={got[k]!r} want={want[k]!r}" for k in where]
    return f"{int(mask.sum())} mismatches, first:\n" + "\n".join(rows)


def assert_same(got, want, out_type: str, inputs, *, nan_sign: bool = False, ulps: int = 0,
                nan_bits: bool = False) -> None:
    """Bit-exact (``ulps=0``) or within ``ulps``; NaN-ness always exact, and the NaN's sign
    (``nan_sign``) or all its bits, payload included (``nan_bits``: data movement), if asked."""
    assert got.shape == want.shape
    if out_type not in BITS:
        bad = got.astype(want.dtype) != want
        assert not bad.any(), _report(bad, inputs, got, want)
        return
    g, w = np.asarray(got).astype(NUMPY[out_type]), want.astype(NUMPY[out_type])
    g_nan, w_nan = np.isnan(g.astype(np.float64)), np.isnan(w.astype(np.float64))
    bad = g_nan != w_nan
    if nan_sign:
        bad |= g_nan & w_nan & (np.signbit(g.astype(np.float64)) != np.signbit(w.astype(np.float64)))
    gb, wb = g.view(BITS[out_type]), w.view(BITS[out_type])
    if nan_bits:
        bad |= g_nan & w_nan & (gb != wb)
    both = ~g_nan & ~w_nan
    if ulps == 0:
        bad |= both & (gb != wb)
    else:
        bad |= both & (_ulp_distance(g, w, out_type) > ulps)
    assert not bad.any(), _report(bad, inputs, got, want)


def _ulp_distance(a, b, dtype: str) -> np.ndarray:
    """Distance in units in the last place, via the monotone integer image of the bits."""
    signed = {"f32": np.int64, "f64": object, "f16": np.int64, "bf16": np.int64}[dtype]
    width = np.dtype(BITS[dtype]).itemsize * 8

    def key(x):
        bits = x.view(BITS[dtype]).astype(np.uint64).astype(object if dtype == "f64" else np.int64)
        sign = 1 << (width - 1)
        return np.where(bits >= sign, sign - bits, bits).astype(signed)
    return np.abs(key(a) - key(b))


# --- elementwise ops on floats ------------------------------------------------------------------

EXACT_FLOAT_UNARY = ("abs", "ceil", "floor", "negate", "round-nearest-afz", "round-nearest-even",
                     "sign", "sqrt")
#: Ops that define the sign of a NaN result: negate flips it, abs clears it.
NAN_SIGN_DEFINED = ("abs", "negate")


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("opcode", EXACT_FLOAT_UNARY)
def test_exact_float_unary(opcode, dtype):
    x = edges(dtype)
    got, want = run_op(opcode, [dtype], dtype, [x])
    assert_same(got, want, dtype, [x], nan_sign=opcode in NAN_SIGN_DEFINED)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("opcode", sorted(set(ULP_TOLERANCE) - {"atan2", "power"}))
def test_transcendental_unary(opcode, dtype):
    x = edges(dtype)
    got, want = run_op(opcode, [dtype], dtype, [x])
    assert_same(got, want, dtype, [x], ulps=ULP_TOLERANCE[opcode] if dtype == "f32" else 1)


@pytest.mark.parametrize("dtype", FLOATS)
def test_is_finite(dtype):
    x = edges(dtype)
    got, want = run_op("is-finite", [dtype], "pred", [x])
    assert_same(got, want, "pred", [x])


EXACT_FLOAT_BINARY = ("add", "divide", "maximum", "minimum", "multiply", "subtract")


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("opcode", EXACT_FLOAT_BINARY)
def test_exact_float_binary(opcode, dtype):
    x, y = pairs(edges(dtype), edges(dtype))
    got, want = run_op(opcode, [dtype, dtype], dtype, [x, y])
    assert_same(got, want, dtype, [x, y])


@pytest.mark.parametrize("dtype", FLOATS)
def test_float_remainder(dtype):
    # fmod is exact (the result is representable), so it is compared bit for bit.
    x, y = pairs(edges(dtype), edges(dtype))
    got, want = run_op("remainder", [dtype, dtype], dtype, [x, y])
    assert_same(got, want, dtype, [x, y])


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("opcode", ("atan2", "power"))
def test_transcendental_binary(opcode, dtype):
    x, y = pairs(edges(dtype), edges(dtype))
    got, want = run_op(opcode, [dtype, dtype], dtype, [x, y])
    assert_same(got, want, dtype, [x, y], ulps=ULP_TOLERANCE[opcode] if dtype == "f32" else 1)


@pytest.mark.parametrize("dtype", ("f32", "bf16", "f64"))
@pytest.mark.parametrize("direction", ("EQ", "NE", "LT", "LE", "GT", "GE"))
@pytest.mark.parametrize("order", ("", "TOTALORDER"))
def test_float_compare(dtype, direction, order):
    x, y = pairs(edges(dtype), edges(dtype))
    attrs = f", direction={direction}" + (f", type={order}" if order else "")
    got, want = run_op("compare", [dtype, dtype], "pred", [x, y], attrs)
    assert_same(got, want, "pred", [x, y])


@pytest.mark.parametrize("dtype", ("f32", "bf16"))
def test_float_clamp_and_select(dtype):
    e = edges(dtype)
    lo, x = pairs(e, e)
    hi = np.roll(lo, 7)
    got, want = run_op("clamp", [dtype] * 3, dtype, [lo, x, hi])
    assert_same(got, want, dtype, [lo, x, hi])
    p = (np.arange(len(x)) % 3 == 0)
    text_types = ["pred", dtype, dtype]
    got, want = run_op("select", text_types, dtype, [p, x, lo])
    assert_same(got, want, dtype, [p, x, lo], nan_bits=True)


# --- elementwise ops on integers ----------------------------------------------------------------

INT_BINARY = ("add", "and", "divide", "maximum", "minimum", "multiply", "or", "power", "remainder",
              "shift-left", "shift-right-arithmetic", "shift-right-logical", "subtract", "xor")
INT_UNARY = ("abs", "count-leading-zeros", "negate", "not", "popcnt", "sign")


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("opcode", INT_BINARY)
def test_integer_binary(opcode, dtype):
    x, y = pairs(edges(dtype), edges(dtype))
    got, want = run_op(opcode, [dtype, dtype], dtype, [x, y])
    assert_same(got, want, dtype, [x, y])


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("opcode", INT_UNARY)
def test_integer_unary(opcode, dtype):
    x = edges(dtype)
    got, want = run_op(opcode, [dtype], dtype, [x])
    assert_same(got, want, dtype, [x])


@pytest.mark.parametrize("dtype", ("s8", "s32", "u32"))
@pytest.mark.parametrize("direction", ("EQ", "NE", "LT", "LE", "GT", "GE"))
def test_integer_compare(dtype, direction):
    x, y = pairs(edges(dtype), edges(dtype))
    got, want = run_op("compare", [dtype, dtype], "pred", [x, y], f", direction={direction}")
    assert_same(got, want, "pred", [x, y])


@pytest.mark.parametrize("opcode", ("and", "or", "xor", "maximum", "minimum"))
def test_pred_binary(opcode):
    x, y = pairs(edges("pred"), edges("pred"))
    got, want = run_op(opcode, ["pred", "pred"], "pred", [x, y])
    assert_same(got, want, "pred", [x, y])


def test_pred_not_and_compare():
    x, y = pairs(edges("pred"), edges("pred"))
    got, want = run_op("not", ["pred"], "pred", [x])
    assert_same(got, want, "pred", [x])
    for direction in ("LT", "GT", "EQ"):
        got, want = run_op("compare", ["pred", "pred"], "pred", [x, y], f", direction={direction}")
        assert_same(got, want, "pred", [x, y])


# --- conversions --------------------------------------------------------------------------------

#: f32 values at the saturation and rounding boundaries of the integer and 16-bit targets.
_CONVERT_F32_BITS = [
    0x3F808000, 0x3F818000, 0x3F808001, 0x3F80FFFF,  # bf16 ties (to even: down, up), just above
    0x7F7F7FFF, 0x7F7F8000, 0xFF7F8000,  # just below / at the bf16 overflow tie
    0x00008000, 0x00018000, 0x80008000,  # bf16 denormal ties
    0x3F801000, 0x3F803000, 0x477FEFFF, 0x477FF000, 0xC77FF000,  # f16 ties, f16 overflow tie
    0x33800000, 0x33800001, 0x33000000, 0x33000001,  # f16 denormal min tie / just above; half of it
    0x7F800001, 0xFF800001, 0x7FA00000,  # signalling NaNs (payload only in low bits)
]
_CONVERT_F32_VALUES = [
    127.0, 127.5, 128.0, -128.0, -128.5, -129.0, 255.0, 255.5, 256.0, -0.5, -1.0, -0.9,
    2.0 ** 31, -(2.0 ** 31), 2147483520.0, -2147483904.0, 2.0 ** 32, 4294967040.0, 2.0 ** 63,
    -(2.0 ** 63), 9.2233715e18, 65504.0, 65520.0, 1e-8, 0.99999994,
]


def convert_sources(dtype: str) -> np.ndarray:
    if dtype == "f32":
        return np.concatenate([float_edges("f32"), _from_bits("f32", _CONVERT_F32_BITS),
                               np.array(_CONVERT_F32_VALUES, np.float32)])
    if dtype == "f64":
        ties = [1.0 + 2.0 ** -24, 1.0 + 3 * 2.0 ** -24, 1.0 + 2.0 ** -24 + 2.0 ** -50,
                3.4028235677973366e38, 3.4028235677973362e38, 1e-46, 2.0 ** 31 - 0.5, 1e40]
        return np.concatenate([convert_sources("f32").astype(np.float64), np.array(ties)])
    if dtype in ("bf16", "f16"):
        return edges(dtype)
    extra = {"s32": [16842753, 16777217, -16842753, 2 ** 24 + 2 ** 16 + 2 ** 8 + 1],
             "s64": [2 ** 53 + 1, 2 ** 24 + 2 ** 16 + 1, -(2 ** 62) - 1],
             "u32": [4294967295, 2 ** 31 + 129]}.get(dtype, [])
    return np.unique(np.concatenate([edges(dtype), np.array(extra, NUMPY[dtype])]))


CONVERSIONS = [
    *[(s, d) for s in ("f32", "bf16", "f16", "f64") for d in ("s8", "s32", "s64", "u8", "u32", "pred")],
    *[(s, d) for s in ("f32", "f64", "bf16", "f16") for d in ("f32", "bf16", "f16", "f64") if s != d],
    *[(s, d) for s in ("s8", "s32", "s64", "u8", "u32", "pred")
      for d in ("f32", "bf16", "f16", "s8", "u8", "s32", "u32", "s64") if s != d],
]


@pytest.mark.parametrize("src,dst", CONVERSIONS, ids=[f"{s}-{d}" for s, d in CONVERSIONS])
def test_convert(src, dst):
    x = convert_sources(src)
    got, want = run_op("convert", [src], dst, [x])
    assert_same(got, want, dst, [x], nan_sign=False)


@pytest.mark.parametrize("src,dst", [("f32", "s32"), ("s32", "f32"), ("f16", "s16"),
                                     ("bf16", "u16"), ("u16", "f16"), ("f64", "s64")])
def test_bitcast_convert_round_trips_bits(src, dst):
    x = convert_sources(src) if src != "s16" else edges(src)
    got, want = run_op("bitcast-convert", [src], dst, [x])
    assert_same(got, want, dst, [x], nan_bits=True)


# --- reductions ---------------------------------------------------------------------------------

_REDUCERS = """
add {
  a = $T[] parameter(0)
  b = $T[] parameter(1)
  ROOT r = $T[] add(a, b)
}
mul {
  a = $T[] parameter(0)
  b = $T[] parameter(1)
  ROOT r = $T[] multiply(a, b)
}
max {
  a = $T[] parameter(0)
  b = $T[] parameter(1)
  ROOT r = $T[] maximum(a, b)
}
min {
  a = $T[] parameter(0)
  b = $T[] parameter(1)
  ROOT r = $T[] minimum(a, b)
}
"""


def _rows(dtype: str) -> np.ndarray:
    """Rows of 4 mixing NaN, inf, -0 and ordinary values (every 4-tuple pattern we care for)."""
    cast = NUMPY[dtype]
    vals = [np.nan, -np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -2.0]
    rows = [list(r) for r in itertools.product(vals, repeat=2)]
    rows = [[a, b, 1.0, -0.0] for a, b in rows] + [[-0.0, 0.0, -0.0, -0.0], [0.0, -0.0, 0.0, 0.0],
                                                   [-0.0, -0.0, -0.0, -0.0], [3e38, 3e38, 1.0, 1.0]]
    return np.array(rows, np.float32).astype(cast)


@pytest.mark.parametrize("dtype", ("f32", "bf16"))
@pytest.mark.parametrize("reducer,init", [("add", "0"), ("add", "-0.0"), ("mul", "1"),
                                          ("max", "-inf"), ("max", "-0.0"), ("min", "inf"),
                                          ("min", "0"), ("max", "nan")])
def test_float_reductions_with_nan_inf_and_signed_zero(dtype, reducer, init):
    rows = _rows(dtype)
    n = rows.shape[0]
    text = single_fusion_module(
        [f"{dtype}[{n},4]"],
        f"  c = {dtype}[] constant({init})\n"
        f"  ROOT r = {dtype}[{n}] reduce(p0, c), dimensions={{1}}, to_apply={reducer}",
        f"{dtype}[{n}]", extra=_REDUCERS.replace("$T", dtype))
    module = parse_hlo(text)
    want = np.asarray(evaluate(fusion_module(module, "fusion"), rows)[0])
    got = to_numpy(compile_fusion(module, "fusion")(to_torch(rows, dtype))[0], dtype)
    # Sums of two non-zero values of 4 are exact here except 3e38 + 3e38 (inf either order).
    assert_same(got, want, dtype, [rows.tolist()])


@pytest.mark.parametrize("dtype", ("bf16", "f16"))
def test_a_16_bit_reduction_rounds_its_sum_to_nearest(dtype):
    """The f32 sum rounds to the nearest 16-bit value, as XLA rounds: the interpreter's own
    ``.to(tl.bfloat16)`` truncates, and a reduction once rounded with it (1 + 1.5 ulp gave
    1 + 1 ulp)."""
    ulp = 2.0 ** (-7 if dtype == "bf16" else -10)
    rows = np.array([[1.0, 1.5 * ulp], [1.0, 1.75 * ulp], [-1.0, -1.5 * ulp], [2.0, 2.5 * ulp]],
                    np.float32).astype(NUMPY[dtype])
    text = single_fusion_module(
        [f"{dtype}[4,2]"], f"  c = {dtype}[] constant(0)\n"
        f"  ROOT r = {dtype}[4] reduce(p0, c), dimensions={{1}}, to_apply=add",
        f"{dtype}[4]", extra=_REDUCERS.replace("$T", dtype))
    module = parse_hlo(text)
    got = to_numpy(compile_fusion(module, "fusion")(to_torch(rows, dtype))[0], dtype)
    nearest = rows.astype(np.float32).sum(1).astype(NUMPY[dtype])
    np.testing.assert_array_equal(got.astype(np.float32), nearest.astype(np.float32))
    want = np.asarray(evaluate(fusion_module(module, "fusion"), rows)[0])
    np.testing.assert_array_equal(got.astype(np.float32), want.astype(np.float32))


@pytest.mark.parametrize("op,init", [("and", "true"), ("or", "false"), ("xor", "false")])
def test_pred_reductions(op, init):
    rows = np.array(list(itertools.product([False, True], repeat=5)))
    n = rows.shape[0]
    reducer = (f"red {{\n  a = pred[] parameter(0)\n  b = pred[] parameter(1)\n"
               f"  ROOT r = pred[] {op}(a, b)\n}}")
    text = single_fusion_module(
        [f"pred[{n},5]"],
        f"  c = pred[] constant({init})\n  ROOT r = pred[{n}] reduce(p0, c), dimensions={{1}}, to_apply=red",
        f"pred[{n}]", extra=reducer)
    module = parse_hlo(text)
    want = np.asarray(evaluate(fusion_module(module, "fusion"), rows)[0])
    got = to_numpy(compile_fusion(module, "fusion")(to_torch(rows, "pred"))[0], "pred")
    np.testing.assert_array_equal(got, want)
    truth = {"and": rows.all(1), "or": rows.any(1), "xor": rows.sum(1) % 2 == 1}[op]
    np.testing.assert_array_equal(want, truth)


@pytest.mark.parametrize("dtype", ("s8", "s32", "u8"))
def test_integer_sum_and_product_wrap(dtype):
    x = int_edges(dtype)
    rows = np.stack([x, x[::-1], np.roll(x, 3)], axis=1)
    n = rows.shape[0]
    for reducer, init in (("add", "0"), ("mul", "1"), ("max", str(np.iinfo(NUMPY[dtype]).min))):
        text = single_fusion_module(
            [f"{dtype}[{n},3]"],
            f"  c = {dtype}[] constant({init})\n"
            f"  ROOT r = {dtype}[{n}] reduce(p0, c), dimensions={{1}}, to_apply={reducer}",
            f"{dtype}[{n}]", extra=_REDUCERS.replace("$T", dtype))
        module = parse_hlo(text)
        want = np.asarray(evaluate(fusion_module(module, "fusion"), rows)[0])
        got = to_numpy(compile_fusion(module, "fusion")(to_torch(rows, dtype))[0], dtype)
        np.testing.assert_array_equal(got, want)


# --- the evaluator against XLA itself (jax on CPU) on the edge cases that are easy to get wrong --

def evaluate_op(opcode: str, in_types, out_type: str, arrays, attrs: str = "") -> np.ndarray:
    """The reference evaluator on ``ROOT r = opcode(p0, ...)`` (no fusion)."""
    n = len(arrays[0])
    params = "\n".join(f"  p{i} = {t}[{n}] parameter({i})" for i, t in enumerate(in_types))
    operands = ", ".join(f"p{i}" for i in range(len(arrays)))
    module = parse_hlo(f"HloModule m\nENTRY e {{\n{params}\n"
                       f"  ROOT r = {out_type}[{n}] {opcode}({operands}){attrs}\n}}\n")
    return np.asarray(evaluate(module, *arrays)[0])


_MLIR_TYPES = {"f32": "f32", "f64": "f64", "bf16": "bf16", "f16": "f16", "s8": "i8", "s16": "i16",
               "s32": "i32", "s64": "i64", "u8": "ui8", "u16": "ui16", "u32": "ui32", "pred": "i1"}


def xla_stablehlo(op_text: str, in_types, out_type: str, arrays) -> np.ndarray:
    """Run one StableHLO op on XLA:CPU (for ops jax.lax does not expose, e.g. integer power).

    ``op_text`` formats ``{args}`` (the operands) and ``{types}`` (the function type).
    """
    jax, _ = _jax_lax()
    from jax._src import xla_bridge
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir

    n = len(arrays[0])
    tensor = [f"tensor<{n}x{_MLIR_TYPES[t]}>" for t in in_types]
    result = f"tensor<{n}x{_MLIR_TYPES[out_type]}>"
    signature = ", ".join(f"%arg{i}: {t}" for i, t in enumerate(tensor))
    body = op_text.format(args=", ".join(f"%arg{i}" for i in range(len(arrays))),
                          types=f"({', '.join(tensor)}) -> {result}")
    text = (f"module @m {{\n  func.func public @main({signature}) -> {result} {{\n"
            f"    %0 = {body}\n    return %0 : {result}\n  }}\n}}\n")
    backend = xla_bridge.get_backend("cpu")
    with mlir.make_ir_context():
        executable = backend.compile_and_load(mlir.module_to_bytecode(ir.Module.parse(text)),
                                              backend.devices()[:1])
    return np.asarray(executable.execute([jax.device_put(a) for a in arrays])[0])


def _jax_lax():
    jax = pytest.importorskip("jax")
    return jax, jax.lax


def _xla(fn, *arrays) -> np.ndarray:
    jax, _ = _jax_lax()
    # 64-bit types need x64, scoped to this call: a global switch would leak into other tests
    # (JAX programs traced later would silently get 64-bit constants).
    with jax.enable_x64(True):
        return np.asarray(jax.jit(fn, backend="cpu")(*arrays))


def _normal_f32() -> np.ndarray:
    """f32 edges without denormals: XLA:CPU runs with flush-to-zero/denormals-are-zero, a CPU
    runtime setting (XLA:GPU keeps f32 denormals, and so do the evaluator and the kernels)."""
    f32 = edges("f32")
    return f32[~((f32 != 0) & (np.abs(f32) < np.finfo(np.float32).tiny))]


def _xla_cases():
    """(id, evaluator call, XLA call) for the edge cases whose XLA rule is easy to misremember."""
    _, lax = _jax_lax()
    f32 = _normal_f32()
    x, y = pairs(f32, f32)
    cases = [
        ("maximum-f32", ("maximum", ["f32"] * 2, "f32", [x, y]), lambda: _xla(lax.max, x, y)),
        ("minimum-f32", ("minimum", ["f32"] * 2, "f32", [x, y]), lambda: _xla(lax.min, x, y)),
        ("clamp-f32", ("clamp", ["f32"] * 3, "f32", [x, y, np.roll(x, 5)]),
         lambda: _xla(lax.clamp, x, y, np.roll(x, 5))),
        ("remainder-f32", ("remainder", ["f32"] * 2, "f32", [x, y]), lambda: _xla(lax.rem, x, y)),
        ("round-afz-f32", ("round-nearest-afz", ["f32"], "f32", [f32]),
         lambda: _xla(lambda a: lax.round(a, lax.RoundingMethod.AWAY_FROM_ZERO), f32)),
        ("round-even-f32", ("round-nearest-even", ["f32"], "f32", [f32]),
         lambda: _xla(lambda a: lax.round(a, lax.RoundingMethod.TO_NEAREST_EVEN), f32)),
        ("sign-f32", ("sign", ["f32"], "f32", [f32]), lambda: _xla(lax.sign, f32)),
    ]
    for t in ("s8", "s32", "u32"):
        a, b = pairs(edges(t), edges(t))
        cases += [
            (f"divide-{t}", ("divide", [t] * 2, t, [a, b]), lambda a=a, b=b: _xla(lax.div, a, b)),
            (f"remainder-{t}", ("remainder", [t] * 2, t, [a, b]), lambda a=a, b=b: _xla(lax.rem, a, b)),
            (f"shl-{t}", ("shift-left", [t] * 2, t, [a, b]), lambda a=a, b=b: _xla(lax.shift_left, a, b)),
            (f"sra-{t}", ("shift-right-arithmetic", [t] * 2, t, [a, b]),
             lambda a=a, b=b: _xla(lax.shift_right_arithmetic, a, b)),
            (f"srl-{t}", ("shift-right-logical", [t] * 2, t, [a, b]),
             lambda a=a, b=b: _xla(lax.shift_right_logical, a, b)),
            (f"power-{t}", ("power", [t] * 2, t, [a, b]),
             lambda a=a, b=b, t=t: xla_stablehlo("stablehlo.power {args} : " + f"tensor<{len(a)}x{_MLIR_TYPES[t]}>",
                                                 [t, t], t, [a, b])),
        ]
        if t.startswith("s"):
            cases.append((f"abs-{t}", ("abs", [t], t, [edges(t)]), lambda t=t: _xla(lax.abs, edges(t))))
    for src, dst in (("f32", "s8"), ("f32", "s32"), ("f32", "u8"), ("f32", "u32"), ("f32", "s64"),
                     ("f32", "bf16"), ("f32", "f16"), ("f64", "bf16"), ("f64", "f16"),
                     ("s32", "bf16"), ("s64", "f16"), ("bf16", "s8"), ("f16", "u8"), ("f32", "pred")):
        v = convert_sources(src)
        if src in BITS:  # see _normal_f32; the 16-bit results may be denormal, the inputs not
            v = v[~((v != 0) & (np.abs(v.astype(np.float64)) < np.finfo(np.float32).tiny))]
        target = {"bf16": "bfloat16", "f16": "float16", "pred": "bool"}.get(dst, NUMPY.get(dst))
        cases.append((f"convert-{src}-{dst}", ("convert", [src], dst, [v]),
                      lambda v=v, target=target: _xla(lambda a: lax.convert_element_type(a, target), v)))
    for direction in ("LT", "EQ", "GE"):
        cases.append((f"totalorder-{direction}-f32",
                      ("compare", ["f32"] * 2, "pred", [x, y], f", direction={direction}, type=TOTALORDER"),
                      lambda d=direction: xla_stablehlo(
                          f"stablehlo.compare {d}, {{args}}, TOTALORDER : {{types}}", ["f32"] * 2, "pred", [x, y])))
    return cases


_XLA_CASE_IDS = ["maximum-f32", "minimum-f32", "clamp-f32", "remainder-f32", "round-afz-f32",
                 "round-even-f32", "sign-f32",
                 *[f"{op}-{t}" for t in ("s8", "s32", "u32")
                   for op in ("divide", "remainder", "shl", "sra", "srl", "power")],
                 "abs-s8", "abs-s32",
                 *[f"convert-{s}-{d}" for s, d in (
                     ("f32", "s8"), ("f32", "s32"), ("f32", "u8"), ("f32", "u32"), ("f32", "s64"),
                     ("f32", "bf16"), ("f32", "f16"), ("f64", "bf16"), ("f64", "f16"),
                     ("s32", "bf16"), ("s64", "f16"), ("bf16", "s8"), ("f16", "u8"), ("f32", "pred"))],
                 *[f"totalorder-{d}-f32" for d in ("LT", "EQ", "GE")]]


@pytest.mark.parametrize("case_id", _XLA_CASE_IDS)
def test_evaluator_agrees_with_xla(case_id):
    _, evaluator_call, xla_call = next(c for c in _xla_cases() if c[0] == case_id)
    opcode, in_types, out_type, arrays, *attrs = evaluator_call
    want = xla_call()
    got = evaluate_op(opcode, in_types, out_type, arrays, *attrs)
    if out_type == "bf16":
        want = want.astype(ml_dtypes.bfloat16)
    # -0/+0 matter here (maximum, sign): compare bits, NaN-ness only for NaN.
    assert_same(got, want, out_type, arrays)


# --- rank-0 predicates broadcast into block ops (a Triton interpreter pitfall) -----------------

@pytest.mark.parametrize("root", [
    "ROOT r = pred[8] and(k2, b)", "ROOT r = pred[8] or(b, k2)", "ROOT r = pred[8] xor(k2, b)",
    "ROOT r = pred[8] compare(k2, b), direction=NE", "ROOT r = f32[8] select(b, p0, p1)",
    "nb = pred[] not(k)\n  bb = pred[8] broadcast(nb), dimensions={}\n  ROOT r = pred[8] or(bb, k2)",
    "f = pred[] is-finite(c)\n  bf = pred[8] broadcast(f), dimensions={}\n  ROOT r = pred[8] and(bf, k2)",
])
def test_rank0_compare_broadcast_into_block_ops(root):
    """Regression: ``and(compare(p0, p1), broadcast(compare(c, c)))`` raised TypeError in the
    interpreter (the rank-0 compare was splat as floats)."""
    from tests.triton_backend.fusion_check import run_and_compare
    body = ("  c = f32[] constant(0)\n  k = pred[] compare(c, c), direction=EQ\n"
            "  b = pred[8] broadcast(k), dimensions={}\n  k2 = pred[8] compare(p0, p1), direction=GT\n"
            f"  {root}")
    out = root.split("= ")[-1].split()[0] if "\n" not in root else root.rsplit("= ", 1)[-1].split()[0]
    run_and_compare(single_fusion_module(["f32[8]", "f32[8]"], body, out), exact=True)


@pytest.mark.parametrize("opcode", sorted(ULP_TOLERANCE))
def test_transcendental_f64_keeps_f64_precision(opcode):
    """fp64 results within a few fp64 ulps (a constant rounded to fp32 inside a helper, as
    ``tl.where`` of two literals does, costs about 10^8 of them).  The interpreter's
    ``power`` is ``exp2(y * log2(x))``: the product's rounding grows with the result's
    exponent, up to 2^10 ulps at the ends of the range (libdevice's on a GPU is exact)."""
    binary = opcode in ("atan2", "power")
    x = edges("f64")
    inputs = list(pairs(x, x)) if binary else [x]
    got, want = run_op(opcode, ["f64"] * len(inputs), "f64", inputs)
    assert_same(got, want, "f64", inputs, ulps=1100 if opcode == "power" else 4)
