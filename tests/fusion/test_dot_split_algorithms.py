"""XLA's bf16 split dot algorithms (``dot_bf16_bf16_f32_x3``, ``_x6``, ``_x9``).

The evaluator splits each f32 operand into bf16 parts as XLA:GPU's ``DotAlgorithmRewriter``
does (``fusion.evaluator.dot_algorithms``) and sums the products of the named pairs; the
kernels run Triton's own split on a GPU and exact f32 under the interpreter.  The truths here:
the parts' sums (exact in f64), a product worked by hand, error bounds against the f64
product, and JAX's own lowering of its presets."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

import fusion
from fusion.errors import EvaluationError
from fusion.evaluator.dot_algorithms import (KNOWN_ALGORITHMS, OPERAND_ROUNDING_ALGORITHMS,
                                             bf16_parts)
from fusion.text.parser import parse_hlo
from fusion.transforms.dot_algorithm import DOT_ALGORITHM_PRECISIONS
from triton_backend import compile_hlo
from triton_backend.device_lib import elementwise_math
from triton_backend.host.output_check import compare_with_evaluator
from triton_backend.templates.dot.gemm_kernel import SPLIT_PRECISION_CONSTANTS

SPLITS = ("dot_bf16_bf16_f32_x3", "dot_bf16_bf16_f32_x6", "dot_bf16_bf16_f32_x9")

#: Normal f32 values whose last part is still a normal bf16 (bf16 has f32's exponents).
NORMAL = st.floats(min_value=2.0 ** -100, max_value=2.0 ** 100, width=32) \
    .flatmap(lambda x: st.sampled_from((x, -x)))


def module(algorithm: str, m: int, k: int, n: int, lhs: str = "f32"):
    return parse_hlo(f"""HloModule m
ENTRY e {{
  a = {lhs}[{m},{k}] parameter(0)
  b = f32[{k},{n}] parameter(1)
  ROOT d = f32[{m},{n}] dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}, algorithm={algorithm}
}}""")


def evaluate(m, *args) -> np.ndarray:
    return np.asarray(fusion.evaluate(m, *args)[0])


def _is_bf16(part: np.ndarray) -> bool:
    return bool(np.all(part.astype(ml_dtypes.bfloat16).astype(np.float32) == part))


@settings(max_examples=60, deadline=None)
@given(x=NORMAL)
def test_three_bf16_parts_sum_to_the_value_and_two_keep_sixteen_bits(x):
    three = bf16_parts(np.float32([x]), 3)
    assert all(_is_bf16(p) for p in three)
    assert sum(float(p[0]) for p in three) == float(np.float32(x))
    high, low = bf16_parts(np.float32([x]), 2)
    assert _is_bf16(high) and _is_bf16(low)
    assert abs(float(np.float32(x)) - float(high[0]) - float(low[0])) <= 2.0 ** -16 * abs(x)


def test_a_product_worked_by_hand():
    # x = 1 + 2^-9 + 2^-17: high part 1, low part 2^-9 (2^-9 + 2^-17 rounds to even in bf16),
    # so _x3 keeps 1 + 2 * 2^-9; the three parts 1, 2^-9, 2^-17 are exact, and _x6 and _x9
    # give x*x = 1 + 2^-8 + 2^-16 + 2^-18 + 2^-25 + 2^-34 rounded to f32 (the last two go)
    x = np.float32([[1 + 2 ** -9 + 2 ** -17]])
    want = {"dot_bf16_bf16_f32_x3": 1 + 2 ** -8,
            "dot_bf16_bf16_f32_x6": 1 + 2 ** -8 + 2 ** -16 + 2 ** -18,
            "dot_bf16_bf16_f32_x9": 1 + 2 ** -8 + 2 ** -16 + 2 ** -18}
    for algorithm, value in want.items():
        assert float(evaluate(module(algorithm, 1, 1, 1), x, x)[0, 0]) == value, algorithm


@pytest.mark.parametrize("algorithm,bits", [(SPLITS[0], 15), (SPLITS[1], 22), (SPLITS[2], 22)])
def test_each_split_is_as_exact_as_its_parts(algorithm, bits):
    # Against the f64 product: each product loses at most 2^-bits of |a||b| to the split (the
    # dropped parts' products) and the f32 sum of K terms about K * 2^-24 of sum |a||b|.
    rng = np.random.default_rng(3)
    k = 64
    a = rng.standard_normal((8, k)).astype(np.float32)
    b = rng.standard_normal((k, 8)).astype(np.float32)
    got = evaluate(module(algorithm, 8, k, 8), a, b).astype(np.float64)
    exact = a.astype(np.float64) @ b.astype(np.float64)
    scale = np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)
    assert np.all(np.abs(got - exact) <= (2.0 ** -bits + k * 2.0 ** -24) * scale)
    if algorithm == SPLITS[0]:
        # and _x3 is not the f32 product: it drops the low parts' product
        assert np.abs(got - exact).max() > 2.0 ** -20 * scale.max()


@pytest.mark.parametrize("algorithm", SPLITS)
def test_an_infinite_product_survives_its_zero_low_parts(algorithm):
    # inf's low part is inf - inf = NaN; XLA zeroes the NaN of the small products' sum
    a = np.float32([[1.0, 2.0]])
    b = np.float32([[np.inf], [1.0]])
    m = module(algorithm, 1, 2, 1)
    assert evaluate(m, a, b)[0, 0] == np.inf
    assert np.isnan(evaluate(m, np.float32([[np.nan, 1.0]]), b)[0, 0])


def test_a_split_of_bf16_operands_and_an_unknown_algorithm_are_refused():
    a = np.ones((2, 3), ml_dtypes.bfloat16)
    b = np.ones((3, 2), np.float32)
    with pytest.raises(EvaluationError, match="splits f32 operands, not bf16 and f32"):
        evaluate(module(SPLITS[0], 2, 3, 2, lhs="bf16"), a, b)
    with pytest.raises(EvaluationError, match="unknown dot algorithm dot_f17_f17_f32"):
        evaluate(module("dot_f17_f17_f32", 2, 3, 2), a.astype(np.float32), b)


@pytest.mark.parametrize("algorithm,constant", [(SPLITS[0], "xla_math.BF16X3_PRECISION"),
                                                (SPLITS[1], "xla_math.BF16X6_PRECISION"),
                                                (SPLITS[2], "'ieee'")])
def test_a_compiled_split_dot_passes_the_check(algorithm, constant):
    m = module(algorithm, 16, 48, 16)
    rng = np.random.default_rng(4)
    a = rng.standard_normal((16, 48)).astype(np.float32)
    b = rng.standard_normal((48, 16)).astype(np.float32)
    compiled = compile_hlo(m, cache=False)
    [source] = [f.source for f in compiled.fusions.values() if "tl.dot(" in f.source]
    assert f"input_precision={constant}" in source
    got = compiled(torch.from_numpy(a), torch.from_numpy(b))[0].numpy()
    [verdict] = compare_with_evaluator(m, [a, b], [got], ["f32"])
    assert verdict.passed, verdict.describe()


def test_jax_s_split_presets_compile_and_match_xla():
    def f(x, y):
        return jax.lax.dot(x, y, precision=jax.lax.DotAlgorithmPreset.BF16_BF16_F32_X3)
    x = jax.ShapeDtypeStruct((16, 32), jnp.float32)
    text = jax.jit(f).lower(x, x.update(shape=(32, 8))).as_text(dialect="hlo")
    assert "algorithm=dot_bf16_bf16_f32_x3" in text
    rng = np.random.default_rng(5)
    a = rng.standard_normal((16, 32)).astype(np.float32)
    b = rng.standard_normal((32, 8)).astype(np.float32)
    got = compile_hlo(text, cache=False)(torch.from_numpy(a), torch.from_numpy(b))[0].numpy()
    # XLA:CPU ignores the algorithm and multiplies in f32; _x3 keeps about 16 bits
    scale = np.abs(a) @ np.abs(b)
    assert np.all(np.abs(got - np.asarray(jax.jit(f)(a, b))) <= 2.0 ** -14 * scale)


def test_each_algorithm_runs_at_a_precision_tl_dot_takes():
    for precision, constant in SPLIT_PRECISION_CONSTANTS.items():
        # the interpreter (and a Triton without the split) multiplies in exact f32
        assert getattr(elementwise_math, constant).value in (precision, "ieee")
    assert set(DOT_ALGORITHM_PRECISIONS.values()) <= {"ieee", "tf32", "tf32x3"} \
        | set(SPLIT_PRECISION_CONSTANTS)
    # every algorithm the evaluator knows is rewritten away or run by the templates
    assert set(DOT_ALGORITHM_PRECISIONS) | set(OPERAND_ROUNDING_ALGORITHMS) == KNOWN_ALGORITHMS
