"""``vjp`` of every floating-point program of the HLO corpus against ``jax.vjp`` of the JAX
function the corpus was generated from, for the plain and the optimized HLO: the backward
module evaluated by the reference evaluator, and (plain HLO) run by XLA itself.  The programs
``jax.grad`` cannot differentiate are checked against finite differences instead."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

jax = pytest.importorskip("jax")

from fusion.autodiff import vjp  # noqa: E402
from fusion.evaluator import evaluate  # noqa: E402
from fusion.text.parser import parse_hlo  # noqa: E402
from fusion.text.printer import print_hlo  # noqa: E402
from tests.conformance.xla_oracle import run_xla  # noqa: E402
from tests.fusion.autodiff.corpus_functions import CORPUS, load_cases  # noqa: E402
from tests.fusion.autodiff.finite_differences import check_directional_derivatives  # noqa: E402

CASES = load_cases()
# jax.vjp refuses these ("Reverse-mode differentiation does not work for lax.while_loop ...
# with dynamic start/stop values"); fusion.autodiff unrolls the loop, whose trip count the HLO
# shows.
JAX_CANNOT_DIFFERENTIATE = {"while_dynamic_slice"}
BF16 = np.dtype(ml_dtypes.bfloat16)


def _is_float_dtype(dtype) -> bool:
    return np.dtype(dtype).kind == "f" or np.dtype(dtype) == BF16


def _is_float(a) -> bool:
    return _is_float_dtype(np.asarray(a).dtype)


def _is_inexact(a) -> bool:
    """Floats and complex values: what ``vjp`` differentiates by default."""
    return _is_float(a) or np.asarray(a).dtype.kind == "c"


def _cotangent(rng, out: np.ndarray) -> np.ndarray:
    """A random cotangent; a complex output's in JAX's (unconjugated) convention."""
    if out.dtype.kind == "c":
        parts = rng.standard_normal((2, *out.shape))
        return (parts[0] + 1j * parts[1]).astype(out.dtype)
    return rng.standard_normal(out.shape).astype(out.dtype) if _is_float(out) else \
        np.zeros(out.shape, out.dtype)


# The library calls (fft, topk and the LAPACK custom-calls) have VJP rules
# (fusion/autodiff/rules_library.py), as does select-and-scatter (a max-pool gradient,
# differentiated again): every corpus program with a float input is differentiated.
DIFFERENTIABLE = sorted(name for name, (_, args) in CASES.items()
                        if any(_is_float(a) for a in args))


def _inputs(args, rng):
    """Random floats (no ties for sort, max and median) and the generator's integers."""
    out = []
    for a in args:
        a = np.asarray(a)
        out.append(rng.standard_normal(a.shape).astype(a.dtype) if _is_float(a) else a)
    return out


#: (program, inputs, cotangents) -> jax.vjp's gradients: the plain and the optimized HLO of a
#: program are checked against the same gradients (same inputs), which JAX computes once.
_JAX_VJPS: dict = {}


def _key(arrays) -> tuple:
    return tuple((a.dtype, a.shape, a.tobytes()) for a in map(np.asarray, arrays))


def _jax_vjp(name, fn, inputs, cotangents):
    """``jax.vjp`` with respect to the float inputs (integers held fixed), under ``jax.jit``
    (one XLA compile instead of one per primitive); memoized per program and arrays."""
    key = (name, _key(inputs), _key(cotangents))
    if key not in _JAX_VJPS:
        _JAX_VJPS[key] = _jitted_jax_vjp(fn, inputs, cotangents)
    return _JAX_VJPS[key]


def _jitted_jax_vjp(fn, inputs, cotangents):
    positions = [k for k, a in enumerate(inputs) if _is_inexact(a)]

    def of_floats(*floats):
        full = list(inputs)
        for k, v in zip(positions, floats):
            full[k] = v
        return fn(*full)

    def gradients(floats, cotangents):
        out, pullback = jax.vjp(of_floats, *floats)
        leaves, tree = jax.tree.flatten(out)
        cts = [c if jax.numpy.issubdtype(leaf.dtype, jax.numpy.inexact)
               else np.zeros(np.shape(leaf), jax.dtypes.float0)
               for c, leaf in zip(cotangents, leaves)]
        return pullback(jax.tree.unflatten(tree, cts))

    with jax.enable_x64(True):
        floats = [np.asarray(inputs[k]) for k in positions]
        return [np.asarray(g) for g in jax.jit(gradients)(floats, list(cotangents))]


def _tolerance(dtype) -> float:
    dtype = np.dtype(dtype)
    return 3e-2 if dtype == BF16 else 2e-5 if dtype in (np.float32, np.complex64) else 1e-9


@pytest.mark.parametrize("stage", ["before", "after"])
@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_vjp_matches_jax(name: str, stage: str) -> None:
    fn, args = CASES[name]
    module = parse_hlo((CORPUS / f"{name}.{stage}.hlo").read_text())
    rng = np.random.default_rng(7)
    inputs = _inputs(args, rng)
    if name in JAX_CANNOT_DIFFERENTIATE:
        check_directional_derivatives(module, inputs, eps=1e-2, rtol=1e-3)
        return
    outputs = evaluate(module, *inputs)
    cotangents = [_cotangent(rng, o) for o in outputs]
    backward = vjp(module)
    got = evaluate(backward, *inputs, *cotangents)
    want = _jax_vjp(name, fn, inputs, cotangents)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        tol = _tolerance(g.dtype)
        wide = np.complex128 if g.dtype.kind == "c" else np.float64
        np.testing.assert_allclose(g.astype(wide), w.astype(wide),
                                   rtol=tol, atol=tol * max(1.0, np.abs(w).max()))
    if stage == "before":
        # XLA parses, compiles and runs the printed backward module to the same gradients.
        from_xla = run_xla(print_hlo(backward), *inputs, *cotangents)
        for g, x in zip(got, from_xla):
            tol = _tolerance(g.dtype)
            wide = np.complex128 if g.dtype.kind == "c" else np.float64
            np.testing.assert_allclose(np.asarray(x, wide), g.astype(wide),
                                       rtol=tol, atol=tol * max(1.0, np.abs(g).max()))
