"""Convolution fusions end to end: JAX programs lowered to HLO text (forward and gradient
forms), compiled to implicit-GEMM kernels run under the interpreter, compared with XLA (jax's
own result for the same inputs) and with the reference evaluator.  Shapes are tiny (batch 2,
8x8 spatial, 4-8 channels) so each kernel runs in well under a second."""
from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
import pytest
import torch

jax = pytest.importorskip("jax")
jnp, lax = jax.numpy, jax.lax

from fusion.evaluator import evaluate  # noqa: E402
from fusion.text.parser import parse_hlo  # noqa: E402
from tests.conformance.xla_oracle import run_xla  # noqa: E402
from tests.fusion.test_convolution import combinations, conv_case  # noqa: E402
from tiling.fusion_pass.priority_fusion import fuse_module  # noqa: E402
from triton_backend import compile_hlo  # noqa: E402
from triton_backend.driver.compiled_fusion import compile_fusion  # noqa: E402

RNG = np.random.default_rng(7)
NHWC = ("NHWC", "HWIO", "NHWC")
NCHW = ("NCHW", "OIHW", "NCHW")


def _arg(shape, dtype):
    if dtype == np.int8:
        return RNG.integers(-8, 8, shape).astype(np.int8)
    return RNG.standard_normal(shape).astype(np.float32).astype(dtype)


def _torch(a: np.ndarray) -> torch.Tensor:
    if a.dtype == ml_dtypes.bfloat16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)


def _numpy(t: torch.Tensor) -> np.ndarray:
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def _close(got, want, tol, label):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, label
    if want.dtype.kind in "iu":
        np.testing.assert_array_equal(got, want, err_msg=label)
    else:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                   rtol=tol, atol=tol, err_msg=label)


def run_all_ways(f, args, tol=1e-4, optimized=False):
    """XLA (jax) vs our kernels and vs our evaluator, on the plain (and optimized) HLO."""
    lowered = jax.jit(f).lower(*args)
    texts = [lowered.as_text(dialect="hlo")]
    executable = lowered.compile()  # what jax.jit(f)(*args) runs: XLA compiles it once
    if optimized:
        texts.append(executable.as_text())
    want = [np.asarray(w) for w in jax.tree.leaves(executable(*args))]
    for text in texts:
        ours = compile_hlo(text)(*[_torch(a) for a in args])
        ours = ours if isinstance(ours, (list, tuple)) else [ours]
        reference = evaluate(parse_hlo(text), *args)
        assert len(ours) == len(want) == len(reference)
        for i, (o, r, w) in enumerate(zip(ours, reference, want)):
            _close(_numpy(o.cpu()), w, tol, f"kernel output {i}\n{text}")
            _close(r, w, tol, f"evaluator output {i}\n{text}")
    return texts[0]


# (lhs shape, rhs shape, layout, conv_general_dilated keyword arguments)
FORWARD = {
    "2d_stride_pad": ((2, 8, 8, 4), (3, 3, 4, 8), NHWC,
                      dict(window_strides=(2, 2), padding=((1, 1), (1, 1)))),
    "2d_nchw_asym_pad": ((2, 4, 8, 8), (8, 4, 3, 2), NCHW,
                         dict(window_strides=(1, 2), padding=((2, 0), (0, 1)))),
    "2d_negative_pad": ((2, 8, 8, 4), (2, 2, 4, 4), NHWC,
                        dict(window_strides=(1, 1), padding=((-1, 1), (1, -2)))),
    "2d_rhs_dilation": ((2, 8, 8, 4), (3, 3, 4, 4), NHWC,
                        dict(window_strides=(1, 1), padding="SAME", rhs_dilation=(2, 3))),
    "2d_lhs_dilation": ((2, 5, 5, 4), (3, 3, 4, 4), NHWC,
                        dict(window_strides=(1, 2), padding=((1, 2), (2, 1)), lhs_dilation=(2, 2))),
    "2d_depthwise": ((2, 8, 8, 4), (3, 3, 1, 8), NHWC,
                     dict(window_strides=(1, 1), padding="SAME", feature_group_count=4)),
    "2d_grouped": ((2, 8, 8, 8), (3, 3, 4, 4), NHWC,
                   dict(window_strides=(2, 1), padding="VALID", feature_group_count=2)),
    "2d_batch_groups": ((4, 6, 6, 4), (3, 3, 4, 6), NHWC,
                        dict(window_strides=(1, 1), padding="SAME", batch_group_count=2)),
    "1d_causal_depthwise": ((2, 8, 4), (3, 1, 4), ("NWC", "WIO", "NWC"),
                            dict(window_strides=(1,), padding=((2, 0),), feature_group_count=4)),
    "1d_ncw_strided_dilated": ((2, 4, 9), (6, 4, 3), ("NCW", "OIW", "NCW"),
                               dict(window_strides=(2,), padding=((2, 1),), rhs_dilation=(2,))),
    "3d": ((2, 5, 4, 4, 3), (2, 3, 2, 3, 4), ("NDHWC", "DHWIO", "NDHWC"),
           dict(window_strides=(1, 2, 1), padding="VALID")),
}


@pytest.mark.parametrize("case", sorted(FORWARD))
def test_forward_against_xla(case):
    lhs, rhs, dn, kw = FORWARD[case]
    f = lambda x, w: lax.conv_general_dilated(x, w, dimension_numbers=dn, **kw)  # noqa: E731
    run_all_ways(f, (_arg(lhs, np.float32), _arg(rhs, np.float32)))


@pytest.mark.parametrize("case", ["2d_stride_pad", "2d_depthwise", "1d_ncw_strided_dilated"])
def test_gradients_against_xla(case):
    """jax.grad gives the lhs-dilated, reversed-kernel and batch-grouped forms."""
    lhs, rhs, dn, kw = FORWARD[case]
    f = lambda x, w: lax.conv_general_dilated(x, w, dimension_numbers=dn, **kw)  # noqa: E731
    grad = jax.grad(lambda x, w: (f(x, w) ** 2).sum(), argnums=(0, 1))
    text = run_all_ways(grad, (_arg(lhs, np.float32), _arg(rhs, np.float32)), tol=2e-3)
    assert "lhs_dilate" in text or "batch_group_count" in text or "rhs_dilate" in text


@pytest.mark.parametrize("dtype,preferred,tol", [
    (ml_dtypes.bfloat16, None, 2e-2), (np.float16, None, 2e-3), (np.int8, jnp.int32, 0)])
def test_narrow_types_against_xla(dtype, preferred, tol):
    f = lambda x, w: lax.conv_general_dilated(  # noqa: E731
        x, w, (1, 1), "SAME", dimension_numbers=NHWC, preferred_element_type=preferred)
    run_all_ways(f, (_arg((2, 6, 6, 4), dtype), _arg((3, 3, 4, 8), dtype)), tol=tol)


def test_f64_against_xla():
    # JAX's x64 mode: the products and their sum in f64 (the template's f64 accumulator)
    x64 = jax.enable_x64 if hasattr(jax, "enable_x64") else jax.experimental.enable_x64
    f = lambda x, w: lax.conv_general_dilated(  # noqa: E731
        x, w, (2, 1), "SAME", dimension_numbers=NHWC)
    with x64(True):
        text = run_all_ways(f, (_arg((2, 6, 6, 4), np.float64), _arg((3, 3, 4, 8), np.float64)),
                            tol=1e-12)
    assert "f64[" in text


def test_cnn_block_fuses_bias_and_relu_into_one_kernel():
    x, w, b = _arg((2, 8, 8, 4), np.float32), _arg((3, 3, 4, 8), np.float32), _arg((8,), np.float32)
    f = lambda x, w, b: jax.nn.relu(  # noqa: E731
        lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=NHWC) + b)
    text = run_all_ways(f, (x, w, b), optimized=True)
    fused = fuse_module(parse_hlo(text)).module
    fusions = [i for i in fused.entry.instructions if i.opcode == "fusion"]
    assert len(fusions) == 1
    ops = {i.opcode for i in fused.computation(fusions[0].attr("calls")).instructions}
    assert {"convolution", "add", "maximum"} <= ops
    assert compile_fusion(fused, fusions[0].name).kind == "convolution"


def test_batch_norm_inference_epilogue():
    x, w = _arg((2, 8, 8, 4), np.float32), _arg((3, 3, 4, 8), np.float32)
    scale, shift = _arg((8,), np.float32), _arg((8,), np.float32)
    f = lambda x, w, s, t: jnp.maximum(  # noqa: E731
        lax.conv_general_dilated(x, w, (2, 2), "SAME", dimension_numbers=NHWC) * s + t, 0.0)
    run_all_ways(f, (x, w, scale, shift))


REVERSAL = """HloModule m
ENTRY e {
  x = f32[2,8,4] parameter(0)
  w = f32[3,4,6] parameter(1)
  ROOT c = f32[2,4,6] convolution(x, w), window={size=3 stride=2 pad=1_0 rhs_reversal=1}, dim_labels=b0f_0io->b0f
}
"""


def test_window_reversal_against_xla():
    x, w = _arg((2, 8, 4), np.float32), _arg((3, 4, 6), np.float32)
    want = run_xla(REVERSAL, x, w)[0]
    got = compile_hlo(REVERSAL)(torch.from_numpy(x), torch.from_numpy(w))
    got = got[0] if isinstance(got, (list, tuple)) else got
    _close(got.numpy(), np.asarray(want), 1e-4, "kernel")
    _close(evaluate(parse_hlo(REVERSAL), x, w)[0], np.asarray(want), 1e-4, "evaluator")


def kernel_combinations():
    """Every combination in 2-D; in 1-D and 3-D the strided, asymmetrically padded ones
    (every dilation and grouping), to keep the interpreter's time down."""
    return [c for c in combinations() if c.values[0] == 2 or c.values[1:3] == (2, "asym")]


@functools.cache
def xla_combinations() -> dict:
    """``{combination: (f, x, w, XLA's result)}`` for every ``kernel_combinations()`` form: XLA
    runs the convolutions in one jitted function (one compile, not one per combination)."""
    combos = [p.values for p in kernel_combinations()]
    cases = [conv_case(*combo) for combo in combos]
    results = jax.jit(lambda xs, ws: [f(x, w) for (f, _, _), x, w in zip(cases, xs, ws)])(
        [x for _, x, _ in cases], [w for _, _, w in cases])
    return {combo: (*case, np.asarray(want)) for combo, case, want in zip(combos, cases, results)}


@pytest.mark.parametrize("rank,stride,pad,lhs_d,rhs_d,group", kernel_combinations())
def test_every_attribute_combination_against_xla(rank, stride, pad, lhs_d, rhs_d, group):
    """The evaluator's grid of forms (tests/fusion/test_convolution.py), through the kernel."""
    f, x, w, want = xla_combinations()[rank, stride, pad, lhs_d, rhs_d, group]
    text = jax.jit(f).lower(x, w).as_text(dialect="hlo")
    got = compile_hlo(text)(torch.from_numpy(x), torch.from_numpy(w))
    got = got[0] if isinstance(got, (list, tuple)) else got
    _close(got.numpy(), want, 1e-4, text)


def test_cnn_block_gradient_after_xla_passes():
    """The corpus's cnn_block_grad (whose optimized HLO the XLA oracle cannot run: it has a
    transposing bitcast) against jax, plain and optimized HLO."""
    def block(x, w, b):
        y = lax.conv_general_dilated(x, w, (2, 2), ((1, 1), (1, 1)), dimension_numbers=NHWC)
        return jnp.maximum(y + b, 0.0)
    grad = jax.grad(lambda x, w, b: jnp.sum(block(x, w, b)), argnums=(0, 1, 2))
    args = (_arg((2, 8, 8, 4), np.float32), _arg((3, 3, 4, 8), np.float32), _arg((8,), np.float32))
    run_all_ways(grad, args, tol=1e-4, optimized=True)
