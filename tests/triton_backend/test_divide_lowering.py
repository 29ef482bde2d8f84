"""A division by a constant lowers to a multiply by its reciprocal rounded to the constant's
type, as XLA's algebraic simplifier rewrites it: for a power of two bit for bit the division's
result (special values included), for any other constant bit for bit XLA's."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo
from triton_backend import compile_hlo

SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -3e-39, 3e38, 1.5, -7.0, 2.0 ** -126]


@pytest.mark.parametrize("dtype, divisor, multiplies", [
    ("f32", "8", True), ("f32", "-0.25", True), ("bf16", "8", True), ("f16", "1024", True),
    ("f32", "1.7014118e+38", False),  # 2^127: its reciprocal is subnormal in f32
])
def test_division_by_a_power_of_two_is_a_multiply_with_the_same_bits(dtype, divisor, multiplies):
    import ml_dtypes  # noqa: F401 - registers bfloat16 with numpy
    module = parse_hlo(f"""HloModule m
ENTRY e {{
  p = {dtype}[64] parameter(0)
  c = {dtype}[] constant({divisor})
  b = {dtype}[64] broadcast(c), dimensions={{}}
  ROOT d = {dtype}[64] divide(p, b)
}}""")
    compiled = compile_hlo(module)
    (kernel,) = compiled.fusions.values()
    assert ("tl.math.div_rn" not in kernel.source) == multiplies
    rng = np.random.default_rng(0)
    x = np.concatenate([np.float32(SPECIALS), rng.standard_normal(64 - len(SPECIALS))])
    with np.errstate(over="ignore"):
        x = x.astype(np.float32).astype(module.entry.parameters[0].shape.element_type.numpy_dtype())
    want = evaluate(module, x)[0]
    tensor = torch.from_numpy(x.astype(np.float32)).to(
        {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[dtype])
    got = compiled(tensor)[0].float().numpy().astype(want.dtype)
    # Every bit, but NaN's sign and payload (the numerics policy allows the canonical NaN).
    nan = np.isnan(want.astype(np.float32))
    assert (np.isnan(got.astype(np.float32)) == nan).all()
    assert got[~nan].tobytes() == want[~nan].tobytes()


@pytest.mark.parametrize("dtype, divisor", [
    ("f32", "3"), ("f32", "11.313708"), ("bf16", "3"), ("bf16", "768"), ("f16", "0.3"),
])
def test_division_by_another_constant_is_xlas_multiply(dtype, divisor):
    import ml_dtypes
    from tests.conformance.xla_oracle import run_xla

    text = f"""HloModule m
ENTRY e {{
  p = {dtype}[64] parameter(0)
  c = {dtype}[] constant({divisor})
  b = {dtype}[64] broadcast(c), dimensions={{}}
  ROOT d = {dtype}[64] divide(p, b)
}}"""
    module = parse_hlo(text)
    compiled = compile_hlo(module)
    (kernel,) = compiled.fusions.values()
    assert "tl.math.div_rn" not in kernel.source
    numpy_dtype = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16}[dtype]
    # Normal numbers only: XLA:CPU flushes denormals (the numerics policy keeps them).
    x = (np.random.default_rng(1).standard_normal(64) * 100).astype(numpy_dtype)
    x[:4] = np.array([0.0, -0.0, np.inf, -np.inf]).astype(numpy_dtype)
    want = run_xla(text, x)[0]
    got = compiled(torch.from_numpy(x.astype(np.float32)).to(
        {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}[dtype]))[0]
    assert got.float().numpy().astype(numpy_dtype).tobytes() == np.asarray(want).tobytes()
    quotient = evaluate(module, x)[0].astype(np.float32)  # the exact division: an ulp away
    np.testing.assert_allclose(got.float().numpy(), quotient, rtol=2 * float(ml_dtypes.finfo(numpy_dtype).eps))
