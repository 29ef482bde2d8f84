"""Central finite differences of a module, with the reference evaluator: the independent
truth the VJP rules are checked against."""
from __future__ import annotations

from typing import Sequence

import numpy as np

from fusion.autodiff import vjp
from fusion.evaluator import evaluate
from fusion.ir.hlo_module import HloModule


def _inner(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> float:
    """The pairing the cotangents follow: ``real(sum(a * b))``, unconjugated on complex
    values as in JAX's convention (``fusion.autodiff.cotangents``)."""
    return float(sum(np.real(np.sum(x.astype(np.complex128) * y.astype(np.complex128)))
                     for x, y in zip(a, b)))


def _cotangent(rng: np.random.Generator, out: np.ndarray) -> np.ndarray:
    if out.dtype.kind == "c":
        parts = rng.standard_normal((2, *out.shape))
        return (parts[0] + 1j * parts[1]).astype(out.dtype)
    if out.dtype.kind == "f":
        return rng.standard_normal(out.shape).astype(out.dtype)
    return np.zeros(out.shape, out.dtype)


def check_directional_derivatives(module: HloModule, inputs: Sequence[np.ndarray],
                                  wrt: Sequence[int] | None = None, *, eps: float = 1e-6,
                                  rtol: float = 1e-6, directions: int = 2, seed: int = 0) -> None:
    """For random cotangents ``c`` and directions ``v``: ``<vjp(c), v>`` equals the central
    difference ``(<c, f(x + eps v)> - <c, f(x - eps v)>) / (2 eps)``."""
    rng = np.random.default_rng(seed)
    inputs = [np.asarray(a) for a in inputs]
    outputs = evaluate(module, *inputs)
    cotangents = [_cotangent(rng, o) for o in outputs]
    backward = vjp(module, wrt)
    if wrt is None:
        wrt = [k for k, a in enumerate(inputs) if a.dtype.kind == "f"]
    grads = evaluate(backward, *inputs, *cotangents)
    assert len(grads) == len(wrt)
    for g, k in zip(grads, wrt):
        assert g.shape == inputs[k].shape and g.dtype == inputs[k].dtype
    for _ in range(directions):
        v = [rng.standard_normal(inputs[k].shape).astype(inputs[k].dtype) for k in wrt]

        def moved(sign: float) -> float:
            shifted = list(inputs)
            for k, d in zip(wrt, v):
                shifted[k] = (inputs[k] + sign * eps * d).astype(inputs[k].dtype)
            return _inner(cotangents, evaluate(module, *shifted))

        numeric = (moved(1.0) - moved(-1.0)) / (2 * eps)
        analytic = _inner(grads, v)
        scale = max(1.0, abs(numeric), _inner(v, v) ** 0.5)
        assert abs(analytic - numeric) <= rtol * scale, (analytic, numeric)
