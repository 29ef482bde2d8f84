"""Placement annotations (``jax.device_put(x, memory_kind="pinned_host")`` inside ``jit``,
remat policies that offload, XLA's host offloading): custom calls that say in which memory
a value lives.  On one device each is its operand (``fusion.analysis.sharding``): evaluated,
compiled and differentiated as such."""
from __future__ import annotations

import numpy as np
import pytest

from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo
from tests.fusion.autodiff.finite_differences import check_directional_derivatives

TEXT = """HloModule offload
ENTRY e {{
  x = {t}[4,6] parameter(0)
  s = {t}[4,6] sine(x)
  h = {t}[4,6] custom-call(s), custom_call_target="annotate_device_placement", frontend_attributes={{_xla_buffer_placement="pinned_host"}}
  m = {t}[4,6] custom-call(h), custom_call_target="MoveToHost"
  d = {t}[4,6] custom-call(m), custom_call_target="MoveToDevice"
  ROOT r = {t}[4,6] multiply(d, x)
}}
"""


def test_a_placement_is_its_operand():
    x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    (got,) = evaluate(parse_hlo(TEXT.format(t="f32")), x)
    np.testing.assert_allclose(got, np.sin(x) * x, rtol=1e-6)


def test_compiled_as_its_operand():
    from tests.triton_backend.xla_three_way import run_compiled
    from triton_backend import compile_hlo

    x = np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32)
    text = TEXT.format(t="f32")
    (got,) = run_compiled(text, x, compiled=compile_hlo(text, cache=False))
    np.testing.assert_allclose(got, np.sin(x) * x, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("seed", [0, 1])
def test_the_vjp_moves_the_cotangent_back(seed):
    x = np.random.default_rng(seed).standard_normal((4, 6))
    check_directional_derivatives(parse_hlo(TEXT.format(t="f64")), [x])
