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
from fusion.errors import UnsupportedOpError  # noqa: E402
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


# Library calls (fft, topk and the LAPACK custom-calls, issue 15) have no VJP rule in
# fusion.autodiff: JAX differentiates them before lowering, never the HLO op itself.
LIBRARY_CALLS = {"cholesky_solve", "eigh", "fft_filter", "lu_solve", "qr", "svd", "top_k"}
# (program, stage) -> the op without a VJP rule: select-and-scatter (a max-pool gradient
# before XLA's passes; its derivative needs the positions its select picked, which no HLO op
# gives).  The test checks the refusal; the optimized HLO (XLA rewrote the op) is differentiated.
NO_VJP_RULE = {("max_pool_grad", "before"): "select-and-scatter"}
DIFFERENTIABLE = sorted(name for name, (_, args) in CASES.items()
                        if any(_is_float(a) for a in args) and name not in LIBRARY_CALLS)


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
    positions = [k for k, a in enumerate(inputs) if _is_float(a)]

    def of_floats(*floats):
        full = list(inputs)
        for k, v in zip(positions, floats):
            full[k] = v
        return fn(*full)

    def gradients(floats, cotangents):
        out, pullback = jax.vjp(of_floats, *floats)
        leaves, tree = jax.tree.flatten(out)
        cts = [c if _is_float_dtype(leaf.dtype) else np.zeros(np.shape(leaf), jax.dtypes.float0)
               for c, leaf in zip(cotangents, leaves)]
        return pullback(jax.tree.unflatten(tree, cts))

    with jax.enable_x64(True):
        floats = [np.asarray(inputs[k]) for k in positions]
        return [np.asarray(g) for g in jax.jit(gradients)(floats, list(cotangents))]


def _tolerance(dtype) -> float:
    return 3e-2 if np.dtype(dtype) == BF16 else 2e-5 if np.dtype(dtype) == np.float32 else 1e-9


@pytest.mark.parametrize("stage", ["before", "after"])
@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_vjp_matches_jax(name: str, stage: str) -> None:
    fn, args = CASES[name]
    module = parse_hlo((CORPUS / f"{name}.{stage}.hlo").read_text())
    if (name, stage) in NO_VJP_RULE:
        with pytest.raises(UnsupportedOpError, match=f"no VJP rule for op {NO_VJP_RULE[name, stage]}"):
            vjp(module)
        return
    rng = np.random.default_rng(7)
    inputs = _inputs(args, rng)
    if name in JAX_CANNOT_DIFFERENTIATE:
        check_directional_derivatives(module, inputs, eps=1e-2, rtol=1e-3)
        return
    outputs = evaluate(module, *inputs)
    cotangents = [rng.standard_normal(o.shape).astype(o.dtype) if _is_float(o)
                  else np.zeros(o.shape, o.dtype) for o in outputs]
    backward = vjp(module)
    got = evaluate(backward, *inputs, *cotangents)
    want = _jax_vjp(name, fn, inputs, cotangents)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        tol = _tolerance(g.dtype)
        np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64),
                                   rtol=tol, atol=tol * max(1.0, np.abs(w).max()))
    if stage == "before":
        # XLA parses, compiles and runs the printed backward module to the same gradients.
        from_xla = run_xla(print_hlo(backward), *inputs, *cotangents)
        for g, x in zip(got, from_xla):
            tol = _tolerance(g.dtype)
            np.testing.assert_allclose(np.asarray(x, np.float64), g.astype(np.float64),
                                       rtol=tol, atol=tol * max(1.0, np.abs(g).max()))
