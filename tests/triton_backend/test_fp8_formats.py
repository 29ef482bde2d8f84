"""XLA's other small floats as kernel types (``device_lib.float8_formats``): f8e4m3fnuz and
f8e5m2fnuz, f8e4m3b11fnuz, the OCP's IEEE-like f8e4m3 and f8e3m4, and the MX formats
f8e8m0fnu (a power of two) and f4e2m1fn (their codes in uint8 tensors).  Converts, an op rounded in the type, and values passed in and
returned, on edge values: NaN, infinities, -0.0 (which fnuz formats lack), subnormals,
overflow (NaN for fnuz, infinity for IEEE-like), rounding ties.  Truths: XLA itself (JAX on
CPU) and the evaluator (ml_dtypes), bit for bit."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import torch

from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo
from tests.triton_backend.target_compiles import compile_on_targets
from triton_backend import compile_hlo
from triton_backend.host.input_validation import tensor_from_numpy, tensor_to_numpy
from triton_backend.reports.ptx_report import find_ptxas

FORMATS = ("f4e2m1fn", "f8e3m4", "f8e4m3", "f8e4m3b11fnuz", "f8e4m3fnuz", "f8e5m2fnuz",
           "f8e8m0fnu")
JNP = {"f4e2m1fn": "float4_e2m1fn", "f8e3m4": "float8_e3m4", "f8e4m3": "float8_e4m3",
       "f8e4m3b11fnuz": "float8_e4m3b11fnuz", "f8e4m3fnuz": "float8_e4m3fnuz",
       "f8e5m2fnuz": "float8_e5m2fnuz", "f8e8m0fnu": "float8_e8m0fnu"}

EDGES = np.array([0.0, -0.0, 1.0, -1.0, 1.5, 3.0, 0.1, -0.3, 1e-3, 2e-6, 15.5, 16.0, 17.0,
                  29.0, 30.0, 31.0, 239.0, 240.0, 247.0, 248.0, 250.0, 448.0, 57344.0, 61440.0,
                  1e10, -1e10, np.inf, -np.inf, np.nan, -np.nan, 0.0078125, 2 ** -9 * 1.5,
                  2 ** -11, 2 ** -16 * 3, 2 ** -17, 0.1875, 0.3125, 0.25, 0.75, 5.0, 6.0, 7.0,
                  2.0 ** -127, 2.0 ** -128, 1.5 * 2.0 ** -127, 3e38, 1.7e38], np.float32)


def _same_bits(got: np.ndarray, want: np.ndarray) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.dtype.itemsize == want.dtype.itemsize
    as_int = f"u{got.dtype.itemsize}"
    np.testing.assert_array_equal(got.view(as_int), want.view(as_int))


@pytest.mark.parametrize("t", FORMATS)
def test_converts_and_a_rounded_op_match_xla(t):
    """``x.astype(t)``, its square rounded in ``t`` and widened, and ``t`` returned."""
    dtype = getattr(jnp, JNP[t])

    def fn(x):
        y = x.astype(dtype)
        return (y * y).astype(jnp.float32), y, y.astype(jnp.bfloat16)

    text = jax.jit(fn).lower(EDGES).as_text(dialect="hlo")
    got = compile_hlo(text, cache=False)(torch.from_numpy(EDGES))
    want = jax.jit(fn)(EDGES)
    # XLA:CPU multiplies f8e8m0fnu values in f32 without rounding the product back (a square
    # past the range gives 0 or inf, which the format cannot hold): its square is judged by
    # the evaluator alone, which rounds every op's result to the type, as every kernel does.
    for k, (g, w) in enumerate(zip(got, want)):
        if not (t == "f8e8m0fnu" and k == 0):
            _same_bits(tensor_to_numpy(g), w)
    module = parse_hlo(text)
    for g, e in zip(got, evaluate(module, EDGES)):
        _same_bits(tensor_to_numpy(g), e)


@pytest.mark.parametrize("t", FORMATS)
def test_values_of_the_type_pass_in_and_out(t):
    """Every code passed in (torch's fnuz and e8m0 dtypes, else their bytes in uint8), added
    to itself in ``t``, against the evaluator."""
    n = 16 if t == "f4e2m1fn" else 256
    codes = np.arange(n, dtype=np.uint8).view(getattr(ml_dtypes, JNP[t]))
    text = (f"HloModule m\nENTRY e {{\n  x = {t}[{n}] parameter(0)\n"
            f"  ROOT r = {t}[{n}] add(x, x)\n}}\n")
    (got,) = compile_hlo(text, cache=False)(tensor_from_numpy(codes, t))
    (want,) = evaluate(parse_hlo(text), codes)
    got = tensor_to_numpy(got)
    assert got.dtype.itemsize == 1
    _same_bits(got, np.asarray(want))
    native = {"f8e4m3fnuz": "float8_e4m3fnuz", "f8e5m2fnuz": "float8_e5m2fnuz",
              "f8e8m0fnu": "float8_e8m0fnu"}.get(t)
    if native is not None:  # torch's own tensor is taken as its bytes
        again = compile_hlo(text, cache=False)(
            torch.from_numpy(codes.view(np.uint8)).view(getattr(torch, native)))[0]
        _same_bits(tensor_to_numpy(again), np.asarray(want))


@pytest.mark.skipif(find_ptxas(90) is None, reason="ptxas not found in the Triton wheel")
def test_the_conversions_compile_for_sm90():
    text = ("HloModule m\nENTRY e {\n  x = f8e4m3fnuz[64,64] parameter(0)\n"
            "  y = f8e3m4[64,64] convert(x)\n  z = f8e5m2fnuz[64,64] convert(y)\n"
            "  f = f4e2m1fn[64,64] convert(z)\n  s = f8e8m0fnu[64,64] convert(f)\n"
            "  ROOT r = f32[64,64] convert(s)\n}\n")
    (kernel,) = compile_hlo(text, target="sm_90", cache=False).fusions.values()
    (report,) = compile_on_targets([[kernel.kernel_path, 90]])
    assert report["registers"] > 0 and report["spills"] == 0, report


@pytest.mark.parametrize("t", ["f8e3m4", "f8e4m3", "f8e4m3fnuz"])
def test_a_dot_of_the_type_matches_xla(t):
    """``tl.dot`` has no such type: the operands widen exactly to f32 and the kernel sums
    their products in f32 (a bf16 result rounds once)."""
    rng = np.random.default_rng(3)
    dtype = getattr(jnp, JNP[t])
    a = rng.standard_normal((20, 40)).astype(dtype)
    b = rng.standard_normal((40, 24)).astype(dtype)
    for out in (jnp.float32, jnp.bfloat16):
        fn = lambda a, b: jnp.dot(a, b, preferred_element_type=out)  # noqa: E731
        compiled = compile_hlo(jax.jit(fn).lower(a, b).as_text(dialect="hlo"), cache=False)
        (got,) = compiled(tensor_from_numpy(a, t), tensor_from_numpy(b, t))
        want = np.asarray(jax.jit(fn)(a, b)).astype(np.float32)
        np.testing.assert_allclose(tensor_to_numpy(got).astype(np.float32), want,
                                   rtol=1e-6 if out == jnp.float32 else 2 ** -8, atol=1e-5)
