"""``reduce-precision``: the kernel (integer bit arithmetic) and the reference evaluator are
bit-exact with XLA (``jax.lax.reduce_precision``) on normals, denormals, infinities, NaN and
signed zeros, in f32, f16 (rounded in its own format), bf16 and f64."""
from __future__ import annotations

import numpy as np
import pytest

from fusion.evaluator import evaluate
from fusion.evaluator.npz_io import output_arrays
from fusion.text.parser import parse_hlo
from triton_backend import compile_hlo
from triton_backend.host.input_validation import tensor_from_numpy, tensor_to_numpy

jax = pytest.importorskip("jax")
import ml_dtypes  # noqa: E402 - installed with jax
from jax import lax  # noqa: E402

DTYPES = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16, "f64": np.float64}


def _values(dtype) -> np.ndarray:
    rng = np.random.default_rng(3)
    finfo = ml_dtypes.finfo(dtype)
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0009765625, 65504, 65520, 6e-8, -6e-8,
               1e-40, 3e38, float(finfo.max), float(finfo.tiny), float(finfo.smallest_subnormal)]
    with np.errstate(all="ignore"):
        return np.concatenate([rng.standard_normal(100) * 10.0 ** rng.integers(-9, 9, 100),
                               special]).astype(dtype)


def _bits(a: np.ndarray) -> np.ndarray:
    a = np.asarray(a)
    bits = a.view(f"u{a.itemsize}").astype(np.uint64)
    return np.where(np.isnan(a.astype(np.float64)), 0, bits)  # NaN payloads may differ


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("exponent_bits,mantissa_bits", [(5, 10), (8, 7), (4, 3), (2, 0)])
def test_kernel_and_evaluator_are_bit_exact_with_xla(dtype, exponent_bits, mantissa_bits):
    x = _values(DTYPES[dtype])
    text = f"""HloModule m
ENTRY e {{
  x = {dtype}[{x.size}] parameter(0)
  ROOT r = {dtype}[{x.size}] reduce-precision(x), exponent_bits={exponent_bits}, mantissa_bits={mantissa_bits}
}}"""
    with jax.enable_x64(True):
        want = np.asarray(jax.jit(lambda v: lax.reduce_precision(v, exponent_bits, mantissa_bits))(x))
    (reference,) = output_arrays(evaluate(parse_hlo(text), x))
    (got,) = compile_hlo(text)(tensor_from_numpy(x, dtype))
    got = tensor_to_numpy(got)
    assert got.dtype == want.dtype == np.asarray(reference).dtype
    np.testing.assert_array_equal(_bits(reference), _bits(want))
    np.testing.assert_array_equal(_bits(got), _bits(want))
    np.testing.assert_array_equal(np.isnan(got.astype(np.float64)), np.isnan(want.astype(np.float64)))
