"""``device_lib.device_function``: the library's helpers under the interpreter skip the
re-patching of ``triton.language`` that each call of a ``@triton.jit`` helper costs, and
compute what they computed before."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from triton_backend import compile_hlo
from triton_backend.device_lib import elementwise_math
from triton_backend.device_lib.device_function import InterpretedDeviceFunction
from triton_backend.runtime.launch_mode import interpreting

pytestmark = pytest.mark.skipif(not interpreting(), reason="the interpreter's path only")

TANH = """HloModule m
ENTRY e {
  x = f32[64] parameter(0)
  t = f32[64] tanh(x)
  e = f32[64] exponential(t)
  ROOT s = f32[64] sine(e)
}
"""


def test_helpers_are_wrapped_and_keep_their_attributes():
    helper = elementwise_math.signbit
    assert isinstance(helper, InterpretedDeviceFunction)
    assert helper.fn.__name__ == "signbit"  # the InterpretedFunction's attributes show through


def test_a_launch_patches_the_language_once_and_computes_as_numpy(monkeypatch):
    from triton.runtime import interpreter

    calls = []
    real = interpreter._patch_lang
    monkeypatch.setattr(interpreter, "_patch_lang", lambda fn: calls.append(fn) or real(fn))
    x = np.linspace(-3, 3, 64, dtype=np.float32)
    (got,) = compile_hlo(TANH)(torch.from_numpy(x))
    want = np.sin(np.exp(np.tanh(x.astype(np.float64)))).astype(np.float32)
    np.testing.assert_allclose(got.numpy(), want, rtol=2e-6, atol=1e-6)
    assert len(calls) == 1, [getattr(f, "__name__", f) for f in calls]  # the kernel's launch
