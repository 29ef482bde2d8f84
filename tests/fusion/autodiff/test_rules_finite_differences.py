"""Every VJP rule against central finite differences in f64, the reference evaluator on both
sides, on non-power-of-two shapes (``check_directional_derivatives``)."""
from __future__ import annotations

import re

import numpy as np
import pytest

from fusion.autodiff.registry import VJP_RULES
from fusion.text.parser import parse_hlo
from tests.fusion.autodiff.finite_differences import check_directional_derivatives

RNG = np.random.default_rng(20)

# Scalar computations the cases call.
REDUCERS = """
add_f64 {
  a = f64[] parameter(0)
  b = f64[] parameter(1)
  ROOT r = f64[] add(a, b)
}
max_f64 {
  a = f64[] parameter(0)
  b = f64[] parameter(1)
  ROOT r = f64[] maximum(a, b)
}
min_f64 {
  a = f64[] parameter(0)
  b = f64[] parameter(1)
  ROOT r = f64[] minimum(a, b)
}
mul_f64 {
  a = f64[] parameter(0)
  b = f64[] parameter(1)
  ROOT r = f64[] multiply(a, b)
}
set_f64 {
  a = f64[] parameter(0)
  ROOT b = f64[] parameter(1)
}
add_c128 {
  a = c128[] parameter(0)
  b = c128[] parameter(1)
  ROOT r = c128[] add(a, b)
}
ge_f64 {
  a = f64[] parameter(0)
  b = f64[] parameter(1)
  ROOT ge = pred[] compare(a, b), direction=GE
}
less_f64 {
  a = f64[] parameter(0)
  b = f64[] parameter(1)
  c = f64[] parameter(2)
  d = f64[] parameter(3)
  ROOT lt = pred[] compare(a, b), direction=LT
}
"""


def module(body: str, extra: str = ""):
    return parse_hlo(f"HloModule t\n{REDUCERS}\n{extra}\nENTRY e {{\n{body}\n}}\n")


def normal(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape)


def _spd(*shape: int) -> np.ndarray:
    a = normal(*shape)
    return a @ np.swapaxes(a, -1, -2) + shape[-1] * np.eye(shape[-1])


def positive(*shape: int) -> np.ndarray:
    return np.abs(RNG.standard_normal(shape)) + 0.5


UNARY = {
    "abs": normal, "cbrt": positive, "ceil": normal, "copy": normal, "cosine": normal,
    "erf": normal, "exponential": normal, "exponential-minus-one": normal, "floor": normal,
    "log": positive, "log-plus-one": positive, "logistic": normal, "negate": normal,
    "round-nearest-even": normal, "rsqrt": positive, "sign": normal, "sine": normal,
    "sqrt": positive, "tan": lambda *s: normal(*s) * 0.5, "tanh": normal,
}


@pytest.mark.parametrize("op", sorted(UNARY))
def test_unary(op: str) -> None:
    m = module(f"  x = f64[3,5] parameter(0)\n  ROOT y = f64[3,5] {op}(x)")
    check_directional_derivatives(m, [UNARY[op](3, 5)])


BINARY = {
    "add": (normal, normal), "atan2": (normal, normal), "divide": (normal, positive),
    "maximum": (normal, normal), "minimum": (normal, normal), "multiply": (normal, normal),
    "power": (positive, normal), "remainder": (lambda *s: normal(*s) * 4, positive),
    "subtract": (normal, normal),
}


@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary(op: str) -> None:
    m = module(f"  x = f64[7] parameter(0)\n  y = f64[7] parameter(1)\n"
               f"  ROOT z = f64[7] {op}(x, y)")
    make_x, make_y = BINARY[op]
    check_directional_derivatives(m, [make_x(7), make_y(7)])


# name -> (body, inputs, wrt); the forward functions compose the op with others so that its
# operand and result are both active.
CASES = {
    "bitcast": ("""
  x = f64[3,5]{1,0} parameter(0)
  ROOT y = f64[15]{0} bitcast(x)""", [normal(3, 5)]),
    "broadcast": ("""
  x = f64[5,3] parameter(0)
  ROOT y = f64[3,2,5] broadcast(x), dimensions={2,0}""", [normal(5, 3)]),
    "cholesky_lower": ("""
  a = f64[2,3,3] parameter(0)
  ROOT l = f64[2,3,3] cholesky(a), lower=true""", [_spd(2, 3, 3)]),
    "cholesky_upper": ("""
  a = f64[3,3] parameter(0)
  ROOT u = f64[3,3] cholesky(a), lower=false""", [_spd(3, 3)]),
    "cholesky_lapack": ("""
  a = f64[3,3] parameter(0)
  c = (f64[3,3]{0,1}, s32[]) custom-call(a), custom_call_target="lapack_dpotrf_ffi", operand_layout_constraints={f64[3,3]{0,1}}, backend_config={uplo = 76 : ui8}
  ROOT l = f64[3,3]{0,1} get-tuple-element(c), index=0""", [_spd(3, 3)]),
    "clamp": ("""
  lo = f64[3,5] parameter(0)
  x = f64[3,5] parameter(1)
  hi = f64[3,5] parameter(2)
  ROOT y = f64[3,5] clamp(lo, x, hi)""", [normal(3, 5) - 1, normal(3, 5) * 2, normal(3, 5) + 1]),
    "clamp_scalar_bounds": ("""
  lo = f64[] parameter(0)
  x = f64[3,5] parameter(1)
  hi = f64[] parameter(2)
  ROOT y = f64[3,5] clamp(lo, x, hi)""", [np.float64(-0.5), normal(3, 5), np.float64(0.7)]),
    "compare_select": ("""
  x = f64[3,5] parameter(0)
  y = f64[3,5] parameter(1)
  p = pred[3,5] compare(x, y), direction=GT
  ROOT s = f64[3,5] select(p, x, y)""", [normal(3, 5), normal(3, 5)]),
    "complex_parts": ("""
  x = f64[3,5] parameter(0)
  y = f64[3,5] parameter(1)
  z = c128[3,5] complex(x, y)
  w = c128[3,5] multiply(z, z)
  e = c128[3,5] exponential(w)
  q = c128[3,5] divide(e, z)
  r = f64[3,5] real(q)
  i = f64[3,5] imag(q)
  a = f64[3,5] abs(q)
  c = c128[3,5] convert(x)
  s = c128[3,5] sine(c)
  ROOT t = (f64[3,5], f64[3,5], f64[3,5], c128[3,5]) tuple(r, i, a, s)""",
                      [normal(3, 5), normal(3, 5) * 0.5]),
    "complex_reduce_dot": ("""
  x = f64[3,5] parameter(0)
  y = f64[3,5] parameter(1)
  z = c128[3,5] complex(x, y)
  d = c128[3,3] dot(z, z), lhs_contracting_dims={1}, rhs_contracting_dims={1}
  zero = c128[] constant((0, 0))
  ROOT r = c128[3] reduce(d, zero), dimensions={1}, to_apply=add_c128""",
                           [normal(3, 5), normal(3, 5)]),
    "concatenate": ("""
  x = f64[3,2] parameter(0)
  y = f64[3,5] parameter(1)
  ROOT c = f64[3,9] concatenate(x, y, x), dimensions={1}""", [normal(3, 2), normal(3, 5)]),
    "convolution": ("""
  x = f64[2,5,7,3] parameter(0)
  w = f64[3,2,3,4] parameter(1)
  ROOT c = f64[2,3,2,4] convolution(x, w), window={size=3x2 stride=2x3 pad=1_1x0_1 rhs_dilate=1x2}, dim_labels=b01f_01io->b01f""",
                    [normal(2, 5, 7, 3), normal(3, 2, 3, 4)]),
    "convolution_feature_groups": ("""
  x = f64[2,4,5] parameter(0)
  w = f64[6,2,3] parameter(1)
  ROOT c = f64[2,6,5] convolution(x, w), window={size=3 pad=1_1}, dim_labels=bf0_oi0->bf0, feature_group_count=2""",
                                   [normal(2, 4, 5), normal(6, 2, 3)]),
    "convert": ("""
  x = f64[3,5] parameter(0)
  n = f32[3,5] convert(x)
  s = f32[3,5] sine(n)
  ROOT y = f64[3,5] convert(s)""", [normal(3, 5)]),
    "dot_matmul": ("""
  a = f64[3,5] parameter(0)
  b = f64[5,7] parameter(1)
  ROOT d = f64[3,7] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}""",
                   [normal(3, 5), normal(5, 7)]),
    "dot_batch_middle": ("""
  a = f64[5,3,2] parameter(0)
  b = f64[7,3,5] parameter(1)
  ROOT d = f64[3,2,7] dot(a, b), lhs_batch_dims={1}, lhs_contracting_dims={0}, rhs_batch_dims={1}, rhs_contracting_dims={2}""",
                         [normal(5, 3, 2), normal(7, 3, 5)]),
    "dot_two_contracting": ("""
  a = f64[3,5,2] parameter(0)
  b = f64[2,7,5] parameter(1)
  ROOT d = f64[3,7] dot(a, b), lhs_contracting_dims={2,1}, rhs_contracting_dims={0,2}""",
                            [normal(3, 5, 2), normal(2, 7, 5)]),
    "dot_outer": ("""
  a = f64[3] parameter(0)
  b = f64[5] parameter(1)
  ROOT d = f64[3,5] dot(a, b)""", [normal(3), normal(5)]),
    "dot_vector": ("""
  a = f64[7] parameter(0)
  b = f64[7] parameter(1)
  ROOT d = f64[] dot(a, b), lhs_contracting_dims={0}, rhs_contracting_dims={0}""",
                   [normal(7), normal(7)]),
    "dynamic_slice_clamped": ("""
  x = f64[5,6] parameter(0)
  i = s32[] parameter(1)
  j = s32[] constant(1)
  ROOT d = f64[2,3] dynamic-slice(x, i, j), dynamic_slice_sizes={2,3}""",
                              [normal(5, 6), np.int32(4)]),
    "dynamic_update_slice": ("""
  x = f64[5,3] parameter(0)
  u = f64[2,3] parameter(1)
  i = s32[] parameter(2)
  z = s32[] constant(0)
  ROOT d = f64[5,3] dynamic-update-slice(x, u, i, z)""", [normal(5, 3), normal(2, 3), np.int32(7)]),
    "fft_complex": ("""
  x = f64[3,6] parameter(0)
  y = f64[3,6] parameter(1)
  z = c128[3,6] complex(x, y)
  f = c128[3,6] fft(z), fft_type=FFT, fft_length={3,6}
  ROOT g = c128[3,6] fft(f), fft_type=IFFT, fft_length={6}""", [normal(3, 6), normal(3, 6)]),
    "fft_real_even": ("""
  x = f64[2,3,6] parameter(0)
  f = c128[2,3,4] fft(x), fft_type=RFFT, fft_length={3,6}
  s = c128[2,3,4] multiply(f, f)
  ROOT g = f64[2,3,6] fft(s), fft_type=IRFFT, fft_length={3,6}""", [normal(2, 3, 6)]),
    "fft_real_odd": ("""
  x = f64[2,7] parameter(0)
  f = c128[2,4] fft(x), fft_type=RFFT, fft_length={7}
  s = c128[2,4] sine(f)
  ROOT g = f64[2,7] fft(s), fft_type=IRFFT, fft_length={7}""", [normal(2, 7)]),
    "eigh_lapack": ("""
  a = f64[3,3] parameter(0)
  e = (f64[3,3]{0,1}, f64[3], s32[]) custom-call(a), custom_call_target="lapack_dsyevd_ffi", operand_layout_constraints={f64[3,3]{0,1}}, backend_config={mode = 86 : ui8, uplo = 85 : ui8}
  v = f64[3,3]{0,1} get-tuple-element(e), index=0
  w = f64[3] get-tuple-element(e), index=1
  vv = f64[3,3] multiply(v, v)
  ROOT t = (f64[3], f64[3,3]) tuple(w, vv)""", [_spd(3, 3)]),
    "lu_lapack": ("""
  a = f64[2,4,4] parameter(0)
  c = (f64[2,4,4]{1,2,0}, s32[2,4], s32[2]) custom-call(a), custom_call_target="lapack_dgetrf_ffi", operand_layout_constraints={f64[2,4,4]{1,2,0}}
  ROOT l = f64[2,4,4]{1,2,0} get-tuple-element(c), index=0""", [normal(2, 4, 4)]),
    "gather_clamped": ("""
  x = f64[6,3] parameter(0)
  i = s32[4,1] parameter(1)
  ROOT g = f64[4,2] gather(x, i), offset_dims={1}, collapsed_slice_dims={0}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,2}""",
                       [normal(6, 3), np.array([[4], [0], [9], [4]], np.int32)]),
    "gather_2d_index": ("""
  x = f64[5,7] parameter(0)
  i = s32[3,2] parameter(1)
  ROOT g = f64[3,2,3] gather(x, i), offset_dims={1,2}, collapsed_slice_dims={}, start_index_map={0,1}, index_vector_dim=1, slice_sizes={2,3}""",
                        [normal(5, 7), np.array([[0, 1], [3, 4], [2, 6]], np.int32)]),
    "pad": ("""
  x = f64[3,4] parameter(0)
  v = f64[] parameter(1)
  ROOT p = f64[6,10] pad(x, v), padding=1_2_0x-1_1_2""", [normal(3, 4), np.float64(0.5)]),
    "qr_lapack": ("""
  a = f64[5,3] parameter(0)
  g = (f64[5,3]{0,1}, f64[3]) custom-call(a), custom_call_target="lapack_dgeqrf_ffi", operand_layout_constraints={f64[5,3]{0,1}}
  p = f64[5,3]{0,1} get-tuple-element(g), index=0
  t = f64[3] get-tuple-element(g), index=1
  q = f64[5,3]{0,1} custom-call(p, t), custom_call_target="lapack_dorgqr_ffi", operand_layout_constraints={f64[5,3]{0,1}, f64[3]}
  s = f64[3,3] slice(p), slice={[0:3], [0:3]}
  rows = s32[3,3] iota(), iota_dimension=0
  columns = s32[3,3] iota(), iota_dimension=1
  upper = pred[3,3] compare(columns, rows), direction=GE
  zero = f64[] constant(0)
  zeros = f64[3,3] broadcast(zero), dimensions={}
  r = f64[3,3] select(upper, s, zeros)
  ROOT qr = (f64[5,3]{0,1}, f64[3,3]) tuple(q, r)""", [normal(5, 3)]),
    "reduce_add": ("""
  x = f64[3,5,2] parameter(0)
  z = f64[] constant(0)
  ROOT r = f64[5] reduce(x, z), dimensions={0,2}, to_apply=add_f64""", [normal(3, 5, 2)]),
    "reduce_max": ("""
  x = f64[3,5] parameter(0)
  z = f64[] constant(-inf)
  ROOT r = f64[3] reduce(x, z), dimensions={1}, to_apply=max_f64""", [normal(3, 5)]),
    "reduce_min": ("""
  x = f64[3,5] parameter(0)
  z = f64[] constant(inf)
  ROOT r = f64[5] reduce(x, z), dimensions={0}, to_apply=min_f64""", [normal(3, 5)]),
    "reduce_mul": ("""
  x = f64[3,5] parameter(0)
  i = f64[] parameter(1)
  ROOT r = f64[5] reduce(x, i), dimensions={0}, to_apply=mul_f64""", [normal(3, 5), np.float64(1.5)]),
    "reduce_window_add": ("""
  x = f64[3,7] parameter(0)
  z = f64[] constant(0)
  ROOT r = f64[3,3] reduce-window(x, z), window={size=1x3 stride=1x2 pad=0_0x2_1 rhs_dilate=1x2}, to_apply=add_f64""",
                          [normal(3, 7)]),
    "reduce_window_cumsum": ("""
  x = f64[3,6] parameter(0)
  z = f64[] constant(0)
  ROOT r = f64[3,6] reduce-window(x, z), window={size=1x6 pad=0_0x5_0}, to_apply=add_f64""",
                             [normal(3, 6)]),
    "reduce_window_mul_strided": ("""
  x = f64[3,8] parameter(0)
  one = f64[] constant(1)
  ROOT r = f64[3,4] reduce-window(x, one), window={size=1x3 stride=1x2 pad=0_0x1_0}, to_apply=mul_f64""",
                                  [np.concatenate([normal(3, 4), np.zeros((3, 1)), normal(3, 3)], 1)]),
    "reduce_window_max": ("""
  x = f64[5,7] parameter(0)
  z = f64[] constant(-inf)
  ROOT r = f64[3,4] reduce-window(x, z), window={size=3x2 stride=2x2 pad=1_1x0_1}, to_apply=max_f64""",
                          [normal(5, 7)]),
    "reduce_window_min_dilated": ("""
  x = f64[5,3] parameter(0)
  z = f64[] constant(inf)
  ROOT r = f64[4,3] reduce-window(x, z), window={size=2x1 lhs_dilate=1x1 rhs_dilate=3x1 pad=1_1x0_0}, to_apply=min_f64""",
                                  [normal(5, 3)]),
    "reshape": ("""
  x = f64[3,10] parameter(0)
  ROOT y = f64[5,2,3] reshape(x)""", [normal(3, 10)]),
    "reverse": ("""
  x = f64[3,5] parameter(0)
  ROOT y = f64[3,5] reverse(x), dimensions={0,1}""", [normal(3, 5)]),
    "scatter_add": ("""
  x = f64[6,3] parameter(0)
  i = s32[4,1] parameter(1)
  u = f64[4,3] parameter(2)
  ROOT s = f64[6,3] scatter(x, i, u), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add_f64""",
                    [normal(6, 3), np.array([[1], [1], [7], [5]], np.int32), normal(4, 3)]),
    "scatter_max_duplicates_out_of_bounds": ("""
  x = f64[6,3] parameter(0)
  i = s32[4,1] parameter(1)
  u = f64[4,3] parameter(2)
  ROOT s = f64[6,3] scatter(x, i, u), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=max_f64""",
                                             [normal(6, 3), np.array([[2], [-1], [2], [5]], np.int32),
                                              normal(4, 3)]),
    "scatter_set": ("""
  x = f64[6,3] parameter(0)
  i = s32[3,1] parameter(1)
  u = f64[3,3] parameter(2)
  ROOT s = f64[6,3] scatter(x, i, u), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=set_f64""",
                    [normal(6, 3), np.array([[2], [-1], [5]], np.int32), normal(3, 3)]),
    "svd_lapack_thin": ("""
  a = f64[4,3] parameter(0)
  c = (f64[4,3]{0,1}, f64[3], f64[4,3]{0,1}, f64[3,3]{0,1}, s32[]) custom-call(a), custom_call_target="lapack_dgesdd_ffi", operand_layout_constraints={f64[4,3]{0,1}}, backend_config={mode = 83 : ui8}
  s = f64[3] get-tuple-element(c), index=1
  u = f64[4,3]{0,1} get-tuple-element(c), index=2
  vt = f64[3,3]{0,1} get-tuple-element(c), index=3
  uu = f64[4,3] multiply(u, u)
  vv = f64[3,3] multiply(vt, vt)
  ROOT t = (f64[3], f64[4,3], f64[3,3]) tuple(s, uu, vv)""", [normal(4, 3)]),
    "svd_lapack_values": ("""
  a = f64[2,3,5] parameter(0)
  c = (f64[2,3,5]{1,2,0}, f64[2,3], f64[2,3,3]{1,2,0}, f64[2,5,5]{1,2,0}, s32[2]) custom-call(a), custom_call_target="lapack_dgesdd_ffi", operand_layout_constraints={f64[2,3,5]{1,2,0}}, backend_config={mode = 78 : ui8}
  ROOT s = f64[2,3] get-tuple-element(c), index=1""", [normal(2, 3, 5)]),
    "slice_strided": ("""
  x = f64[7,6] parameter(0)
  ROOT s = f64[3,2] slice(x), slice={[1:7:2], [0:5:3]}""", [normal(7, 6)]),
    "sort_key_value": ("""
  k = f64[3,5] parameter(0)
  v = f64[3,5] parameter(1)
  s = (f64[3,5], f64[3,5]) sort(k, v), dimensions={1}, to_apply=less_f64
  a = f64[3,5] get-tuple-element(s), index=0
  b = f64[3,5] get-tuple-element(s), index=1
  ROOT m = f64[3,5] multiply(a, b)""", [normal(3, 5), normal(3, 5)]),
    "top_k": ("""
  x = f64[2,7] parameter(0)
  t = (f64[2,3], s32[2,3]) topk(x), k=3, largest=true
  ROOT v = f64[2,3] get-tuple-element(t), index=0""", [normal(2, 7)]),
    "tridiagonal_solve_lapack": ("""
  dl = f64[2,5] parameter(0)
  d = f64[2,5] parameter(1)
  du = f64[2,5] parameter(2)
  b = f64[2,5,3] parameter(3)
  t = (f64[2,5], f64[2,5], f64[2,5], f64[2,5,3]{1,2,0}, s32[2]) custom-call(dl, d, du, b), custom_call_target="lapack_dgtsv_ffi", operand_layout_constraints={f64[2,5]{1,0}, f64[2,5]{1,0}, f64[2,5]{1,0}, f64[2,5,3]{1,2,0}}
  ROOT x = f64[2,5,3]{1,2,0} get-tuple-element(t), index=3""",
                                 [normal(2, 5), normal(2, 5) + 4.0, normal(2, 5), normal(2, 5, 3)]),
    "triangular_solve_left_lower": ("""
  a = f64[2,3,3] parameter(0)
  b = f64[2,3,4] parameter(1)
  ROOT x = f64[2,3,4] triangular-solve(a, b), left_side=true, lower=true, unit_diagonal=false, transpose_a=NO_TRANSPOSE""",
                                    [normal(2, 3, 3) + 3 * np.eye(3), normal(2, 3, 4)]),
    "triangular_solve_right_upper_unit_transposed": ("""
  a = f64[3,3] parameter(0)
  b = f64[4,3] parameter(1)
  ROOT x = f64[4,3] triangular-solve(a, b), left_side=false, lower=false, unit_diagonal=true, transpose_a=TRANSPOSE""",
                                                     [normal(3, 3), normal(4, 3)]),
    "triangular_solve_lapack": ("""
  a = f64[3,3] parameter(0)
  b = f64[3,2] parameter(1)
  ROOT x = f64[3,2]{0,1} custom-call(a, b), custom_call_target="lapack_dtrsm_ffi", operand_layout_constraints={f64[3,3]{0,1}, f64[3,2]{0,1}}, backend_config={diag = 78 : ui8, side = 76 : ui8, trans_x = 84 : ui8, uplo = 85 : ui8}""",
                                [normal(3, 3) + 3 * np.eye(3), normal(3, 2)]),
    "transpose": ("""
  x = f64[2,3,5] parameter(0)
  ROOT y = f64[5,2,3] transpose(x), dimensions={2,0,1}""", [normal(2, 3, 5)]),
    # On one device the collectives move values without computing; their rules transpose
    # them (all-gather and reduce-scatter into each other, a permute's pairs reversed).
    "collectives_one_device": ("""
  x = f64[4,3] parameter(0)
  r = f64[4,3] all-reduce(x), replica_groups={}, to_apply=add_f64
  g = f64[4,3] all-gather(r), dimensions={0}, replica_groups={{0}}
  s = f64[4,3] reduce-scatter(g), dimensions={1}, replica_groups={}, to_apply=add_f64
  a = f64[4,3] all-to-all(s), dimensions={0}, replica_groups={{0}}
  p = f64[4,3] collective-permute(a), source_target_pairs={{0,0}}
  b = f64[4,3] collective-broadcast(p), replica_groups={{0}}
  ROOT m = f64[4,3] multiply(b, x)""", [normal(4, 3)]),
    # Rows 3..4 and 0 of x written at rows 0..1 and 4 of o; o's other rows kept.
    "ragged_all_to_all_one_device": ("""
  x = f64[5,3] parameter(0)
  o = f64[6,3] parameter(1)
  io = s32[2] constant({3, 0})
  ss = s32[2] constant({2, 1})
  oo = s32[2] constant({0, 4})
  rs = s32[2] constant({2, 1})
  r = f64[6,3] ragged-all-to-all(x, o, io, ss, oo, rs), replica_groups={{0}}
  ROOT m = f64[6,3] multiply(r, r)""", [normal(5, 3), normal(6, 3)]),
    # jax.checkpoint's barrier: a tuple through it, one element unused, one read twice.
    "opt_barrier": ("""
  x = f64[4,3] parameter(0)
  y = f64[4,3] parameter(1)
  s = f64[4,3] sine(x)
  t = (f64[4,3], f64[4,3], f64[4,3]) tuple(x, s, y)
  b = (f64[4,3], f64[4,3], f64[4,3]) opt-barrier(t)
  u = f64[4,3] get-tuple-element(b), index=0
  v = f64[4,3] get-tuple-element(b), index=1
  c = f64[4,3] cosine(u)
  m = f64[4,3] multiply(c, v)
  ROOT r = f64[4,3] multiply(m, u)""", [normal(4, 3), normal(4, 3)]),
    # An asynchronous copy between memory spaces; the source is read after it too.
    "copy_start_done": ("""
  x = f64[4,3] parameter(0)
  s = (f64[4,3]{1,0:S(5)}, f64[4,3], u32[]) copy-start(x)
  d = f64[4,3]{1,0:S(5)} copy-done(s)
  c = f64[4,3] cosine(d)
  ROOT m = f64[4,3] multiply(c, x)""", [normal(4, 3)]),
    # A mixture of experts' grouped matmul (its other forms: tests/fusion/test_ragged_dot.py).
    "ragged_dot": ("""
  x = f64[7,3] parameter(0)
  w = f64[2,3,4] parameter(1)
  g = s32[2] constant({3, 2})
  ROOT r = f64[7,4] ragged-dot(x, w, g), lhs_contracting_dims={1}, rhs_contracting_dims={1}, lhs_ragged_dims={0}, rhs_group_dims={0}""",
                   [normal(7, 3), normal(2, 3, 4)]),
    "select_and_scatter_padded_strided": ("""
  x = f64[5,7] parameter(0)
  s = f64[3,3] parameter(1)
  z = f64[] constant(0)
  ROOT r = f64[5,7] select-and-scatter(x, s, z), window={size=2x3 stride=2x2 pad=0_1x0_0}, select=ge_f64, scatter=add_f64""",
                                          [normal(5, 7), normal(3, 3)]),
    "sharding_custom_call": ("""
  x = f64[4,3] parameter(0)
  c = f64[4,3] custom-call(x), custom_call_target="Sharding", sharding={replicated}
  ROOT m = f64[4,3] multiply(c, c)""", [normal(4, 3)]),
    "tuple_get_tuple_element": ("""
  x = f64[3] parameter(0)
  y = f64[3] parameter(1)
  i = (f64[3], f64[3]) tuple(y, x)
  t = (f64[3], (f64[3], f64[3])) tuple(x, i)
  u = (f64[3], f64[3]) get-tuple-element(t), index=1
  a = f64[3] get-tuple-element(u), index=0
  b = f64[3] get-tuple-element(t), index=0
  n = s32[3] iota(), iota_dimension=0
  c = f64[3] convert(n)
  d = f64[3] multiply(a, c)
  ROOT m = f64[3] multiply(d, b)""", [normal(3), normal(3)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_rule(name: str) -> None:
    body, inputs = CASES[name]
    eps, rtol = (1e-3, 1e-3) if name == "convert" else (1e-6, 1e-6)
    check_directional_derivatives(module(body), inputs, eps=eps, rtol=rtol)


CONTROL = {
    "call": ("""
  x = f64[5] parameter(0)
  ROOT c = f64[5] call(x), to_apply=square""", """
square {
  a = f64[5] parameter(0)
  ROOT m = f64[5] multiply(a, a)
}"""),
    "fusion": ("""
  x = f64[5] parameter(0)
  y = f64[5] parameter(1)
  ROOT f = f64[5] fusion(x, y), kind=kLoop, calls=fused""", """
fused {
  a = f64[5] parameter(0)
  b = f64[5] parameter(1)
  s = f64[5] sine(a)
  ROOT m = f64[5] multiply(s, b)
}"""),
    "conditional_index": ("""
  i = s32[] parameter(0)
  x = f64[5] parameter(1)
  y = f64[3] parameter(2)
  ROOT c = f64[5] conditional(i, x, y), branch_computations={b0, b1}""", """
b0 {
  a = f64[5] parameter(0)
  ROOT s = f64[5] sine(a)
}
b1 {
  a = f64[3] parameter(0)
  r = f64[] reduce(a, z), dimensions={0}, to_apply=add_f64
  z = f64[] constant(0)
  ROOT s = f64[5] broadcast(r), dimensions={}
}"""),
    "conditional_pred": ("""
  p = pred[] parameter(0)
  x = f64[5] parameter(1)
  t = (f64[5], f64[5]) tuple(x, x)
  ROOT c = f64[5] conditional(p, t, x), true_computation=on_true, false_computation=on_false""", """
on_true {
  a = (f64[5], f64[5]) parameter(0)
  u = f64[5] get-tuple-element(a), index=0
  v = f64[5] get-tuple-element(a), index=1
  ROOT m = f64[5] multiply(u, v)
}
on_false {
  a = f64[5] parameter(0)
  ROOT s = f64[5] exponential(a)
}"""),
    "while_long_scan": ("""
  w = f64[3,3] parameter(0)
  xs = f64[40,3] parameter(1)
  h = f64[3] parameter(2)
  z = s32[] constant(0)
  t = (s32[], f64[3,3], f64[40,3], f64[3]) tuple(z, w, xs, h)
  l = (s32[], f64[3,3], f64[40,3], f64[3]) while(t), condition=scan_cond, body=scan_body
  ROOT r = f64[3] get-tuple-element(l), index=3""", """
scan_body {
  s = (s32[], f64[3,3], f64[40,3], f64[3]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  one = s32[] constant(1)
  j = s32[] add(i, one)
  w = f64[3,3] get-tuple-element(s), index=1
  xs = f64[40,3] get-tuple-element(s), index=2
  h = f64[3] get-tuple-element(s), index=3
  zero = s32[] constant(0)
  row = f64[1,3] dynamic-slice(xs, i, zero), dynamic_slice_sizes={1,3}
  x = f64[3] reshape(row)
  wh = f64[3] dot(w, h), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  a = f64[3] add(wh, x)
  n = f64[3] tanh(a)
  ROOT u = (s32[], f64[3,3], f64[40,3], f64[3]) tuple(j, w, xs, n)
}
scan_cond {
  s = (s32[], f64[3,3], f64[40,3], f64[3]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(40)
  ROOT lt = pred[] compare(i, n), direction=LT
}"""),
    "while_counted": ("""
  x = f64[5] parameter(0)
  z = s32[] constant(0)
  t = (s32[], f64[5]) tuple(z, x)
  w = (s32[], f64[5]) while(t), condition=cond, body=body
  ROOT r = f64[5] get-tuple-element(w), index=1""", """
body {
  s = (s32[], f64[5]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  one = s32[] constant(1)
  j = s32[] add(i, one)
  v = f64[5] get-tuple-element(s), index=1
  c = f64[5] sine(v)
  m = f64[5] multiply(v, c)
  ROOT u = (s32[], f64[5]) tuple(j, m)
}
cond {
  s = (s32[], f64[5]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(n, i), direction=GT
}"""),
}


@pytest.mark.parametrize("name", sorted(CONTROL))
@pytest.mark.parametrize("selector", [0, 1])
def test_control_flow(name: str, selector: int) -> None:
    body, extra = CONTROL[name]
    m = module(body, extra)
    params = m.entry.parameters
    inputs = []
    for p in params:
        if p.shape.dtype == "s32":
            inputs.append(np.int32(selector))
        elif p.shape.dtype == "pred":
            inputs.append(np.bool_(selector))
        else:
            inputs.append(normal(*p.shape.dims))
    check_directional_derivatives(m, inputs)


def test_every_rule_is_exercised() -> None:
    """Each opcode with a VJP rule appears in some case of this file (or is structural)."""
    seen = set(UNARY) | set(BINARY) | {"parameter"}
    texts = [body for body, _ in CASES.values()] + [b + e for b, e in CONTROL.values()]
    for text in texts:
        seen.update(re.findall(r"^\s*(?:ROOT )?\S+ = (?:\(.*\)|\S+) ([\w-]+)\(", text, re.M))
    # ``while`` is unrolled before the reverse pass; its rule only reports the uncounted ones,
    # and the piecewise-constant ops without a case share ``_no_gradient`` with those tested.
    untested = set(VJP_RULES) - seen - {"while", "bitcast-convert", "is-finite",
                                         "round-nearest-afz", "reduce-precision"}
    assert not untested, sorted(untested)
