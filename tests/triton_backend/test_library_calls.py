"""Library calls end to end: ``compile_hlo`` runs FFTs, top-k and the LAPACK / cuSOLVER
custom-calls as torch calls on the host between its kernels; checked against XLA running the
same HLO text and against the reference evaluator (by reconstruction where LAPACK's
eigen-/singular-vector signs are not defined)."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo
from triton_backend import compile_hlo
from triton_backend.driver.op_coverage import library_call_sites, uncovered_ops
from triton_backend.reports.compile_report import build_report
from triton_backend.reports.report_text import render_text

pytest.importorskip("jax")
from tests.conformance.xla_oracle import run_xla  # noqa: E402
from tests.fusion.test_library_calls import _custom_call, _module, _random, col  # noqa: E402

HLO_DIR = __import__("pathlib").Path(__file__).resolve().parents[1] / "data" / "hlo"


def _run(text: str, *arrays) -> list[np.ndarray]:
    outputs = compile_hlo(text)(*[torch.from_numpy(np.ascontiguousarray(a)) for a in arrays])
    return [o.numpy() for o in outputs]


def _close(got, want, tol=2e-5):
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape and got.dtype == want.dtype, (got.dtype, want.dtype)
    if want.dtype.kind in "biu":
        np.testing.assert_array_equal(got, want)
    else:
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, np.abs(want).max()))


@pytest.mark.parametrize("kind, operand, result, lengths", [
    ("FFT", "c64[3,8]", "c64[3,8]", "8"), ("IFFT", "c64[2,4,6]", "c64[2,4,6]", "4,6"),
    ("RFFT", "f32[3,8]", "c64[3,5]", "8"), ("IRFFT", "c64[3,5]", "f32[3,8]", "8"),
])
def test_fft_kinds_run_as_torch_fft(kind, operand, result, lengths):
    text = _module(f"  x = {operand} parameter(0)\n",
                   f"{result} fft(x), fft_type={kind}, fft_length={{{lengths}}}")
    dims = tuple(int(d) for d in operand[4:-1].split(","))
    x = _random(dims, np.complex64 if operand.startswith("c") else np.float32)
    (got,), (want,) = _run(text, x), run_xla(text, x)
    _close(got, want)
    _close(got, evaluate(parse_hlo(text), x)[0])


def test_fft_output_feeds_a_complex_fusion():
    # |FFT(x)|^2 summed, and the spectrum scaled: complex values cross from the library call
    # into kernels as pairs of floats.
    text = ("HloModule m\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
            "  ROOT s = f32[] add(a, b)\n}\n"
            "ENTRY e {\n  x = f32[2,8] parameter(0)\n"
            "  f = c64[2,5] fft(x), fft_type=RFFT, fft_length={8}\n"
            "  m = f32[2,5] abs(f)\n  p = f32[2,5] multiply(m, m)\n  z = f32[] constant(0)\n"
            "  s = f32[2] reduce(p, z), dimensions={1}, to_apply=add\n"
            "  c = c64[] constant((0.5, -1))\n  cb = c64[2,5] broadcast(c), dimensions={}\n"
            "  g = c64[2,5] multiply(f, cb)\n"
            "  i = f32[2,8] fft(g), fft_type=IRFFT, fft_length={8}\n"
            "  ROOT t = (f32[2], c64[2,5], f32[2,8]) tuple(s, g, i)\n}\n")
    x = _random((2, 8), np.float32)
    got, want = _run(text, x), run_xla(text, x)
    for g, w in zip(got, want):
        _close(g, w, 1e-4)


def test_topk_op_and_xla_topk_custom_call_match_xla_bit_for_bit():
    row = [1.0, 3.0, -0.0, 3.0, 0.0, np.nan, -np.inf, 1.0, 2.5, np.inf]
    x = np.array([row, row[::-1], list(range(10))], np.float32)
    text = _module("  x = f32[3,10] parameter(0)\n", "(f32[3,4], s32[3,4]) topk(x), k=4, largest=true")
    for got, want in zip(_run(text, x), run_xla(text, x)):
        assert got.tobytes() == want.tobytes()
    optimized = (HLO_DIR / "top_k.after.hlo").read_text()
    assert "custom_call_target=\"TopK\"" in optimized
    y = _random((3, 6), np.float32)
    y[0, :3] = y[0, 3]  # ties: the lower index first
    for got, want in zip(_run(optimized, y), run_xla(optimized, y)):
        assert got.tobytes() == want.tobytes()


def test_xla_topk_custom_calls_with_values_only_comparators():
    """XLA:CPU's optimized jnp.partition and argpartition: TopK calls whose comparator takes
    the values alone (two parameters) or the values and indices (four)."""
    jax = pytest.importorskip("jax")
    x = _random((9,), np.float32)
    for fn in (lambda v: jax.numpy.partition(v, 3), lambda v: jax.numpy.argpartition(v, 2)):
        optimized = jax.jit(fn).lower(x).compile().as_text()
        assert 'custom_call_target="TopK"' in optimized
        (got,) = _run(optimized, x)
        want = np.asarray(jax.jit(fn)(x))
        np.testing.assert_array_equal(np.sort(got), np.sort(want))


def test_cholesky_and_triangular_solve_ops():
    a = _random((4, 4), np.float64)
    spd = a @ a.T + 4 * np.eye(4)
    b = _random((2, 4), np.float64)
    text = ("HloModule m\nENTRY e {\n  a = f64[4,4] parameter(0)\n  b = f64[2,4] parameter(1)\n"
            "  l = f64[4,4] cholesky(a), lower=true\n"
            "  y = f64[2,4] triangular-solve(l, b), left_side=false, lower=true, "
            "unit_diagonal=false, transpose_a=TRANSPOSE\n"
            "  ROOT t = (f64[4,4], f64[2,4]) tuple(l, y)\n}\n")
    for got, want in zip(_run(text, spd, b), run_xla(text, spd, b)):
        _close(got, want, 1e-10)


def _lapack_cases():
    a44 = _random((2, 4, 4), np.float32)
    spd = (a44 @ np.swapaxes(a44, -1, -2) + 4 * np.eye(4)).astype(np.float32)
    spd[1, 2, 2] = -9  # info 3
    a53 = _random((5, 3), np.complex64)
    return {
        "potrf": (_module("  a = f32[2,4,4] parameter(0)\n", _custom_call(
            f"({col('f32[2,4,4]')}, s32[2])", "a", "lapack_spotrf_ffi", "{uplo = 85 : ui8}",
            col("f32[2,4,4]"))), (spd,)),
        "getrf": (_module("  a = f32[2,4,4] parameter(0)\n", _custom_call(
            f"({col('f32[2,4,4]')}, s32[2,4], s32[2])", "a", "lapack_sgetrf_ffi", "{}",
            col("f32[2,4,4]"))), (a44,)),
        "geqrf": (_module("  a = c64[5,3] parameter(0)\n", _custom_call(
            f"({col('c64[5,3]')}, c64[3])", "a", "lapack_cgeqrf_ffi", "{}", col("c64[5,3]"))),
            (a53,)),
        "trsm": (_module("  a = f32[2,4,4] parameter(0)\n  b = f32[2,4,4] parameter(1)\n",
                         _custom_call(col("f32[2,4,4]"), "a, b", "lapack_strsm_ffi",
                                      "{diag = 78 : ui8, side = 82 : ui8, trans_x = 67 : ui8, uplo = 85 : ui8}",
                                      f"{col('f32[2,4,4]')}, {col('f32[2,4,4]')}")),
                 (a44 + 4 * np.eye(4, dtype=np.float32), a44)),
    }


@pytest.mark.parametrize("name", ["potrf", "getrf", "geqrf", "trsm"])
def test_lapack_targets_match_xla(name):
    text, args = _lapack_cases()[name]
    got, want = _run(text, *args), run_xla(text, *args)
    if name == "potrf":  # a failed factorization's factor is LAPACK's partial work: info only
        np.testing.assert_array_equal(got[1], want[1])
        assert list(want[1]) == [0, 3]
        _close(got[0][0], want[0][0])
        return
    for g, w in zip(got, want):
        _close(g, w, 1e-4)


@pytest.mark.parametrize("name", ["cholesky_solve", "lu_solve", "qr", "eigh", "svd", "fft_filter"])
def test_corpus_library_programs_match_xla_after_its_passes(name):
    # The optimized HLO holds the LAPACK custom-calls with XLA's layouts and copies; XLA runs
    # the plain HLO (its oracle cannot run a transposing bitcast of lu_solve's optimized text).
    module = parse_hlo((HLO_DIR / f"{name}.after.hlo").read_text())
    rng = np.random.default_rng(5)
    args = [rng.standard_normal(p.shape.dims).astype(np.float32) for p in module.entry.parameters]
    got = _run((HLO_DIR / f"{name}.after.hlo").read_text(), *args)
    want = run_xla((HLO_DIR / f"{name}.before.hlo").read_text(), *args)
    for g, w in zip(got, want):
        _close(g, w, 1e-4)
    assert library_call_sites(module) and not uncovered_ops(module)


def test_lu_solve_after_xla_passes():
    test_corpus_library_programs_match_xla_after_its_passes("lu_solve")


def _cusolver(result: str, operand: str, target: str, config: str = "{}") -> str:
    return _module(f"  a = {operand} parameter(0)\n", _custom_call(result, "a", target, config, col(operand)))


def test_cusolver_targets_match_the_evaluator_and_lapack_conventions():
    a = _random((2, 4, 4), np.float32)
    spd = (a @ np.swapaxes(a, -1, -2) + 4 * np.eye(4)).astype(np.float32)
    cases = {
        "potrf": (_cusolver(f"({col('f32[2,4,4]')}, s32[2])", "f32[2,4,4]", "cusolver_potrf_ffi",
                            "{lower = true}"), spd, "lapack_spotrf_ffi", "{uplo = 76 : ui8}"),
        "getrf": (_cusolver(f"({col('f32[2,4,4]')}, s32[2,4], s32[2])", "f32[2,4,4]",
                            "cusolver_getrf_ffi"), a, "lapack_sgetrf_ffi", "{}"),
        "geqrf": (_cusolver(f"({col('f32[2,4,4]')}, f32[2,4])", "f32[2,4,4]", "cusolver_geqrf_ffi"),
                  a, "lapack_sgeqrf_ffi", "{}"),
    }
    for name, (text, x, lapack_target, lapack_config) in cases.items():
        got = _run(text, x)
        for g, e in zip(got, evaluate(parse_hlo(text), x)):
            _close(g, e, 1e-4)
        as_lapack = text.replace(text[text.index("custom_call_target"):].split(",")[0],
                                 f'custom_call_target="{lapack_target}"')
        as_lapack = as_lapack.rsplit("backend_config=", 1)[0] + f"backend_config={lapack_config}\n}}\n"
        for g, w in zip(got, run_xla(as_lapack, x)):
            _close(g, w, 1e-4)


def test_cusolver_eigh_svd_and_pivots_reconstruct():
    a = _random((4, 4), np.float32)
    sym = (a + a.T).astype(np.float32)
    text = _cusolver(f"({col('f32[4,4]')}, f32[4], s32[])", "f32[4,4]", "cusolver_syevd_ffi",
                     "{algorithm = 0 : ui8, lower = true}")
    v, w, info = _run(text, sym)
    _close((v * w) @ v.T, sym, 1e-4)
    assert info == 0
    text = _cusolver(f"({col('f32[4,3]')}, f32[3], {col('f32[4,4]')}, {col('f32[3,3]')}, s32[])",
                     "f32[4,3]", "cusolver_gesvdj_ffi", "{compute_uv = true, full_matrices = true}")
    b = a[:, :3].copy()
    _, s, u, v, info = _run(text, b)
    _close((u[:, :3] * s) @ v.T, b, 1e-4)  # the fourth output holds V
    # "econ" results of a wide matrix: U [3,3], V [5,3]
    text = _cusolver(f"({col('f32[3,5]')}, f32[3], {col('f32[3,3]')}, {col('f32[5,3]')}, s32[])",
                     "f32[3,5]", "cusolver_gesvdj_ffi", "{compute_uv = true, full_matrices = false}")
    wide = _random((3, 5), np.float32)
    _, s, u, v, info = _run(text, wide)
    _close((u * s) @ v.T, wide, 1e-4)
    pivots = np.array([[3, 1, 2, 3], [0, 1, 2, 3]], np.int32)
    text = _module("  p = s32[2,4] parameter(0)\n",
                   's32[2,5] custom-call(p), custom_call_target="cu_lu_pivots_to_permutation", '
                   "api_version=API_VERSION_TYPED_FFI, backend_config={}")
    (perm,) = _run(text, pivots)
    np.testing.assert_array_equal(perm, evaluate(parse_hlo(text), pivots)[0])
    np.testing.assert_array_equal(perm[0], [3, 1, 2, 0, 4])


def test_library_call_in_a_while_body():
    text = ("HloModule m\ncond {\n  s = (s32[], c64[2,8]) parameter(0)\n"
            "  i = s32[] get-tuple-element(s), index=0\n  k = s32[] constant(3)\n"
            "  ROOT c = pred[] compare(i, k), direction=LT\n}\n"
            "body {\n  s = (s32[], c64[2,8]) parameter(0)\n  i = s32[] get-tuple-element(s), index=0\n"
            "  v = c64[2,8] get-tuple-element(s), index=1\n  one = s32[] constant(1)\n"
            "  j = s32[] add(i, one)\n  f = c64[2,8] fft(v), fft_type=FFT, fft_length={8}\n"
            "  h = c64[2,8] constant({{(0.25,0),(0.25,0),(0.25,0),(0.25,0),(0.25,0),(0.25,0),(0.25,0),(0.25,0)},"
            "{(0,0.25),(0,0.25),(0,0.25),(0,0.25),(0,0.25),(0,0.25),(0,0.25),(0,0.25)}})\n"
            "  w = c64[2,8] multiply(f, h)\n"
            "  ROOT t = (s32[], c64[2,8]) tuple(j, w)\n}\n"
            "ENTRY e {\n  x = c64[2,8] parameter(0)\n  z = s32[] constant(0)\n"
            "  t = (s32[], c64[2,8]) tuple(z, x)\n"
            "  w = (s32[], c64[2,8]) while(t), condition=cond, body=body\n"
            "  ROOT r = c64[2,8] get-tuple-element(w), index=1\n}\n")
    x = _random((2, 8), np.complex64)
    (got,), (want,) = _run(text, x), run_xla(text, x)
    _close(got, want, 1e-4)


def test_compile_report_and_check_list_the_library_calls():
    text = (HLO_DIR / "qr.after.hlo").read_text()
    module = parse_hlo(text)
    sites = library_call_sites(module)
    assert [(s.routine, s.target) for s in sites] == [("qr", "lapack_sgeqrf_ffi"),
                                                       ("householder_product", "lapack_sorgqr_ffi")]
    report = build_report(compile_hlo(text), device=None)
    assert [(c.routine, c.torch_call) for c in report.library_calls] == [
        ("qr", "torch.geqrf"), ("householder_product", "torch.linalg.householder_product")]
    assert report.to_json()["summary"]["library_calls"] == 2
    assert "library call geqrf.0 (computation main.2): qr (lapack_sgeqrf_ffi) via torch.geqrf" \
        in render_text(report)
