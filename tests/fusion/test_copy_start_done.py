"""``copy-start``/``copy-done``: XLA's asynchronous copy between memory spaces, in optimized
HLO (memory-space assignment's prefetches, host offloading's ``S(5)`` buffers).  On one
device's memory the pair passes its value on: evaluated and compiled so, in a loop too,
and a malformed pair is a located error.  Its VJP rule is checked by finite differences
(``test_rules_finite_differences``)."""
from __future__ import annotations

import numpy as np
import pytest

from fusion.errors import FusionCompilerError
from fusion.evaluator import evaluate
from fusion.shapes.verifier import verify_module
from fusion.text.parser import parse_hlo

# A loop prefetching its operand to another memory space each step, as XLA's memory-space
# assignment writes it.
LOOP = """HloModule prefetch
cond {
  s = (s32[], f32[4,5]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(3)
  ROOT c = pred[] compare(i, n), direction=LT
}
body {
  s = (s32[], f32[4,5]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  v = f32[4,5] get-tuple-element(s), index=1
  cs = (f32[4,5]{1,0:S(1)}, f32[4,5]{1,0}, u32[]) copy-start(v), cross_program_prefetch_index=0
  cd = f32[4,5]{1,0:S(1)} copy-done(cs)
  w = f32[4,5] sine(cd)
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[], f32[4,5]) tuple(j, w)
}
ENTRY e {
  x = f32[4,5] parameter(0)
  z = s32[] constant(0)
  t = (s32[], f32[4,5]) tuple(z, x)
  r = (s32[], f32[4,5]) while(t), condition=cond, body=body
  ROOT v = f32[4,5] get-tuple-element(r), index=1
}
"""


def test_the_pair_passes_its_value_on_in_a_loop():
    x = np.random.default_rng(0).standard_normal((4, 5)).astype(np.float32)
    (got,) = evaluate(parse_hlo(LOOP), x)
    np.testing.assert_allclose(got, np.sin(np.sin(np.sin(x))), rtol=1e-6)


def test_compiled_the_pair_is_no_kernel():
    from tests.triton_backend.xla_three_way import run_compiled
    from triton_backend import compile_hlo

    x = np.random.default_rng(1).standard_normal((4, 5)).astype(np.float32)
    compiled = compile_hlo(LOOP, cache=False)
    (got,) = run_compiled(LOOP, x, compiled=compiled)
    np.testing.assert_allclose(got, np.sin(np.sin(np.sin(x))), rtol=1e-5, atol=1e-6)
    # The copies stay host steps in the body (they move nothing): no kernel computes them.
    fused = {i.attr("calls") for c in compiled.module.computations for i in c
             if i.opcode == "fusion"}
    in_kernels = {i.opcode for c in compiled.module.computations if c.name in fused for i in c}
    in_body = {i.opcode for i in compiled.module.computation("body")}
    assert {"copy-start", "copy-done"} <= in_body and not {"copy-start", "copy-done"} & in_kernels


@pytest.mark.parametrize("lines, message", [
    ("  s = (f32[3], f32[3], u32[]) copy-start(x, x)\n  ROOT d = f32[3] copy-done(s)",
     "1 operand"),
    ("  ROOT d = f32[3] copy-done(x)", "copy-start's (destination, source, u32[]) tuple"),
    ("  s = (f32[4], f32[3], u32[]) copy-start(x)\n  ROOT d = f32[4] copy-done(s)", "f32[3]"),
])
def test_a_malformed_pair_is_a_located_error(lines, message):
    text = f"HloModule m\nENTRY e {{\n  x = f32[3] parameter(0)\n{lines}\n}}\n"
    with pytest.raises(FusionCompilerError) as error:
        verify_module(parse_hlo(text))
    assert message in str(error.value) and str(error.value).startswith("4:3:")
