"""``stochastic-convert`` (floats to signed integers, rounded up with the probability of their
fraction against given random bits; TensorFlow's ``StochasticCastToInt``), which was refused:
the evaluator's formula and the compiled expansion give XLA's integers bit for bit, edges
included (halves, negatives, NaN, infinities, the target's range)."""
from __future__ import annotations

import numpy as np
import pytest

from fusion.errors import HloVerifyError
from fusion.evaluator import evaluate
from fusion.ir.element_types import element_type
from fusion.shapes.verifier import verify_module
from fusion.text.parser import parse_hlo
from tests.conformance.xla_oracle import run_xla
from tests.triton_backend.xla_three_way import run_compiled

EDGES = [0.0, -0.0, 0.5, -0.5, 1.25, -1.25, 2.75, -3.999, 127.5, -128.5, 300.0, -300.0,
         40000.0, -40000.0, 3e9, -3e9, 1e20, -1e20, np.inf, -np.inf, np.nan, 1e-6]


def module(source: str, target: str, n: int) -> str:
    bits = element_type(source).bits
    return (f"HloModule m\nENTRY e {{\n  x = {source}[{n}] parameter(0)\n"
            f"  r = u{bits}[{n}] parameter(1)\n  ROOT y = {target}[{n}] stochastic-convert(x, r)\n}}\n")


@pytest.mark.parametrize("source,target", [("f32", "s8"), ("f16", "s16"), ("bf16", "s32"),
                                           ("f64", "s64")])
def test_xlas_integers_bit_for_bit(source, target):
    bits = element_type(source).bits
    numpy_type = element_type(source).numpy_dtype()
    rng = np.random.default_rng(bits)
    x = np.concatenate([np.array(EDGES), rng.standard_normal(42) * 50]).astype(numpy_type)
    # Random bits at both ends and around a half, so some fractions round up, some down.
    random = rng.integers(0, 2 ** bits, size=x.size, dtype=np.uint64)
    random[:4] = [0, 2 ** bits - 1, 2 ** (bits - 1), 2 ** (bits - 1) - 1]
    random = random.astype(f"u{bits // 8}")
    text = module(source, target, x.size)
    (want,) = run_xla(text, x, random)
    (got,) = evaluate(parse_hlo(text), x, random)
    (ran,) = run_compiled(text, x, random)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(ran, want)


def test_rounding_up_follows_the_fraction():
    """Over many random words, 2.25 rounds to 3 about a quarter of the time, -2.75 to -3
    three quarters of it: the expected value is the operand."""
    n = 4000
    x = np.repeat(np.float32([2.25, -2.75]), n)
    random = np.random.default_rng(0).integers(0, 2 ** 32, size=2 * n, dtype=np.uint64)
    (y,) = evaluate(parse_hlo(module("f32", "s32", 2 * n)), x, random.astype(np.uint32))
    assert set(np.unique(y[:n])) == {2, 3} and set(np.unique(y[n:])) == {-3, -2}
    assert abs(y[:n].mean() - 2.25) < 0.03 and abs(y[n:].mean() + 2.75) < 0.03


@pytest.mark.parametrize("source,bits,target,problem", [
    ("f32", "u16", "s32", "unsigned random bits of their width"),
    ("s32", "u32", "s32", "takes floats"),
    ("f32", "u32", "u32", "to u32 is not defined"),
])
def test_invalid_stochastic_converts_are_located_errors(source, bits, target, problem):
    text = (f"HloModule m\nENTRY e {{\n  x = {source}[4] parameter(0)\n  r = {bits}[4] parameter(1)\n"
            f"  ROOT y = {target}[4] stochastic-convert(x, r)\n}}\n")
    with pytest.raises(HloVerifyError) as info:
        verify_module(parse_hlo(text))
    assert problem in info.value.message and info.value.line == 5
