"""Arithmetic on ``pred`` as XLA defines it, run three ways (XLA on the same text, the reference
evaluator, ``compile_hlo`` under the interpreter).

XLA computes pred arithmetic as ``int8(x) op int8(y) != 0`` (``ElementalIrEmitter::
EmitPredBinaryOp``): ``add`` and ``maximum`` are or, ``multiply`` and ``minimum`` are and.
Its shape inference (``ShapeInference::InferBinaryOpShape``) refuses ``subtract``, ``divide``,
``remainder``, ``power``, ``atan2`` and the shifts on pred; here that is a located verify error
naming the op.  JAX never writes these ops on pred (``jnp.add`` of bools lowers to ``or``), so
the programs are HLO text in the style of XLA's tests, and XLA runs the same text.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from fusion.errors import HloVerifyError
from fusion.shapes.verifier import verify_module
from fusion.text.parser import parse_hlo

pytest.importorskip("jax")
from tests.conformance.xla_oracle import OracleError, compile_with_xla  # noqa: E402
from tests.triton_backend.xla_three_way import compare_three_ways  # noqa: E402

RNG = np.random.default_rng(29)
#: Every pair of truth values, four times over (and a ragged length for the kernels' masks).
A = np.tile([True, True, False, False], 9)[:35]
B = np.tile([True, False, True, False], 9)[:35]


def _binary(op: str) -> str:
    return f"""HloModule pred_{op}
ENTRY e {{
  x = pred[35] parameter(0)
  y = pred[35] parameter(1)
  ROOT z = pred[35] {op}(x, y)
}}"""


@pytest.mark.parametrize("op,meaning", [("add", np.logical_or), ("maximum", np.logical_or),
                                        ("multiply", np.logical_and),
                                        ("minimum", np.logical_and)])
def test_binary_arithmetic_on_pred_is_or_and_and(op, meaning):
    compiled = compare_three_ways(_binary(op), A, B)
    (got,) = compiled(torch.from_numpy(A), torch.from_numpy(B))
    np.testing.assert_array_equal(got.numpy(), meaning(A, B))


FUSED = """HloModule fused_pred_arithmetic
ENTRY e {
  x = f32[64,48] parameter(0)
  y = f32[64,48] parameter(1)
  zero = f32[] constant(0)
  zeros = f32[64,48] broadcast(zero), dimensions={}
  gt = pred[64,48] compare(x, y), direction=GT
  neg = pred[64,48] compare(x, zeros), direction=LT
  either = pred[64,48] add(gt, neg)
  both = pred[64,48] multiply(gt, neg)
  s = f32[64,48] select(either, x, y)
  t = f32[64,48] select(both, y, x)
  ROOT r = (f32[64,48], f32[64,48], pred[64,48], pred[64,48]) tuple(s, t, either, both)
}"""


def test_pred_arithmetic_fuses_with_compares_and_selects():
    x = RNG.standard_normal((64, 48)).astype(np.float32)
    y = RNG.standard_normal((64, 48)).astype(np.float32)
    compiled = compare_three_ways(FUSED, x, y)
    assert len(compiled.fusions) >= 1


def _reduce(op: str, init: str, cols: int) -> str:
    return f"""HloModule reduce_pred_{op}
combine {{
  a = pred[] parameter(0)
  b = pred[] parameter(1)
  ROOT c = pred[] {op}(a, b)
}}
ENTRY e {{
  x = pred[6,{cols}] parameter(0)
  init = pred[] constant({init})
  ROOT r = pred[6] reduce(x, init), dimensions={{1}}, to_apply=combine
}}"""


@pytest.mark.parametrize("cols", [7, 300])
@pytest.mark.parametrize("op,init,meaning", [("add", "false", np.any),
                                             ("multiply", "true", np.all)])
def test_a_reducer_adding_preds_is_any_and_multiplying_is_all(op, init, meaning, cols):
    x = RNG.random((6, cols)) < (0.02 if op == "add" else 0.98)
    x[0] = False
    x[1] = True
    compiled = compare_three_ways(_reduce(op, init, cols), x)
    np.testing.assert_array_equal(compiled(torch.from_numpy(x))[0].numpy(), meaning(x, axis=1))


REDUCE_WINDOW = """HloModule window_any
combine {
  a = pred[] parameter(0)
  b = pred[] parameter(1)
  ROOT c = pred[] add(a, b)
}
ENTRY e {
  x = pred[40] parameter(0)
  init = pred[] constant(false)
  ROOT r = pred[38] reduce-window(x, init), window={size=3}, to_apply=combine
}"""


def test_a_pred_add_reduce_window_is_a_sliding_any():
    x = RNG.random(40) < 0.1
    compare_three_ways(REDUCE_WINDOW, x)


@pytest.mark.parametrize("op", ["subtract", "divide", "remainder", "power", "atan2",
                                "shift-left", "shift-right-logical"])
def test_other_arithmetic_on_pred_is_a_located_error_as_in_xla(op):
    with pytest.raises(HloVerifyError) as info:
        verify_module(parse_hlo(_binary(op)))
    err = info.value
    assert (err.line, err.column, err.where) == (5, 3, "z")
    assert err.message == (f"{op} is not defined on pred operands (XLA defines add as or, "
                           "multiply as and, maximum as or, minimum as and; no other "
                           "arithmetic)")
    assert str(err).startswith(f"5:3: {op} is not defined on pred operands")
    with pytest.raises(OracleError):  # XLA refuses the program too
        compile_with_xla(_binary(op))
