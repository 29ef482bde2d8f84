"""A torch op's plain eager call on a signature it ran on before skips the dispatcher and runs
the compiled module itself; anything autograd, a transform or a tracer must see still goes
through the registered op, and results are the same either way."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from fusion.errors import EvaluationError
from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo
from triton_backend.integrations.torch_op import torch_op

TEXT = """HloModule short_path
ENTRY main {
  x = f32[6] parameter(0)
  y = f32[6] parameter(1)
  s = f32[6] multiply(x, y)
  ROOT t = (f32[6], f32[6]) tuple(s, x)
}"""

SINGLE = """HloModule short_path_single
ENTRY main {
  x = f32[3] parameter(0)
  ROOT e = f32[3] exponential(x)
}"""


class Counting:
    """Stands in for the op's ``OpOverload``, counting the calls that reach the dispatcher."""

    def __init__(self, overload):
        self.overload, self.calls = overload, 0

    def __call__(self, *args):
        self.calls += 1
        return self.overload(*args)


@pytest.fixture(scope="module")
def ops():
    return torch_op(TEXT, name="test_short_path"), torch_op(SINGLE, name="test_short_path_single")


def _counted(op):
    counting = Counting(op.op)
    op.op = counting
    op._guard = None
    return counting


def test_a_repeated_eager_call_skips_the_dispatcher_and_matches_it(ops):
    op, single = ops
    counting = _counted(op)
    x, y = torch.randn(6), torch.randn(6)
    first = op(x, y)
    second = op(x, y)
    assert counting.calls == 1
    expected = evaluate(parse_hlo(TEXT), x.numpy(), y.numpy())
    for got in (first, second):
        assert isinstance(got, tuple) and len(got) == 2
        for g, e in zip(got, expected):
            np.testing.assert_array_equal(g.numpy(), e)
    assert second[1].data_ptr() != x.data_ptr()  # a result never aliases an argument
    one = _counted(single)
    a, b = single(x[:3].contiguous()), single(x[:3].contiguous())
    assert one.calls == 1 and isinstance(b, torch.Tensor) and torch.equal(a, b)


def test_autograd_fake_tensors_and_transforms_take_the_registered_op(ops):
    op, _ = ops
    counting = _counted(op)
    x, y = torch.randn(6), torch.randn(6)
    op(x, y)
    xg = x.clone().requires_grad_()
    s, _ = op(xg, y)
    s.sum().backward()
    assert torch.allclose(xg.grad, y)
    with FakeTensorMode() as mode:
        fake = op(mode.from_tensor(x), mode.from_tensor(y))
        assert fake[0].shape == (6,)
    grad = torch.func.grad(lambda v: op(v, y)[0].sum())(x)
    assert torch.allclose(grad, y)
    assert counting.calls >= 3  # the first call, autograd's and the fake one
    before = counting.calls
    op(torch.randn(3, 2).flatten(), y)  # the remembered signature again: no dispatcher
    assert counting.calls == before


def test_a_new_signature_still_gets_the_ops_clear_error(ops):
    op, _ = ops
    op(torch.randn(6), torch.randn(6))
    with pytest.raises(EvaluationError, match=r"argument 0 \(x\) has dtype torch.float64"):
        op(torch.randn(6, dtype=torch.float64), torch.randn(6))
