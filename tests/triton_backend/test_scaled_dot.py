"""Scaled dots (MX and NVFP4 block scaling): the ``scaled-dot`` op XLA:GPU makes of
``jax.lax.scaled_dot``'s composite, and the ``__op$block_scaled_dot`` custom-call
``jax.nn.scaled_matmul`` lowers to for CUDA.  Truths: XLA itself (running JAX's composite, and
running the expansion this project writes), brute force in f64, and the evaluator for the
compiled kernels; the verifier's located errors."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fusion.errors import HloVerifyError
from fusion.evaluator import evaluate
from fusion.shapes.verifier import verify_module
from fusion.text.parser import parse_hlo
from fusion.text.printer import print_hlo
from fusion.text.stablehlo import stablehlo_to_hlo
from fusion.transforms.plain_ops import plain_ops
from tests.conformance.xla_oracle import run_xla
from triton_backend import compile_hlo
from triton_backend.host.input_validation import tensor_from_numpy, tensor_to_numpy

E4M3, E5M2, E8M0 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.float8_e8m0fnu
F4, BF16 = ml_dtypes.float4_e2m1fn, ml_dtypes.bfloat16


def _values(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


def _powers(rng, shape, low=-4, high=4, dtype=E8M0):
    return (2.0 ** rng.integers(low, high, shape)).astype(dtype)


def _dequantized(x, scale, axis):
    """Brute force, in f64: each scale repeated over its block along ``axis``."""
    block = x.shape[axis] // scale.shape[axis]
    return x.astype(np.float64) * np.repeat(scale.astype(np.float64), block, axis=axis)


def _hlo_type(dtype) -> str:
    return {"float8_e4m3fn": "f8e4m3fn", "float8_e5m2": "f8e5m2", "float8_e8m0fnu": "f8e8m0fnu",
            "float4_e2m1fn": "f4e2m1fn", "bfloat16": "bf16", "float32": "f32",
            "float16": "f16"}[np.dtype(dtype).name]


def _scaled_dot_text(args, out_type, out_dims, dims) -> str:
    params = "\n".join(f"  p{i} = {_hlo_type(a.dtype)}[{','.join(map(str, a.shape))}] "
                       f"parameter({i})" for i, a in enumerate(args))
    out = f"{out_type}[{','.join(map(str, out_dims))}]"
    return (f"HloModule m\nENTRY e {{\n{params}\n  ROOT d = {out} scaled-dot(p0, p1, p2, p3), "
            f"{dims}\n}}\n")


CASES = {
    # jax.nn.scaled_matmul's layout: [b, m, k] x [b, n, k], MXFP8 blocks of 32 along k
    "batched_mxfp8_f32": ((2, 8, 64), (2, 12, 64), (2, 8, 2), (2, 12, 2), E4M3, E4M3,
                          (((2,), (2,)), ((0,), (0,))), jnp.float32, "f32", (2, 8, 12),
                          "lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, "
                          "rhs_contracting_dims={2}"),
    # jax.lax.scaled_dot's default 2-D dims: [m, k] x [k, n], the rhs blocked along its dim 0
    "plain_e5m2_bf16": ((6, 64), (64, 10), (6, 4), (4, 10), E5M2, E4M3,
                        (((1,), (0,)), ((), ())), jnp.bfloat16, "bf16", (6, 10),
                        "lhs_contracting_dims={1}, rhs_contracting_dims={0}"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_scaled_dot_op_matches_xla_running_jaxs_composite(case):
    """XLA:GPU's CompositeRewriter makes a ``scaled-dot`` of ``jax.lax.scaled_dot``'s
    composite: the op, evaluated, equals XLA running the composite's own body."""
    ls, rs, las, ras, lt, rt, dims, jtype, out, out_dims, attrs = CASES[case]
    rng = np.random.default_rng(7)
    args = [_values(rng, ls, lt), _values(rng, rs, rt), _powers(rng, las), _powers(rng, ras)]

    def fn(a, b, sa, sb):
        return jax.lax.scaled_dot(a, b, lhs_scale=sa, rhs_scale=sb, dimension_numbers=dims,
                                  preferred_element_type=jtype)

    composite = jax.jit(fn).lower(*args).as_text(dialect="hlo")
    assert "xla.scaled_dot" in composite
    want = np.asarray(run_xla(composite, *args)[0]).astype(np.float64)
    got = evaluate(parse_hlo(_scaled_dot_text(args, out, out_dims, attrs)), *args)[0]
    tol = 2.0 ** -7 if out == "bf16" else 1e-5  # summation order: one rounding of the sum
    np.testing.assert_allclose(np.asarray(got).astype(np.float64), want, rtol=tol,
                               atol=tol * np.abs(want).max())


def test_expansion_run_by_xla_equals_the_evaluator():
    """The ops ``scaled_dot_expansion`` writes, run by XLA, equal the evaluator's NumPy rule:
    a bf16 lhs with f32 scales along a free dim (dequantized in f32), an f16 rhs with a
    scalar bf16 scale (in f32: two 16-bit types), the dot in f32, the result f16."""
    rng = np.random.default_rng(3)
    args = [_values(rng, (8, 16), BF16), _values(rng, (16, 6), np.float16),
            rng.uniform(0.5, 2, (2, 4)).astype(np.float32), np.array(1.5, BF16)]
    text = _scaled_dot_text(args, "f16", (8, 6), "lhs_contracting_dims={1}, "
                                                   "rhs_contracting_dims={0}")
    module = parse_hlo(text)
    expanded = print_hlo(plain_ops(module))
    assert "scaled-dot" not in expanded
    got = evaluate(module, *args)[0]
    np.testing.assert_array_equal(np.asarray(run_xla(expanded, *args)[0]), got)
    want = _lhs_blocks(args[0], args[2]) @ (args[1].astype(np.float64) * 1.5)
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=2.0 ** -10, atol=2.0 ** -10)


def _lhs_blocks(x, scale):
    """``x [8, 16]`` times ``scale [2, 4]`` repeated over blocks of 4 x 4, in f64."""
    return x.astype(np.float64) * np.repeat(np.repeat(scale.astype(np.float64), 4, 0), 4, 1)


def _scaled_matmul_program(a, b, sa, sb) -> str:
    """What ``jax.nn.scaled_matmul`` lowers to for CUDA (read through ``jax.export``)."""
    def fn(a, b, sa, sb):
        return jax.nn.scaled_matmul(a, b, sa, sb, preferred_element_type=jnp.float32)

    exported = jax.export.export(jax.jit(fn), platforms=["cuda"], disabled_checks=[
        jax.export.DisabledSafetyCheck.custom_call("__op$block_scaled_dot")])(a, b, sa, sb)
    return stablehlo_to_hlo(exported.mlir_module())


def test_jax_scaled_matmul_gpu_program_matches_brute_force_compiled_and_evaluated():
    """NVFP4 (f4e2m1fn values, f8e4m3fn scales per 16): the custom-call, dequantized in f32
    as its backend config says, equals the f64 product of the dequantized operands; the
    compiled module equals the evaluator."""
    rng = np.random.default_rng(5)
    a, b = _values(rng, (1, 16, 64), F4), _values(rng, (1, 24, 64), F4)
    sa = rng.uniform(0.25, 4, (1, 16, 4)).astype(E4M3)
    sb = rng.uniform(0.25, 4, (1, 24, 4)).astype(E4M3)
    text = _scaled_matmul_program(a, b, sa, sb)
    assert "__op$block_scaled_dot" in text
    got = evaluate(parse_hlo(text), a, b, sa, sb)[0]
    want = np.einsum("bmk,bnk->bmn", _dequantized(a, sa, 2), _dequantized(b, sb, 2))
    np.testing.assert_allclose(got.astype(np.float64), want, rtol=1e-6, atol=1e-5)
    compiled = compile_hlo(text, cache=False)
    out = compiled(*(tensor_from_numpy(x, _hlo_type(x.dtype)) for x in (a, b, sa, sb)))[0]
    np.testing.assert_allclose(tensor_to_numpy(out), got, rtol=1e-6, atol=1e-5)


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 3), st.integers(1, 3), st.sampled_from([2, 4, 8]),
       st.sampled_from([1, 2, 4]), st.integers(0, 2 ** 31 - 1))
def test_power_of_two_scales_of_small_integers_are_exact(m, n, block, blocks, seed):
    """Law: small integers in f8 times power-of-two scales are exact in bf16, and their dot
    in f32 is exact: the scaled dot equals brute force bit for bit, for any block size."""
    rng = np.random.default_rng(seed)
    k = block * blocks
    args = [rng.integers(-8, 9, (m, k)).astype(E4M3), rng.integers(-8, 9, (n, k)).astype(E4M3),
            _powers(rng, (m, blocks), -3, 4), _powers(rng, (n, blocks), -3, 4)]
    text = _scaled_dot_text(args, "f32", (m, n), "lhs_contracting_dims={1}, "
                                                 "rhs_contracting_dims={1}")
    got = evaluate(parse_hlo(text), *args)[0]
    want = _dequantized(args[0], args[2], 1) @ _dequantized(args[1], args[3], 1).T
    np.testing.assert_array_equal(got, want.astype(np.float32))


@pytest.mark.parametrize("line, expected", [
    ("  ROOT d = f32[4,8] scaled-dot(a, b, sa, r3), lhs_contracting_dims={1}, "
     "rhs_contracting_dims={1}", "needs the rank of the rhs"),
    ("  ROOT d = f32[4,8] scaled-dot(a, b, s3, sb), lhs_contracting_dims={1}, "
     "rhs_contracting_dims={1}", "dim 1: 3 against 64"),
    ("  ROOT d = f32[4,8] scaled-dot(a, b, sa), lhs_contracting_dims={1}, "
     "rhs_contracting_dims={1}", "takes 4 operands"),
    ("  ROOT d = f32[4,8] custom-call(a, b, sa, sr), custom_call_target=\"__op$block_scaled_dot\"",
     "but the last, which divides it (dim 0: 2 against 8)"),
])
def test_bad_scaled_dots_are_located_errors(line, expected):
    text = ("HloModule m\nENTRY e {\n  a = f8e4m3fn[4,64] parameter(0)\n"
            "  b = f8e4m3fn[8,64] parameter(1)\n  sa = f8e8m0fnu[4,2] parameter(2)\n"
            "  sb = f8e8m0fnu[8,2] parameter(3)\n  r3 = f8e8m0fnu[8,2,1] parameter(4)\n"
            "  s3 = f8e8m0fnu[4,3] parameter(5)\n  sr = f8e8m0fnu[4,2] parameter(6)\n"
            f"{line}\n}}\n")
    if "custom-call" in line:
        text = text.replace("sr = f8e8m0fnu[4,2]", "sr = f8e8m0fnu[2,2]")
    with pytest.raises(HloVerifyError) as err:
        verify_module(parse_hlo(text))
    assert expected in str(err.value) and str(err.value).startswith("10:3: ")
