"""A reducer computation that itself calls a fusion (issue 29; XLA's test files have them):
XLA runs it, and so do the evaluator and ``compile_hlo`` (``transforms.nested_fusion_inlining``
inlines the fusion into the reducer first).  Each program runs three ways."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("jax")
from tests.triton_backend.xla_three_way import compare_three_ways  # noqa: E402 - after jax

REDUCER = """HloModule m
fused_max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] maximum(a, b)
}
fused_add {
  a.1 = f32[] parameter(0)
  b.1 = f32[] parameter(1)
  n = f32[] add(a.1, b.1)
  ROOT g = f32[] fusion(n, n), kind=kLoop, calls=fused_max
}
reducer {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT f = f32[] fusion(x, y), kind=kLoop, calls=fused_add
}
"""

PROGRAMS = {
    "a_lone_reduce": REDUCER + """ENTRY e {
  a0 = f32[16,32] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[16] reduce(a0, z), dimensions={1}, to_apply=reducer
}""",
    "a_reduce_in_an_input_fusion": REDUCER + """fused_reduce {
  p0 = f32[16,32] parameter(0)
  e = f32[16,32] exponential(p0)
  z = f32[] constant(0)
  ROOT r = f32[32] reduce(e, z), dimensions={0}, to_apply=reducer
}
ENTRY e {
  a0 = f32[16,32] parameter(0)
  ROOT f = f32[32] fusion(a0), kind=kInput, calls=fused_reduce
}""",
    "a_reduce_window": REDUCER + """ENTRY e {
  a0 = f32[16,32] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[8,32] reduce-window(a0, z), window={size=2x1 stride=2x1}, to_apply=reducer
}""",
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_a_reducer_calling_a_fusion_runs(name):
    x = np.random.default_rng(0).standard_normal((16, 32)).astype(np.float32)
    compare_three_ways(PROGRAMS[name], x, rtol=1e-5, atol=1e-5)
