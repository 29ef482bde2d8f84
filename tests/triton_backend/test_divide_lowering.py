"""A division by a power of two lowers to a multiply by its reciprocal (as XLA's algebraic
simplifier rewrites it), bit for bit the division's result, special values included."""
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
    ("f32", "3", False),           # 1/3 is not exact
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
