"""Dots whose algorithm rounds the operands (XLA's ``dot_bf16_bf16_f32``, ``dot_f16_f16_f32``,
``dot_bf16_bf16_bf16``, ``dot_f16_f16_f16``):
the evaluator multiplies the operands rounded to the algorithm's type, as XLA:GPU does; the
rewrite into converts and a plain dot (``fusion.transforms.dot_operand_rounding``) keeps the
value; and compiled kernels (interpreter) match.  JAX writes the algorithm on every bf16 dot
whose result it wants in f32, so ``jax.nn.dot_product_attention`` in bf16 depends on it."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

import fusion
from fusion.text.parser import parse_hlo
from fusion.transforms.dot_operand_rounding import round_dot_operands
from triton_backend import compile_hlo

TYPES = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "f16": np.float16}
ROUNDED = {"dot_bf16_bf16_bf16": ml_dtypes.bfloat16, "dot_bf16_bf16_f32": ml_dtypes.bfloat16,
           "dot_f16_f16_f16": np.float16, "dot_f16_f16_f32": np.float16}


def evaluate(m, *args) -> np.ndarray:
    out = fusion.evaluate(m, *args)
    return np.asarray(out[0] if isinstance(out, (tuple, list)) else out)


def module(lhs: str, rhs: str, algorithm: str, m: int = 3, k: int = 5, n: int = 4,
           out: str = "f32"):
    return parse_hlo(f"""HloModule m
ENTRY e {{
  a = {lhs}[{m},{k}] parameter(0)
  b = {rhs}[{k},{n}] parameter(1)
  ROOT d = {out}[{m},{n}] dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}, algorithm={algorithm}
}}""")


@settings(max_examples=12, deadline=None)
@given(lhs=st.sampled_from(sorted(TYPES)), rhs=st.sampled_from(sorted(TYPES)),
       algorithm=st.sampled_from(sorted(ROUNDED)), seed=st.integers(0, 2**16))
def test_the_operands_are_rounded_to_the_algorithm_s_type(lhs, rhs, algorithm, seed):
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal((3, 5)) * 3).astype(TYPES[lhs])
    b = (rng.standard_normal((5, 4)) * 3).astype(TYPES[rhs])
    m = module(lhs, rhs, algorithm)
    got = evaluate(m, a, b)
    # NumPy: round each operand to the algorithm's type, then an f64 product (exact for
    # these widths) rounded once to f32, as an f32 accumulation of 5 terms is within 1 ulp
    to = ROUNDED[algorithm]
    want = (a.astype(to).astype(np.float64) @ b.astype(to).astype(np.float64)).astype(np.float32)
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)
    rewritten = round_dot_operands(m)
    assert "algorithm" not in str(rewritten.entry.root.attributes)
    np.testing.assert_array_equal(evaluate(rewritten, a, b), got)


def test_other_algorithms_and_integer_dots_are_left_alone():
    m = module("f32", "f32", "dot_tf32_tf32_f32")
    assert round_dot_operands(m) is m


@pytest.mark.parametrize("lhs,rhs,algorithm,out", [("f32", "f32", "dot_bf16_bf16_f32", "f32"),
                                                   ("bf16", "f32", "dot_bf16_bf16_f32", "f32"),
                                                   ("f32", "f16", "dot_f16_f16_f32", "f32"),
                                                   ("bf16", "bf16", "dot_bf16_bf16_bf16", "bf16"),
                                                   ("f16", "f16", "dot_f16_f16_f16", "f16")])
def test_a_compiled_rounding_dot_matches_the_evaluator(lhs, rhs, algorithm, out):
    m = module(lhs, rhs, algorithm, 16, 32, 16, out)
    rng = np.random.default_rng(0)
    a = rng.standard_normal((16, 32)).astype(TYPES[lhs])
    b = rng.standard_normal((32, 16)).astype(TYPES[rhs])
    tensors = [torch.from_numpy(x.astype(np.float32)).to(torch.bfloat16) if x.dtype == TYPES["bf16"]
               else torch.from_numpy(x) for x in (a, b)]
    got = compile_hlo(m, cache=False)(*tensors)[0].float().numpy()
    want = evaluate(m, a, b).astype(np.float32)
    # a 16-bit result may sit one rounding apart (the sum's order differs)
    tol = {"f32": 1e-5, "bf16": 1e-2, "f16": 2e-3}[out]
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_jax_s_bf16_dot_with_an_f32_result_compiles_and_matches_xla():
    def f(x, y):
        return jax.lax.dot_general(x, y, (((2,), (2,)), ((0,), (0,))),
                                   precision=jax.lax.DotAlgorithmPreset.BF16_BF16_F32,
                                   preferred_element_type=jnp.float32)
    x = jax.ShapeDtypeStruct((2, 16, 32), jnp.bfloat16)
    text = jax.jit(f).lower(x, x).as_text(dialect="hlo")
    assert "algorithm=dot_bf16_bf16_f32" in text
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((2, 16, 32)).astype(ml_dtypes.bfloat16) for _ in range(2))
    got = compile_hlo(text, cache=False)(*(torch.from_numpy(v.astype(np.float32))
                                          .to(torch.bfloat16) for v in (a, b)))[0].numpy()
    np.testing.assert_allclose(got, np.asarray(jax.jit(f)(a, b)), rtol=1e-5, atol=1e-5)
