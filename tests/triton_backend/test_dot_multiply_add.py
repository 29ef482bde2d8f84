"""Dots ``tl.dot`` cannot multiply: integers wider than 8 bits, pred, and int8 with a float
result (XLA accepts every such dot; XLA:GPU runs them on its loop emitter).  The kernel sums
the products of its ``[BLOCK_M, BLOCK_K, BLOCK_N]`` tile itself, in the result type, wrapping
as XLA's integer arithmetic does.  Truths: Python's integers reduced modulo 2^bits, NumPy's
float product, and XLA itself (JAX)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import torch

from fusion.errors import UnsupportedOpError
from tests.triton_backend.dot_fusion_helpers import reference, to_numpy, to_torch
from tests.triton_backend.target_compiles import compile_on_targets
from tests.triton_backend.test_dot_fusion import plain_dot
from triton_backend import compile_hlo
from triton_backend.host.input_validation import tensor_from_numpy, tensor_to_numpy
from triton_backend.reports.ptx_report import find_ptxas
from triton_backend.templates.dot.driver import compile_dot_fusion, dot_problem
from triton_backend.templates.dot.tiling import DotTiling, default_tiling, tiling_problems

WRAPS = {"s32": (np.int32, 32, True), "s64": (np.int64, 64, True), "u32": (np.uint32, 32, False),
         "s16": (np.int16, 16, True), "s8": (np.int8, 8, True)}


def _wrapped(values, bits: int, signed: bool) -> list[int]:
    out = []
    for v in values:
        v %= 2 ** bits
        out.append(v - 2 ** bits if signed and v >= 2 ** (bits - 1) else v)
    return out


def _python_dot(a: np.ndarray, b: np.ndarray) -> list[list[int]]:
    """The exact integer product, in Python's unbounded integers."""
    ai, bi = a.astype(object), b.astype(object)
    return [[sum(ai[i, k] * bi[k, j] for k in range(a.shape[1])) for j in range(b.shape[1])]
            for i in range(a.shape[0])]


@pytest.mark.parametrize("operand,out", [("s32", "s32"), ("s64", "s64"), ("u32", "u32"),
                                         ("s16", "s32"), ("u8", "s32"), ("s32", "s8")])
def test_integer_products_wrap_in_the_result_type(operand, out):
    # Values near the type's top, so products and sums overflow: 20x36x28, partial tiles.
    rng = np.random.default_rng(1)
    info = np.iinfo({"s16": np.int16, "s32": np.int32, "s64": np.int64, "u8": np.uint8,
                     "u32": np.uint32}[operand])
    a = rng.integers(info.min, info.max, (20, 28), endpoint=True).astype(info.dtype)
    b = rng.integers(info.min, info.max, (28, 36), endpoint=True).astype(info.dtype)
    module = plain_dot(operand, out)
    compiled = compile_dot_fusion(module, "r")
    assert "tl.sum(" in compiled.source and "tl.dot(" not in compiled.source
    got = to_numpy(compiled(to_torch(a), to_torch(b))[0])
    dtype, bits, signed = WRAPS[out]
    want = [_wrapped(row, bits, signed) for row in _python_dot(a, b)]
    assert got.dtype == dtype and got.tolist() == want
    assert reference(module, [a, b])[0].tolist() == want


def test_a_pred_dot_is_any_of_ands_and_an_int8_dot_may_give_floats():
    rng = np.random.default_rng(2)
    a, b = rng.random((20, 28)) < 0.1, rng.random((28, 36)) < 0.1
    got = compile_dot_fusion(plain_dot("pred", "pred"), "r")(torch.from_numpy(a),
                                                            torch.from_numpy(b))[0]
    assert got.numpy().tolist() == ((a.astype(int) @ b.astype(int)) > 0).tolist()
    x = rng.integers(-128, 128, (20, 28)).astype(np.int8)
    y = rng.integers(-128, 128, (28, 36)).astype(np.int8)
    as_float = compile_dot_fusion(plain_dot("s8", "f32"), "r")(torch.from_numpy(x),
                                                              torch.from_numpy(y))[0]
    # |sum| < 28 * 2^14 < 2^24: every partial sum is exact in f32
    assert as_float.numpy().tolist() == (x.astype(np.float32) @ y.astype(np.float32)).tolist()


def test_an_f8_result_is_the_f32_sum_rounded_once():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((20, 28)).astype(ml_dtypes.float8_e4m3fn)
    b = rng.standard_normal((28, 36)).astype(ml_dtypes.float8_e4m3fn)
    module = plain_dot("f8e4m3fn", "f8e4m3fn")
    got = compile_dot_fusion(module, "r")(tensor_from_numpy(a, "f8e4m3fn"),
                                          tensor_from_numpy(b, "f8e4m3fn"))[0]
    want = (a.astype(np.float32) @ b.astype(np.float32)).astype(ml_dtypes.float8_e4m3fn)
    # the f32 sum's order may move a result that sits on a rounding boundary by one step
    got = tensor_to_numpy(got).astype(np.float32)
    assert np.mean(got == want.astype(np.float32)) > 0.99
    assert (reference(module, [a, b])[0] == want).all()


def test_summing_tiles_stay_small_and_keep_k_whole():
    problem = dot_problem(plain_dot("s32", "s32", lhs="4096,4096", rhs="4096,4096",
                                    out_dims="4096,4096"), "r")
    assert problem.multiply_add == 4
    assert default_tiling(problem, 90).tile_sizes == (32, 32, 16)
    wide = dot_problem(plain_dot("s32", "s64", lhs="64,64", rhs="64,64", out_dims="64,64"), "r")
    assert wide.multiply_add == 8 and default_tiling(wide, 90).tile_sizes == (16, 32, 16)
    [reason] = tiling_problems(DotTiling(128, 128, 16), problem, 90)
    assert "at most 65536 products per K step (262144 asked)" in reason
    with pytest.raises(UnsupportedOpError, match="no split of K"):
        compile_dot_fusion(plain_dot("s32", "s32", lhs="16,256", rhs="256,16", out_dims="16,16"),
                           "r", tile_sizes=(16, 16, 16, 2))


@pytest.mark.skipif(find_ptxas(90) is None, reason="ptxas not found in the Triton wheel")
def test_summing_kernels_compile_for_sm80_and_sm90_without_spills():
    paths = [str(compile_dot_fusion(plain_dot(t, o, lhs="512,512", rhs="512,512",
                                              out_dims="512,512"), "r", target="sm_90").kernel_path)
             for t, o in (("s32", "s32"), ("s64", "s64"))]
    for report in compile_on_targets([[p, arch] for p in paths for arch in (80, 90)]):
        assert report["registers"] > 0 and report["spills"] == 0, report


def test_jax_s_int32_matmul_matches_xla():
    f = lambda x, y: x @ y  # noqa: E731
    x = jax.ShapeDtypeStruct((24, 40), jnp.int32)
    text = jax.jit(f).lower(x, x.update(shape=(40, 8))).as_text(dialect="hlo")
    rng = np.random.default_rng(4)
    a = rng.integers(-2 ** 31, 2 ** 31, (24, 40)).astype(np.int32)
    b = rng.integers(-2 ** 31, 2 ** 31, (40, 8)).astype(np.int32)
    got = compile_hlo(text, cache=False)(torch.from_numpy(a), torch.from_numpy(b))[0]
    assert got.numpy().tolist() == np.asarray(jax.jit(f)(a, b)).tolist()


def test_jax_int32_convolution_matches_xla():
    """``lax.conv`` on int32 (and int16 widened to an int32 result): an implicit GEMM whose
    K loop sums its own products, wrapping; strided, padded, grouped, with a bias."""
    def f(x, w, b):
        y = jax.lax.conv_general_dilated(x, w, (2, 1), ((1, 1), (0, 2)),
                                         dimension_numbers=("NHWC", "HWIO", "NHWC"),
                                         feature_group_count=2,
                                         preferred_element_type=jnp.int32)
        return y + b

    rng = np.random.default_rng(5)
    for dtype, high in ((np.int32, 2 ** 31), (np.int16, 2 ** 15)):
        x = rng.integers(-high, high, (2, 9, 7, 6)).astype(dtype)
        w = rng.integers(-high, high, (3, 3, 3, 8)).astype(dtype)
        b = rng.integers(-2 ** 31, 2 ** 31, (8,)).astype(np.int32)
        text = jax.jit(f).lower(x, w, b).as_text(dialect="hlo")
        compiled = compile_hlo(text, cache=False)
        (conv,) = compiled.fusions.values()
        assert conv.kind == "convolution" and "tl.sum(" in conv.source
        got = compiled(*(torch.from_numpy(a) for a in (x, w, b)))[0]
        assert got.numpy().tolist() == np.asarray(jax.jit(f)(x, w, b)).tolist()


@pytest.mark.skipif(find_ptxas(90) is None, reason="ptxas not found in the Triton wheel")
def test_summing_convolution_compiles_for_sm90_without_spills():
    text = ("HloModule m\nENTRY e {\n  x = s32[8,32,32,64] parameter(0)\n"
            "  w = s32[3,3,64,64] parameter(1)\n"
            "  ROOT c = s32[8,32,32,64] convolution(x, w), window={size=3x3 pad=1_1x1_1}, "
            "dim_labels=b01f_01io->b01f\n}\n")
    (conv,) = compile_hlo(text, target="sm_90", cache=False).fusions.values()
    (report,) = compile_on_targets([[conv.kernel_path, 90]])
    assert report["registers"] > 0 and report["spills"] == 0, report
