"""Complex numbers in kernels: fusions over ``c64``/``c128`` run as their expansion into real
and imaginary parts (``fusion.transforms.complex_expansion``), against XLA running the same HLO text and
against the reference evaluator."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from fusion.transforms.complex_expansion import expand_complex_fusion
from fusion.errors import UnsupportedOpError
from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo
from fusion.shapes.verifier import verify_module
from triton_backend import compile_hlo

pytest.importorskip("jax")
from tests.conformance.xla_oracle import run_xla  # noqa: E402

RNG = np.random.default_rng(64)
ADD = {t: (f"add_{t} {{\n  a = {t}[] parameter(0)\n  b = {t}[] parameter(1)\n"
           f"  ROOT s = {t}[] add(a, b)\n}}\n") for t in ("c64", "c128", "f32")}


def _complex(shape, dtype=np.complex64):
    return (RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)).astype(dtype)


def _check(text: str, *arrays, tol: float = 2e-5) -> None:
    """compile_hlo (fused, then unfused: one-op fusions) against XLA and the evaluator."""
    want = run_xla(text, *arrays)
    reference = evaluate(parse_hlo(text), *arrays)
    for fuse in (True, False):
        got = compile_hlo(text, fuse=fuse)(*[torch.from_numpy(a) for a in arrays])
        assert len(got) == len(want)
        for g, w, r in zip(got, want, reference):
            g = g.numpy()
            assert g.dtype == w.dtype == r.dtype and g.shape == w.shape
            scale = max(1.0, float(np.abs(w).max()))
            if w.dtype.kind == "b":
                np.testing.assert_array_equal(g, w)
                np.testing.assert_array_equal(r, w)
                continue
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol * scale)
            np.testing.assert_allclose(r, w, rtol=tol, atol=tol * scale)


def _binary(op: str, t: str = "c64", out: str | None = None, attrs: str = "") -> str:
    return (f"HloModule m\nENTRY e {{\n  x = {t}[3,5] parameter(0)\n  y = {t}[3,5] parameter(1)\n"
            f"  ROOT r = {out or t}[3,5] {op}(x, y){attrs}\n}}\n")


@pytest.mark.parametrize("op", ["add", "subtract", "multiply", "divide"])
@pytest.mark.parametrize("t, dtype", [("c64", np.complex64), ("c128", np.complex128)])
def test_binary_arithmetic(op, t, dtype):
    x, y = _complex((3, 5), dtype), _complex((3, 5), dtype)
    y[0, 0], y[0, 1], y[1, 0] = 2, 3j, -0.5 + 1e-3j  # both branches of Smith's division
    _check(_binary(op, t), x, y, tol=2e-5 if t == "c64" else 1e-12)


def _ops_module(ops: list[tuple[str, str]], t: str, dims: str, binary: bool = False) -> str:
    """One module applying each ``(op, result type)`` to ``x`` (and ``y``): one compile for
    them all."""
    args = "x, y" if binary else "x"
    body = [f"  x = {t}[{dims}] parameter(0)"]
    body += [f"  y = {t}[{dims}] parameter(1)"] if binary else []
    body += [f"  r{k} = {out}[{dims}] {op}({args})" for k, (op, out) in enumerate(ops)]
    shapes = ", ".join(f"{out}[{dims}]" for _, out in ops)
    names = ", ".join(f"r{k}" for k in range(len(ops)))
    root = f"  ROOT t = ({shapes}) tuple({names})"
    return "HloModule m\nENTRY e {\n" + "\n".join(body + [root]) + "\n}\n"


@pytest.mark.parametrize("t, dtype", [("c64", np.complex64), ("c128", np.complex128)])
def test_power_and_atan2(t, dtype):
    x, y = _complex((3, 5), dtype), _complex((3, 5), dtype)
    x[0, 0], y[0, 0] = 0, 0.5  # 0^y
    _check(_ops_module([("power", t), ("atan2", t)], t, "3,5", binary=True), x, y,
           tol=2e-5 if t == "c64" else 1e-12)


#: Each complex unary op the kernels expand, and its result type.
_UNARY = [("negate", "c64"), ("abs", "f32"), ("exponential", "c64"), ("sqrt", "c64"),
          ("real", "f32"), ("imag", "f32"), ("sign", "c64"), ("log", "c64"),
          ("log-plus-one", "c64"), ("rsqrt", "c64"), ("exponential-minus-one", "c64"),
          ("sine", "c64"), ("cosine", "c64"), ("tan", "c64"), ("tanh", "c64")]


def test_unary():
    x = _complex((4, 6))
    x[0, :4] = [0.5, -4, 3j, -2 - 0j]  # sqrt's branches
    _check(_ops_module(_UNARY, "c64", "4,6"), x)


def test_complex_conjugate_compare_select_and_convert():
    # conj(x) as JAX emits it, EQ/NE, select, f32 -> c64 and c64 -> c128 conversions.
    text = ("HloModule m\nENTRY e {\n  x = c64[2,4] parameter(0)\n  y = c64[2,4] parameter(1)\n"
            "  f = f32[2,4] parameter(2)\n"
            "  re = f32[2,4] real(x)\n  im = f32[2,4] imag(x)\n  ni = f32[2,4] negate(im)\n"
            "  conj = c64[2,4] complex(re, ni)\n"
            "  eq = pred[2,4] compare(x, y), direction=EQ\n"
            "  ne = pred[2,4] compare(conj, x), direction=NE\n"
            "  fc = c64[2,4] convert(f)\n  s = c64[2,4] select(ne, conj, fc)\n"
            "  w = c128[2,4] convert(s)\n"
            "  ROOT t = (c64[2,4], pred[2,4], pred[2,4], c128[2,4]) tuple(conj, eq, ne, w)\n}\n")
    x, y = _complex((2, 4)), _complex((2, 4))
    y[0] = x[0]
    x[1, 0] = 2.0  # real: conj(x) == x
    _check(text, x, y, RNG.standard_normal((2, 4)).astype(np.float32))


def test_data_movement_and_constants():
    text = ("HloModule m\nENTRY e {\n  x = c64[2,3] parameter(0)\n"
            "  t = c64[3,2] transpose(x), dimensions={1,0}\n"
            "  c = c64[3,2] constant({{(1,2),(3,-4)},{(0,1),(-1,0)},{(0.5,0.5),(2,0)}})\n"
            "  m = c64[3,2] multiply(t, c)\n  s = c64[3,1] slice(m), slice={[0:3],[1:2]}\n"
            "  k = c64[3,3] concatenate(t, s), dimensions={1}\n"
            "  ROOT r = c64[3,3] transpose(k), dimensions={1,0}\n}\n")
    _check(text, _complex((2, 3)))


@pytest.mark.parametrize("t, dtype, dims", [("c64", np.complex64, "1"), ("c128", np.complex128, "0,1")])
def test_reduce_add(t, dtype, dims):
    out = "c64[3]" if dims == "1" else "c128[]"
    text = ("HloModule m\n" + ADD[t] + f"ENTRY e {{\n  x = {t}[3,7] parameter(0)\n"
            f"  y = {t}[3,7] multiply(x, x)\n  z = {t}[] constant((0, 0))\n"
            f"  ROOT r = {out} reduce(y, z), dimensions={{{dims}}}, to_apply=add_{t}\n}}\n")
    _check(text, _complex((3, 7), dtype), tol=2e-5 if t == "c64" else 1e-12)


def test_mixed_outputs_and_a_real_reduction_of_complex_magnitudes():
    text = ("HloModule m\n" + ADD["f32"] + "ENTRY e {\n  x = c64[4,8] parameter(0)\n"
            "  a = f32[4,8] abs(x)\n  z = f32[] constant(0)\n"
            "  n = f32[4] reduce(a, z), dimensions={1}, to_apply=add_f32\n"
            "  e = c64[4,8] exponential(x)\n"
            "  ROOT t = (f32[4], c64[4,8]) tuple(n, e)\n}\n")
    _check(text, _complex((4, 8)))


def test_expansion_is_valid_hlo_with_pairs_of_operands_and_outputs():
    module = parse_hlo("HloModule m\n" + ADD["c64"] + "fc {\n  a = c64[4] parameter(0)\n"
                       "  b = f32[4] parameter(1)\n  c = c64[4] convert(b)\n"
                       "  m = c64[4] multiply(a, c)\n  z = c64[] constant((0, 0))\n"
                       "  r = c64[] reduce(m, z), dimensions={0}, to_apply=add_c64\n"
                       "  ROOT t = (c64[], f32[4]) tuple(r, b)\n}\n"
                       "ENTRY e {\n  x = c64[4] parameter(0)\n  y = f32[4] parameter(1)\n"
                       "  ROOT f = (c64[], f32[4]) fusion(x, y), kind=kLoop, calls=fc\n}\n")
    expansion = expand_complex_fusion(module, module.entry.root)
    verify_module(expansion.module)
    assert expansion.operands == (True, False) and expansion.outputs == (True, False)
    assert [str(p.shape) for p in expansion.module.entry.parameters] == ["f32[4]", "f32[4]", "f32[4]"]
    assert str(expansion.fusion.shape) == "(f32[], f32[], f32[4])"


def test_a_complex_op_without_an_expansion_is_refused_located():
    text = ("HloModule m\nENTRY e {\n  x = c64[4] parameter(0)\n"
            "  ROOT r = c64[4] cbrt(x)\n}\n")
    with pytest.raises(UnsupportedOpError, match="no expansion into real parts") as info:
        compile_hlo(text)
    assert (info.value.line, info.value.column) == (4, 3)


_SPECIAL = np.array([0, complex(-0.0, 0), 1, -1, 1j, -1j, np.inf, -np.inf, complex(np.inf, 1),
                     complex(1, np.nan), complex(np.nan, np.nan), complex(0, np.inf), 3 - 4j,
                     complex(-0.0, -0.0)], np.complex64)


def _same_with_nans(got: np.ndarray, want: np.ndarray) -> None:
    for part in (np.real, np.imag):
        g, w = part(got), part(want)
        assert np.array_equal(np.isnan(g), np.isnan(w)), (got, want)
        np.testing.assert_allclose(g[~np.isnan(g)], w[~np.isnan(w)], rtol=1e-6)


def test_division_by_zero_and_infinity_as_xla():
    # XLA's C99 corner cases (signed zero divisors, infinite parts), in kernels and evaluator.
    n = len(_SPECIAL)
    x, y = np.repeat(_SPECIAL, n), np.tile(_SPECIAL, n)
    text = (f"HloModule m\nENTRY e {{\n  x = c64[{n * n}] parameter(0)\n  y = c64[{n * n}] parameter(1)\n"
            f"  ROOT r = c64[{n * n}] divide(x, y)\n}}\n")
    (want,) = run_xla(text, x, y)
    (got,) = compile_hlo(text)(torch.from_numpy(x), torch.from_numpy(y))
    _same_with_nans(got.numpy(), want)
    _same_with_nans(evaluate(parse_hlo(text), x, y)[0], want)


#: Ops whose special values the evaluator (NumPy, C99's Annex G) gives as XLA does; the
#: kernels give XLA's for all.
_EVALUATOR_SPECIALS_AS_XLA = ("abs", "exponential", "sqrt")


def test_unary_special_values_as_xla():
    ops = [(op, out) for op, out in _UNARY if op not in ("negate", "real", "imag")]
    text = _ops_module(ops, "c64", str(len(_SPECIAL)))
    want = run_xla(text, _SPECIAL)
    got = compile_hlo(text)(torch.from_numpy(_SPECIAL))
    reference = evaluate(parse_hlo(text), _SPECIAL)
    for (op, _), g, w, r in zip(ops, got, want, reference, strict=True):
        _same_with_nans(g.numpy().astype(np.complex64), w.astype(np.complex64))
        if op in _EVALUATOR_SPECIALS_AS_XLA:
            _same_with_nans(r.astype(np.complex64), w.astype(np.complex64))
