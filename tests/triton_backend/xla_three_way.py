"""One HLO module three ways: XLA through jax (``xla_oracle``), the reference evaluator and
``compile_hlo`` under the interpreter; the tests of batched gathers, variadic scatters,
select-and-scatter, multi-output fusions of several shapes, pred arithmetic, scalar forms and
single-device collectives share it."""
from __future__ import annotations

import numpy as np

from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo
from tests.conformance.xla_oracle import run_xla
from triton_backend import compile_hlo
from triton_backend.host.input_validation import tensor_from_numpy, tensor_to_numpy


def flat(result) -> tuple:
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


def _comparable(x) -> np.ndarray:
    """Narrow floats (ml_dtypes bf16, f8) as f64, which ``assert_allclose`` can subtract."""
    x = np.asarray(x)
    return x.astype(np.float64) if x.dtype.kind == "V" else x


def run_compiled(text: str, *arrays: np.ndarray, compiled=None) -> tuple[np.ndarray, ...]:
    """``compile_hlo(text)`` (or ``compiled``) on ``arrays``, each moved as its parameter's HLO
    type (bf16 travels as ml_dtypes); the outputs as NumPy arrays."""
    compiled = compiled if compiled is not None else compile_hlo(text)
    parameters = compiled.source_module.entry.parameters
    tensors = [tensor_from_numpy(np.asarray(a), p.shape.dtype) for a, p in zip(arrays, parameters)]
    return tuple(tensor_to_numpy(t) for t in flat(compiled(*tensors)))


def compare_three_ways(text: str, *arrays: np.ndarray, rtol: float = 1e-5, atol: float = 1e-6,
                       xla_text: str | None = None):
    """Run ``text`` on ``arrays`` with XLA (``xla_text`` when XLA must run another form of
    the same program), the evaluator and ``compile_hlo``; assert all three agree and return
    the compiled module."""
    want = run_xla(xla_text or text, *arrays)
    evaluated = flat(evaluate(parse_hlo(text), *arrays))
    compiled = compile_hlo(text)
    got = run_compiled(text, *arrays, compiled=compiled)
    assert len(want) == len(evaluated) == len(got)
    for k, (w, e, g) in enumerate(zip(want, evaluated, got)):
        assert w.shape == np.shape(e) == g.shape, (k, w.shape, np.shape(e), g.shape)
        assert np.asarray(e).dtype == g.dtype == w.dtype, (k, w.dtype, np.asarray(e).dtype, g.dtype)
        w, e, g = _comparable(w), _comparable(e), _comparable(g)
        np.testing.assert_allclose(e, w, rtol=rtol, atol=atol, err_msg=f"evaluator, output {k}")
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"kernel, output {k}")
    return compiled
