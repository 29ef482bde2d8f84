"""The evaluator on real JAX-generated HLO: the seed's GELU against NumPy in bf16 semantics, and
each corpus case's plain and optimized modules against each other and against NumPy."""
from __future__ import annotations

import pathlib

import ml_dtypes
import numpy as np
import pytest

from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo

ROOT = pathlib.Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests" / "data" / "hlo"
BF16 = ml_dtypes.bfloat16
CASES = sorted(p.name[: -len(".before.hlo")] for p in CORPUS.glob("*.before.hlo"))


def _bf16_gelu(x: np.ndarray) -> np.ndarray:
    """The seed's GELU, one NumPy op at a time, each computed in f32 and rounded to bf16."""
    def r(v):
        return np.asarray(v, np.float32).astype(BF16)

    c05, c1, c2, c3 = (r(np.float32(v)) for v in (0.5, 1, 0.79785, 0.044708))
    f = lambda v: v.astype(np.float32)  # noqa: E731
    square = r(f(x) * f(x))
    cube = r(f(square) * f(x))
    m3 = r(f(cube) * f(c3))
    a1 = r(f(x) + f(m3))
    m2 = r(f(a1) * f(c2))
    t = r(np.tanh(f(m2)))
    a0 = r(f(t) + f(c1))
    m1 = r(f(a0) * f(c05))
    return r(f(x) * f(m1))


def test_seed_gelu_matches_numpy_bf16():
    module = parse_hlo((ROOT / "examples" / "gelu.hlo").read_text())
    x = np.random.default_rng(0).standard_normal((6, 512, 4096), np.float32).astype(BF16)
    (got,) = evaluate(module, x)
    assert got.dtype == BF16 and got.shape == (6, 512, 4096)
    want = _bf16_gelu(x)
    np.testing.assert_array_equal(got.view(np.uint16), want.view(np.uint16))


def _inputs(module, seed: int):
    rng = np.random.default_rng(seed)
    out = []
    for p in module.entry.parameters:
        dtype = p.shape.element_type.numpy_dtype()
        if dtype.kind in "iu":
            out.append(rng.integers(-3 if dtype.kind == "i" else 0, 6, p.shape.dims).astype(dtype))
        elif dtype == np.bool_:
            out.append(rng.integers(0, 2, p.shape.dims).astype(bool))
        else:
            out.append(rng.standard_normal(p.shape.dims).astype(dtype))
    return out


@pytest.mark.parametrize("case", CASES)
def test_corpus_plain_and_optimized_agree(case):
    before = parse_hlo((CORPUS / f"{case}.before.hlo").read_text())
    after = parse_hlo((CORPUS / f"{case}.after.hlo").read_text())
    args = _inputs(before, sum(case.encode()))
    got_before = evaluate(before, *args)
    got_after = evaluate(after, *args)
    assert len(got_before) == len(got_after)
    for b, a in zip(got_before, got_after):
        assert b.shape == a.shape and b.dtype == a.dtype
        if b.dtype.kind in "biu":
            np.testing.assert_array_equal(a, b)
        else:
            # Optimized HLO may fuse away bf16 roundings and reorder reductions.
            rtol = 2e-2 if b.dtype == BF16 else 1e-5
            wide = np.complex128 if b.dtype.kind == "c" else np.float64
            np.testing.assert_allclose(a.astype(wide), b.astype(wide), rtol=rtol, atol=rtol)


NUMPY_TRUTH = {
    "softmax": lambda x: [np.exp(x - x.max(-1, keepdims=True))
                          / np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True)],
    "matmul": lambda a, b: [a @ b],
    "transpose": lambda x: [np.transpose(x, (2, 0, 1)) + 1],
    "reductions": lambda x: [x.sum(0), x.max(1), x.argmax(1)],
    "cumsum": lambda x: [np.cumsum(x, axis=1)],
    "sort": lambda x: [np.sort(x, axis=-1)],
    "reverse": lambda x: [x[::-1, ::-1]],
    "gather": lambda x, i: [x[np.where(i < 0, i + 6, i)]],
}


@pytest.mark.parametrize("case", sorted(NUMPY_TRUTH))
@pytest.mark.parametrize("phase", ["before", "after"])
def test_corpus_against_numpy(case, phase):
    module = parse_hlo((CORPUS / f"{case}.{phase}.hlo").read_text())
    args = _inputs(module, 7)
    if case == "gather":
        args[1] = np.array([4, -1, 5], np.int32)
    got = evaluate(module, *args)
    for g, w in zip(got, NUMPY_TRUTH[case](*args), strict=True):
        np.testing.assert_allclose(g.astype(np.float64), np.asarray(w, np.float64), rtol=1e-5,
                                   atol=1e-6)
