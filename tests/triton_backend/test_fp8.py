"""8-bit floats (f8e4m3fn, f8e5m2) in kernels: fp8 dots as JAX writes them, converts over
special values, against XLA and the reference evaluator; and the fp8 dot compiled for sm_90
(by the process's compile child, without ``TRITON_INTERPRET``) uses the tensor cores' fp8 MMA."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch

from fusion.errors import UnsupportedOpError
from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo
from tests.triton_backend.target_compiles import compile_on_targets
from triton_backend import compile_hlo
from triton_backend.reports.ptx_report import find_ptxas

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

from tests.conformance.xla_oracle import run_xla  # noqa: E402

RNG = np.random.default_rng(8)
F8 = {"f8e4m3fn": ml_dtypes.float8_e4m3fn, "f8e5m2": ml_dtypes.float8_e5m2}
TORCH_F8 = {ml_dtypes.float8_e4m3fn: torch.float8_e4m3fn, ml_dtypes.float8_e5m2: torch.float8_e5m2}


def _torch(a: np.ndarray) -> torch.Tensor:
    a = np.asarray(a)
    if a.dtype.type in TORCH_F8:
        return torch.from_numpy(a.view(np.uint8).copy()).view(TORCH_F8[a.dtype.type])
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.view(np.uint16).copy()).view(torch.bfloat16)
    return torch.from_numpy(a.copy())


def _numpy(t: torch.Tensor) -> np.ndarray:
    return t.float().numpy() if t.dtype == torch.bfloat16 else t.numpy()


def _dot_text(out: str, t: str = "f8e4m3fn") -> str:
    return (f"HloModule m\nENTRY e {{\n  a = {t}[16,32] parameter(0)\n  b = {t}[32,8] parameter(1)\n"
            f"  ROOT d = {out}[16,8] dot(a, b), lhs_contracting_dims={{1}}, "
            f"rhs_contracting_dims={{0}}\n}}\n")


def _operands(t=ml_dtypes.float8_e4m3fn):
    a = (RNG.standard_normal((16, 32)) * 16).astype(t)
    b = RNG.standard_normal((32, 8)).astype(t)
    return a, b


def _check(text: str, *arrays, rtol: float = 1e-6) -> None:
    """compile_hlo against XLA and the evaluator (fp8 products are exact in f32; only the
    order of the f32 sums may differ)."""
    (want,) = run_xla(text, *arrays)
    (reference,) = evaluate(parse_hlo(text), *arrays)
    (got,) = compile_hlo(text)(*[_torch(a) for a in arrays])
    want, reference = np.asarray(want, np.float32), np.asarray(reference, np.float32)
    scale = float(np.abs(want).max())
    np.testing.assert_allclose(_numpy(got), want, rtol=rtol, atol=rtol * scale)
    np.testing.assert_allclose(reference, want, rtol=rtol, atol=rtol * scale)


@pytest.mark.parametrize("out, rtol", [("f32", 1e-6), ("bf16", 2 ** -8)])
def test_fp8_dot_matches_xla(out, rtol):
    _check(_dot_text(out), *_operands(), rtol=rtol)


def test_f8e5m2_dot_matches_xla():
    _check(_dot_text("f32", "f8e5m2"), *_operands(ml_dtypes.float8_e5m2))


def _scaled_dot(a, b, s):
    d = jax.lax.dot_general(a, b, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32)
    return d * s


def _scaled_dot_lowered():
    args = (jax.ShapeDtypeStruct((16, 32), jnp.float8_e4m3fn),
            jax.ShapeDtypeStruct((32, 8), jnp.float8_e4m3fn), jax.ShapeDtypeStruct((), jnp.float32))
    return jax.jit(_scaled_dot).lower(*args)


def test_jax_scaled_fp8_matmul_fuses_and_matches_xla():
    lowered = _scaled_dot_lowered()
    text = lowered.as_text(dialect="hlo")
    a, b = _operands()
    s = np.float32(0.37)
    _check(text, a, b, s)
    compiled = compile_hlo(text)
    (source,) = [f.source for f in compiled.fusions.values()]
    assert "tl.dot(" in source and "xla_math.DOT_F8E4M3FN" in source
    # XLA:CPU's optimized module (converts to f32, then an f32 dot) runs too.
    optimized = lowered.compile().as_text()
    (got,) = compile_hlo(optimized)(_torch(a), _torch(b), _torch(s))
    (want,) = run_xla(text, a, b, s)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-6 * np.abs(want).max())


_SPECIAL = np.float32([0, -0.0, 1, -1, 448, -448, 464, 464.0001, 479.99, 480, 500, 1e6, 3.4e38,
                       np.inf, -np.inf, np.nan, -np.nan, 2 ** -9, 2 ** -10, 2 ** -10 * 1.0001,
                       3 * 2 ** -11, 2 ** -16, 2 ** -17, 3 * 2 ** -17, 1e-30, -1e-45, 0.1, -300,
                       57344, 61440, 65536, -65536, 1.0625, 1.1875, -2 ** -7 * 3])


@pytest.mark.parametrize("t", sorted(F8))
def test_convert_round_trip_over_special_values(t):
    # Nearest even; f8e4m3fn has no infinity (overflow and inf give NaN), f8e5m2 overflows to inf.
    x = np.concatenate([_SPECIAL, (RNG.standard_normal(200) * 2.0 ** RNG.integers(-20, 18, 200))
                        .astype(np.float32)])
    n = len(x)
    text = (f"HloModule m\nENTRY e {{\n  x = f32[{n}] parameter(0)\n  c = {t}[{n}] convert(x)\n"
            f"  ROOT r = f32[{n}] convert(c)\n}}\n")
    (want,) = run_xla(text, x)
    assert np.array_equal(want, x.astype(F8[t]).astype(np.float32), equal_nan=True)
    for fuse in (True, False):
        (got,) = compile_hlo(text, fuse=fuse)(torch.from_numpy(x))
        got = got.numpy()
        assert np.array_equal(got, want, equal_nan=True), x[~((got == want) | np.isnan(want))]
        assert np.array_equal(np.signbit(got[got == 0]), np.signbit(want[want == 0]))


@pytest.mark.parametrize("t", sorted(F8))
def test_fp8_store_and_elementwise_match_xla(t):
    # f32 -> fp8 output (stored as fp8 bits), and fp8 arithmetic rounded after every op.
    x = np.concatenate([_SPECIAL, RNG.standard_normal(29).astype(np.float32) * 30])
    y = x[::-1].copy()
    n = len(x)
    text = (f"HloModule m\nENTRY e {{\n  x = f32[{n}] parameter(0)\n  y = f32[{n}] parameter(1)\n"
            f"  a = {t}[{n}] convert(x)\n  b = {t}[{n}] convert(y)\n"
            f"  ROOT r = {t}[{n}] multiply(a, b)\n}}\n")
    (want,) = run_xla(text, x, y)
    (got,) = compile_hlo(text)(torch.from_numpy(x), torch.from_numpy(y))
    got = got.view(torch.uint8).numpy().view(F8[t]).astype(np.float32)
    assert np.array_equal(got, np.asarray(want).astype(np.float32), equal_nan=True)


def test_f64_to_fp8_convert_is_refused():
    text = ("HloModule m\nENTRY e {\n  x = f64[4] parameter(0)\n"
            "  ROOT c = f8e4m3fn[4] convert(x)\n}\n")
    with pytest.raises(UnsupportedOpError, match="f64 to an 8-bit float"):
        compile_hlo(text)


def test_f8e4m3fn_dot_is_refused_below_sm89():
    with pytest.raises(UnsupportedOpError, match="needs sm_89"):
        compile_hlo(_dot_text("f32"), target="sm_80")


@pytest.mark.skipif(find_ptxas(90) is None, reason="ptxas not found in the Triton wheel")
def test_fp8_dot_compiles_to_fp8_wgmma_on_sm90():
    text = _dot_text("f32").replace("16,32", "64,128").replace("32,8", "128,64") \
        .replace("16,8", "64,64")
    compiled = compile_hlo(text, target="sm_90")
    (fusion,) = compiled.fusions.values()
    (found,) = compile_on_targets([(fusion.kernel_path, 90)])
    report = {"wgmma_e4m3": found["ptx"].count(".e4m3.e4m3"), "spills": found["spills"]}
    assert report["wgmma_e4m3"] > 0 and report["spills"] == 0, report
