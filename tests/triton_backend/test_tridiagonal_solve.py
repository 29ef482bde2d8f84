"""``jax.lax.linalg.tridiagonal_solve``: LAPACK's ``?gtsv`` custom-call (JAX on the CPU) gives
XLA's five outputs bit for bit, the reference and the torch host rule alike; cuSPARSE's
``gtsv2`` (JAX on a GPU) solves the system a dense solve solves.  Both were refused before."""
from __future__ import annotations

import numpy as np
import pytest

from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo
from fusion.text.stablehlo import stablehlo_to_hlo
from tests.conformance.xla_oracle import run_xla
from tests.triton_backend.xla_three_way import run_compiled
from triton_backend import compile_hlo

jax = pytest.importorskip("jax")
from jax import export  # noqa: E402

LETTER = {"f32": "s", "f64": "d", "c64": "c", "c128": "z"}


def gtsv_module(dtype: str, batch: tuple[int, ...], n: int, k: int) -> str:
    """The custom-call JAX's CPU lowering writes, returning all five outputs."""
    dims = ",".join(map(str, batch + (n,)))
    vec = f"{dtype}[{dims}]{{{','.join(map(str, reversed(range(len(batch) + 1))))}}}"
    rank = len(batch) + 2
    col = ",".join(map(str, [rank - 2, rank - 1] + list(reversed(range(rank - 2)))))
    mat = f"{dtype}[{dims},{k}]{{{col}}}"
    info = f"s32[{','.join(map(str, batch))}]"
    return (f"HloModule m\nENTRY e {{\n  dl = {vec} parameter(0)\n  d = {vec} parameter(1)\n"
            f"  du = {vec} parameter(2)\n  b = {mat} parameter(3)\n"
            f"  ROOT r = ({vec}, {vec}, {vec}, {mat}, {info}) custom-call(dl, d, du, b), "
            f'custom_call_target="lapack_{LETTER[dtype]}gtsv_ffi", operand_layout_constraints='
            f"{{{vec}, {vec}, {vec}, {mat}}}, api_version=API_VERSION_TYPED_FFI, "
            "backend_config={}\n}\n")


def _system(dtype, batch, n, k, seed, singular=False):
    rng = np.random.default_rng(seed)
    real = np.float64 if dtype in ("f64", "c128") else np.float32

    def draw(*shape):
        x = rng.standard_normal(shape).astype(real)
        return x + 1j * rng.standard_normal(shape).astype(real) if dtype[0] == "c" else x

    dl, d, du, b = draw(*batch, n), draw(*batch, n), draw(*batch, n), draw(*batch, n, k)
    if singular:  # a zero pivot in the first matrix: row 2 and below hold no information
        dl[(0,) * len(batch)][1:3] = 0
        d[(0,) * len(batch)][1] = 0
    return [np.asarray(a) for a in (dl, d, du, b)]


@pytest.mark.parametrize("dtype,batch,n,k,singular", [
    ("f32", (2,), 6, 3, False), ("f32", (2,), 6, 3, True), ("f64", (), 9, 1, False),
    ("f64", (), 9, 1, True), ("f32", (2, 3), 1, 2, False), ("f32", (3,), 2, 1, False),
    ("c64", (2,), 5, 2, False), ("c64", (2,), 5, 2, True)])
def test_lapack_gtsv_gives_xlas_five_outputs(dtype, batch, n, k, singular):
    text = gtsv_module(dtype, batch, n, k)
    args = _system(dtype, batch, n, k, seed=n * 7 + k, singular=singular)
    want = run_xla(text, *args)
    got = evaluate(parse_hlo(text), *args)
    ran = run_compiled(text, *args)
    assert (want[4] != 0).any() == singular
    for w, g, r in zip(want, got, ran):
        if dtype[0] == "c":  # Fortran's complex division is not NumPy's
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(r, w, rtol=1e-5, atol=1e-5)
        else:
            np.testing.assert_array_equal(g, w)
            np.testing.assert_array_equal(r, w)


def _lowered(platform: str, batch=(2,), n=7, k=3) -> str:
    fn = jax.jit(lambda dl, d, du, b: jax.lax.linalg.tridiagonal_solve(dl, d, du, b))
    s = jax.ShapeDtypeStruct
    f32 = np.float32
    return export.export(fn, platforms=[platform])(
        s(batch + (n,), f32), s(batch + (n,), f32), s(batch + (n,), f32),
        s(batch + (n, k), f32)).mlir_module()


def test_jaxs_gpu_form_solves_what_a_dense_solve_solves():
    text = _lowered("cuda")
    assert "cusparse_gtsv2_ffi" in text
    dl, d, du, b = _system("f32", (2,), 7, 3, seed=5)
    d = d + 4 * np.sign(d)  # diagonally dominant: well conditioned
    dl[:, 0] = du[:, -1] = 0
    a = np.zeros((2, 7, 7), np.float64)
    for m in range(2):
        a[m] = np.diag(d[m]) + np.diag(dl[m, 1:], -1) + np.diag(du[m, :-1], 1)
    want = np.linalg.solve(a, b.astype(np.float64))
    compiled = compile_hlo(text)
    (x,) = run_compiled(text, dl, d, du, b, compiled=compiled)
    np.testing.assert_allclose(x, want, rtol=1e-5, atol=1e-5)
    (ref,) = evaluate(compiled.source_module, dl, d, du, b)
    np.testing.assert_array_equal(x, ref)


def test_jaxs_cpu_form_matches_xla_singular_rows_included():
    text = _lowered("cpu")
    args = _system("f32", (2,), 7, 3, seed=9, singular=True)
    want = run_xla(stablehlo_to_hlo(text), *args)
    (got,) = run_compiled(text, *args)
    np.testing.assert_array_equal(got, want[0])  # JAX's NaN where LAPACK found a zero pivot
    assert np.isnan(got[0]).all() and np.isfinite(got[1]).all()
