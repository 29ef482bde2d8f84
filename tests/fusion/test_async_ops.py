"""``async-start`` / ``async-update`` / ``async-done``: XLA's asynchronous pair around a
wrapped computation.  Verified and evaluated as the call they run, rewritten into that call
for the compiler (``transforms.async_unwrapping``), compiled and differentiated."""
from __future__ import annotations

import numpy as np
import pytest

from fusion.autodiff import vjp
from fusion.errors import HloVerifyError
from fusion.evaluator import evaluate
from fusion.shapes.verifier import verify_module
from fusion.text.parser import parse_hlo
from fusion.text.printer import print_hlo
from fusion.transforms.async_unwrapping import unwrap_async_calls

WRAPPED = """HloModule m
wrapped {
  p = f32[8,16] parameter(0)
  q = f32[8,16] parameter(1)
  s = f32[8,16] sine(p)
  ROOT m = f32[8,16] multiply(s, q)
}
ENTRY e {
  x = f32[8,16] parameter(0)
  y = f32[8,16] parameter(1)
  start = ((f32[8,16], f32[8,16]), f32[8,16], s32[]) async-start(x, y), calls=wrapped
  update = ((f32[8,16], f32[8,16]), f32[8,16], s32[]) async-update(start)
  done = f32[8,16] async-done(update)
  ROOT r = f32[8,16] add(done, x)
}
"""


def _arrays(seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((8, 16)).astype(np.float32) for _ in range(2)]


def test_the_pair_verifies_evaluates_and_prints_back():
    module = parse_hlo(WRAPPED)
    verify_module(module)
    x, y = _arrays()
    (got,) = evaluate(module, x, y)
    np.testing.assert_allclose(got, np.sin(x) * y + x, rtol=1e-6)
    assert parse_hlo(print_hlo(module)) == module


def test_the_pair_becomes_the_call_it_runs():
    unwrapped = unwrap_async_calls(parse_hlo(WRAPPED))
    assert [(i.name, i.opcode) for i in unwrapped.entry] == [
        ("x", "parameter"), ("y", "parameter"), ("done", "call"), ("r", "add")]
    x, y = _arrays(1)
    np.testing.assert_array_equal(evaluate(unwrapped, x, y)[0],
                                  evaluate(parse_hlo(WRAPPED), x, y)[0])


def test_a_start_read_whole_is_left_as_it_is():
    text = WRAPPED.replace("ROOT r = f32[8,16] add(done, x)",
                           "args = (f32[8,16], f32[8,16]) get-tuple-element(start), index=0\n"
                           "  ROOT r = (f32[8,16], (f32[8,16], f32[8,16])) tuple(done, args)")
    module = parse_hlo(text)
    verify_module(module)
    assert unwrap_async_calls(module) == module


@pytest.mark.parametrize("change, message", [
    ("async-start(x, y)", "async-start(x)"),
    ("done = f32[8,16] async-done(update)", "done = f32[8,16] async-done(x)"),
])
def test_a_malformed_pair_is_a_located_verify_error(change, message):
    text = WRAPPED.replace(change, message)
    with pytest.raises(HloVerifyError) as err:
        verify_module(parse_hlo(text))
    assert err.value.line is not None


def test_the_pair_differentiates_as_its_call():
    x, y = _arrays(2)
    ct = np.ones((8, 16), np.float32)
    dx, dy = evaluate(vjp(parse_hlo(WRAPPED)), x, y, ct)
    np.testing.assert_allclose(dx, np.cos(x) * y + 1, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dy, np.sin(x), rtol=1e-5, atol=1e-6)


def test_the_pair_compiles_to_one_kernel_matching_the_evaluator():
    import torch  # noqa: PLC0415

    from triton_backend import compile_hlo  # noqa: PLC0415

    compiled = compile_hlo(WRAPPED, cache=False)
    assert len(compiled.fusions) == 1
    x, y = _arrays(3)
    (got,) = compiled(torch.from_numpy(x), torch.from_numpy(y))
    np.testing.assert_allclose(got.numpy(), evaluate(parse_hlo(WRAPPED), x, y)[0],
                               rtol=1e-5, atol=1e-6)
