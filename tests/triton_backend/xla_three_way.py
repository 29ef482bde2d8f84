"""One HLO module three ways: XLA through jax (``xla_oracle``), the reference evaluator and
``compile_hlo`` under the interpreter; the tests of batched gathers, variadic scatters,
select-and-scatter and multi-output fusions of several shapes share it."""
from __future__ import annotations

import numpy as np
import torch

from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo
from tests.conformance.xla_oracle import run_xla
from triton_backend import compile_hlo


def flat(result) -> tuple:
    return tuple(result) if isinstance(result, (tuple, list)) else (result,)


def compare_three_ways(text: str, *arrays: np.ndarray, rtol: float = 1e-5, atol: float = 1e-6,
                       xla_text: str | None = None):
    """Run ``text`` on ``arrays`` with XLA (``xla_text`` when XLA must run another form of
    the same program), the evaluator and ``compile_hlo``; assert all three agree and return
    the compiled module."""
    want = run_xla(xla_text or text, *arrays)
    evaluated = flat(evaluate(parse_hlo(text), *arrays))
    compiled = compile_hlo(text)
    got = flat(compiled(*[torch.from_numpy(np.array(a)) for a in arrays]))
    assert len(want) == len(evaluated) == len(got)
    for k, (w, e, g) in enumerate(zip(want, evaluated, got)):
        g = g.numpy()
        assert w.shape == np.shape(e) == g.shape, (k, w.shape, np.shape(e), g.shape)
        np.testing.assert_allclose(e, w, rtol=rtol, atol=atol, err_msg=f"evaluator, output {k}")
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"kernel, output {k}")
    return compiled
