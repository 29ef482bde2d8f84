"""Library calls in the front end: shape rules, and the reference evaluator against XLA itself
running the same HLO text (FFT of every kind, top-k, the cholesky and triangular-solve ops, and
the LAPACK custom-calls JAX emits on the CPU, with their exact output conventions)."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from fusion.errors import EvaluationError, HloVerifyError
from fusion.evaluator import evaluate
from fusion.evaluator import linalg_reference as lapack
from fusion.analysis.library_calls import TARGETS, library_call
from fusion.text.parser import parse_hlo
from fusion.shapes.verifier import verify_module

pytest.importorskip("jax")
from tests.conformance.xla_oracle import run_xla  # noqa: E402

RNG = np.random.default_rng(15)


def _module(params: str, root: str, extra: str = "") -> str:
    return f"HloModule m\n{extra}ENTRY e {{\n{params}  ROOT r = {root}\n}}\n"


def _random(shape, dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
        return (RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


def _tol(dtype) -> float:
    return 1e-11 if np.dtype(dtype) in (np.float64, np.complex128) else 2e-5


def _assert_close(got, want, label=""):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (label, got.dtype, want.dtype)
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want, err_msg=label)
        return
    tol = _tol(want.dtype)
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, np.abs(want).max()),
                               err_msg=label)


def _both(text: str, *arrays):
    module = parse_hlo(text)
    verify_module(module)
    return evaluate(module, *arrays), run_xla(text, *arrays)


# ---- shape rules ------------------------------------------------------------------------------

@pytest.mark.parametrize("root, message", [
    ("c64[2,5] fft(x), fft_type=RFFT, fft_length={6}", "last dims must equal fft_length"),
    ("c64[2,8] fft(x), fft_type=FFT, fft_length={8}", "element type f32"),
    ("c64[2,8] fft(x), fft_type=DCT, fft_length={8}", "fft_type"),
    ("(f32[2,9], s32[2,9]) topk(x), k=9, largest=true", "k must be at most"),
    ("(f32[2,3], s32[2,3]) custom-call(x), custom_call_target=\"lapack_dpotrf_ffi\"",
     "must hold square matrices"),
])
def test_shape_rules_refuse_bad_library_calls(root, message):
    module = parse_hlo(_module("  x = f32[2,8] parameter(0)\n", root))
    with pytest.raises(HloVerifyError, match=message) as info:
        verify_module(module)
    assert info.value.line == 4  # the ROOT line


def test_lapack_type_letter_must_match_the_operand():
    module = parse_hlo(_module("  x = f32[3,3] parameter(0)\n",
                               '(f32[3,3], s32[]) custom-call(x), custom_call_target="lapack_dpotrf_ffi"'))
    with pytest.raises(HloVerifyError, match="factors f64 matrices"):
        verify_module(module)


def test_an_opaque_custom_call_keeps_its_declared_shape():
    module = parse_hlo(_module("  x = f32[3] parameter(0)\n",
                               'f32[7] custom-call(x), custom_call_target="my_kernel"'))
    verify_module(module)
    with pytest.raises(EvaluationError, match="custom-call target my_kernel is not supported"):
        evaluate(module, np.zeros(3, np.float32))


def test_target_table_is_alphabetical_and_decodes():
    assert list(TARGETS) == sorted(TARGETS)
    assert {"lapack_spotrf_ffi", "lapack_zgesdd_ffi", "cusolver_gesvdj_ffi", "TopK",
            "cu_lu_pivots_to_permutation", "ProductOfElementaryHouseholderReflectors"} <= set(TARGETS)
    assert "lapack_corgqr_ffi" not in TARGETS and "lapack_cungqr_ffi" in TARGETS


# ---- FFT ------------------------------------------------------------------------------------

_FFT_CASES = [
    ("FFT", "c64", (3, 8), (8,)), ("IFFT", "c64", (3, 8), (8,)),
    ("RFFT", "f32", (3, 8), (8,)), ("IRFFT", "c64", (3, 5), (8,)),
    ("RFFT", "f32", (2, 7), (7,)), ("IRFFT", "c64", (2, 4), (7,)),
    ("FFT", "c128", (2, 4, 6), (4, 6)), ("RFFT", "f64", (2, 4, 6), (4, 6)),
    ("IRFFT", "c128", (4, 6, 4), (4, 6, 6)), ("IFFT", "c64", (2, 3, 4, 5), (3, 4, 5)),
]


def _fft_result(kind, dtype, dims, lengths):
    real = {"c64": "f32", "c128": "f64"}
    cplx = {"f32": "c64", "f64": "c128"}
    lead = dims[:len(dims) - len(lengths)]
    if kind == "RFFT":
        return cplx[dtype], lead + lengths[:-1] + (lengths[-1] // 2 + 1,)
    if kind == "IRFFT":
        return real[dtype], lead + lengths
    return dtype, dims


@pytest.mark.parametrize("kind, dtype, dims, lengths", _FFT_CASES)
def test_fft_matches_xla(kind, dtype, dims, lengths):
    out_type, out_dims = _fft_result(kind, dtype, dims, lengths)
    text = _module(f"  x = {dtype}[{','.join(map(str, dims))}] parameter(0)\n",
                   f"{out_type}[{','.join(map(str, out_dims))}] fft(x), fft_type={kind}, "
                   f"fft_length={{{','.join(map(str, lengths))}}}")
    x = _random(dims, {"c64": np.complex64, "c128": np.complex128, "f32": np.float32,
                       "f64": np.float64}[dtype])
    (got,), (want,) = _both(text, x)
    _assert_close(got, want, kind)


# ---- top-k ------------------------------------------------------------------------------------

@pytest.mark.parametrize("largest", [True, False])
def test_topk_matches_xla_with_ties_and_special_values(largest):
    row = [1.0, 3.0, -0.0, 3.0, 0.0, np.nan, -np.inf, 1.0, -np.nan, np.inf]
    x = np.array([row, row[::-1]], np.float32)
    text = _module("  x = f32[2,10] parameter(0)\n",
                   f"(f32[2,6], s32[2,6]) topk(x), k=6, largest={str(largest).lower()}")
    got, want = _both(text, x)
    np.testing.assert_array_equal(got[1], want[1])
    assert got[0].tobytes() == want[0].tobytes()


def test_topk_of_integers_matches_xla():
    x = RNG.integers(-3, 3, (4, 9)).astype(np.int32)
    text = _module("  x = s32[4,9] parameter(0)\n", "(s32[4,4], s32[4,4]) topk(x), k=4, largest=true")
    got, want = _both(text, x)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


# ---- the cholesky and triangular-solve ops ----------------------------------------------------

def _spd(batch, n, dtype):
    a = _random(batch + (n, n), dtype)
    return (a @ np.conj(np.swapaxes(a, -1, -2)) + n * np.eye(n)).astype(dtype)


@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("dtype, hlo", [(np.float32, "f32"), (np.complex128, "c128")])
def test_cholesky_op_matches_xla(lower, dtype, hlo):
    a = _spd((2,), 4, dtype)
    a[1, 0, 0] = -1  # not positive definite: XLA gives NaN
    text = _module(f"  a = {hlo}[2,4,4] parameter(0)\n",
                   f"{hlo}[2,4,4] cholesky(a), lower={str(lower).lower()}")
    (got,), (want,) = _both(text, a)
    assert np.isnan(got[1]).all() and np.isnan(want[1]).all()
    _assert_close(got[0], want[0])


@pytest.mark.parametrize("left, lower, transpose, unit", list(itertools.product(
    [True, False], [True, False], ["NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"], [True, False])))
def test_triangular_solve_op_matches_xla(left, lower, transpose, unit):
    a = _random((2, 3, 3), np.complex64) + 3 * np.eye(3, dtype=np.complex64)
    b_dims = (2, 3, 2) if left else (2, 2, 3)
    b = _random(b_dims, np.complex64)
    text = _module("  a = c64[2,3,3] parameter(0)\n"
                   f"  b = c64[{','.join(map(str, b_dims))}] parameter(1)\n",
                   f"c64[{','.join(map(str, b_dims))}] triangular-solve(a, b), "
                   f"left_side={str(left).lower()}, lower={str(lower).lower()}, "
                   f"unit_diagonal={str(unit).lower()}, transpose_a={transpose}")
    (got,), (want,) = _both(text, a, b)
    _assert_close(got, want)


# ---- LAPACK custom-calls, exact conventions -------------------------------------------------

def col(shape: str) -> str:
    """``f32[2,4,3]`` laid out column-major per matrix, as JAX's LAPACK calls take it:
    ``f32[2,4,3]{1,2,0}``."""
    dims = shape[shape.index("[") + 1:-1].split(",")
    r = len(dims)
    order = [r - 2, r - 1, *range(r - 3, -1, -1)] if r >= 2 else list(range(r - 1, -1, -1))
    return shape + "{" + ",".join(map(str, order)) + "}"


def _custom_call(result: str, operands: str, target: str, config: str = "{}",
                 constraints: str = "") -> str:
    layout = f"operand_layout_constraints={{{constraints}}}, " if constraints else ""
    return (f"{result} custom-call({operands}), custom_call_target=\"{target}\", {layout}"
            f"api_version=API_VERSION_TYPED_FFI, backend_config={config}")


@pytest.mark.parametrize("uplo", [76, 85])
@pytest.mark.parametrize("letter, hlo, dtype", [("s", "f32", np.float32), ("z", "c128", np.complex128)])
def test_potrf_keeps_the_other_triangle_and_reports_info_as_lapack(uplo, letter, hlo, dtype):
    a = _random((3, 4, 4), dtype) + 4 * np.eye(4, dtype=dtype)  # the other triangle: garbage
    a[0] = _spd((), 4, dtype)
    a[2] = _spd((), 4, dtype)
    a[2, 2, 2] = -50  # the third leading minor fails: info 3
    text = _module(f"  a = {hlo}[3,4,4] parameter(0)\n",
                   _custom_call(f"({col(f'{hlo}[3,4,4]')}, s32[3])", "a", f"lapack_{letter}potrf_ffi",
                                f"{{uplo = {uplo} : ui8}}", col(f"{hlo}[3,4,4]")))
    got, want = _both(text, a)
    np.testing.assert_array_equal(got[1], want[1])
    assert want[1][2] == 3
    ok = want[1] == 0
    _assert_close(got[0][ok], want[0][ok])


@pytest.mark.parametrize("m, n", [(4, 4), (5, 3), (3, 5)])
def test_getrf_pivots_and_packed_lu_match_lapack(m, n):
    a = _random((2, m, n), np.float32)
    a[1, :, 0] = 0  # a zero pivot: info 1, factorization goes on
    k = min(m, n)
    text = _module(f"  a = f32[2,{m},{n}] parameter(0)\n",
                   _custom_call(f"({col(f'f32[2,{m},{n}]')}, s32[2,{k}], s32[2])", "a",
                                "lapack_sgetrf_ffi", "{}", col(f"f32[2,{m},{n}]")))
    got, want = _both(text, a)
    for g, w in zip(got, want):
        _assert_close(g, w)
    assert want[2][1] == 1


@pytest.mark.parametrize("m, n", [(5, 3), (4, 4)])
def test_geqrf_and_orgqr_match_lapack(m, n):
    a = _random((2, m, n), np.complex64)
    k = min(m, n)
    text = _module(f"  a = c64[2,{m},{n}] parameter(0)\n",
                   _custom_call(f"({col(f'c64[2,{m},{n}]')}, c64[2,{k}])", "a", "lapack_cgeqrf_ffi",
                                "{}", col(f"c64[2,{m},{n}]")))
    got, want = _both(text, a)
    for g, w in zip(got, want):
        _assert_close(g, w)
    text = _module(f"  a = c64[2,{m},{n}] parameter(0)\n  t = c64[2,{k}] parameter(1)\n",
                   _custom_call(col(f"c64[2,{m},{n}]"), "a, t", "lapack_cungqr_ffi", "{}",
                                f"{col(f'c64[2,{m},{n}]')}, c64[2,{k}]"))
    (q,), (q_xla,) = _both(text, want[0], want[1])
    _assert_close(q, q_xla)
    # XLA's own name for the same product (layout-free: it is not a LAPACK call).
    text = _module(f"  a = c64[2,{m},{n}] parameter(0)\n  t = c64[2,{k}] parameter(1)\n",
                   _custom_call(f"c64[2,{m},{n}]", "a, t", "ProductOfElementaryHouseholderReflectors"))
    _assert_close(evaluate(parse_hlo(text), want[0], want[1])[0], q_xla)
    r = np.triu(want[0])[:, :n, :]
    _assert_close(q @ r, a.astype(np.complex64))


def test_syevd_and_gesdd_reconstruct_as_lapack():
    a = _random((2, 4, 4), np.float64)
    text = _module("  a = f64[2,4,4] parameter(0)\n",
                   _custom_call(f"({col('f64[2,4,4]')}, f64[2,4], s32[2])", "a", "lapack_dsyevd_ffi",
                                "{mode = 86 : ui8, uplo = 76 : ui8}", col("f64[2,4,4]")))
    (v, w, info), (v_x, w_x, info_x) = _both(text, a)
    _assert_close(w, w_x)
    np.testing.assert_array_equal(info, info_x)
    lower = np.tril(a) + np.swapaxes(np.tril(a, -1), -1, -2)
    _assert_close((v * w[:, None, :]) @ np.swapaxes(v, -1, -2), lower)
    text = _module("  a = f64[2,4,3] parameter(0)\n",
                   _custom_call(f"({col('f64[2,4,3]')}, f64[2,3], {col('f64[2,4,3]')}, "
                                f"{col('f64[2,3,3]')}, s32[2])", "a", "lapack_dgesdd_ffi",
                                "{mode = 83 : ui8}", col("f64[2,4,3]")))
    b = _random((2, 4, 3), np.float64)
    got, want = _both(text, b)
    _assert_close(got[1], want[1])
    _assert_close((got[2] * got[1][:, None, :]) @ got[3], b)
    np.testing.assert_allclose(np.abs(got[2]), np.abs(want[2]), atol=1e-10)


@pytest.mark.parametrize("side, uplo, trans, diag", list(itertools.product((76, 82), (76, 85), (78, 84, 67), (78, 85))))
def test_trsm_matches_lapack(side, uplo, trans, diag):
    a = _random((3, 3), np.float32) + 3 * np.eye(3, dtype=np.float32)
    b = _random((3, 2) if side == 76 else (2, 3), np.float32)
    dims = ",".join(map(str, b.shape))
    text = _module(f"  a = f32[3,3] parameter(0)\n  b = f32[{dims}] parameter(1)\n",
                   _custom_call(col(f"f32[{dims}]"), "a, b", "lapack_strsm_ffi",
                                f"{{diag = {diag} : ui8, side = {side} : ui8, trans_x = {trans} : ui8, uplo = {uplo} : ui8}}",
                                f"{col('f32[3,3]')}, {col(f'f32[{dims}]')}"))
    (got,), (want,) = _both(text, a, b)
    _assert_close(got, want)


def test_pivots_to_permutation_matches_jax():
    import jax

    pivots = np.array([[2, 2, 3], [0, 3, 2]], np.int32)
    want = np.asarray(jax.lax.linalg.lu_pivots_to_permutation(pivots, 5))
    np.testing.assert_array_equal(lapack.pivots_to_permutation(pivots, 5), want)


def test_gpu_targets_decode_their_backend_config():
    text = _module("  a = f32[4,3] parameter(0)\n",
                   _custom_call(f"({col('f32[4,3]')}, f32[3], {col('f32[4,4]')}, {col('f32[3,3]')}, s32[])",
                                "a", "cusolver_gesvdj_ffi", "{compute_uv = true, full_matrices = true}",
                                col("f32[4,3]")))
    module = parse_hlo(text)
    verify_module(module)
    call = library_call(module.entry.root)
    assert (call.routine, call.svd_v, call.full_matrices, call.lapack_type) == ("svd", True, True, None)
    a = _random((4, 3), np.float32)
    _, s, u, v, info = evaluate(module, a)
    _assert_close((u[:, :3] * s) @ v.T, a)  # V, not V^H
    assert info == 0


def test_a_row_major_lapack_call_is_refused_not_transposed():
    # LAPACK reads column-major buffers: with row-major layouts it would factor the transpose.
    text = _module("  a = f32[3,3]{1,0} parameter(0)\n",
                   _custom_call("(f32[3,3]{1,0}, s32[])", "a", "lapack_spotrf_ffi",
                                "{uplo = 76 : ui8}"))
    module = parse_hlo(text)
    verify_module(module)
    with pytest.raises(EvaluationError, match="column-major"):
        evaluate(module, np.eye(3, dtype=np.float32))
