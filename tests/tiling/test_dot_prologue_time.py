"""Dot prologues judged by time (``tiling.fusion_pass.dot_prologue``): a layernorm's
normalization (from its row statistics) feeding a dot whose N spans many blocks is not fused
into it (the dot would re-apply it once per N block) and becomes a kernel of its own writing
the bf16 operand; where N fits one block it is still fused.  Either way the fused module evaluates to the unfused one's values."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from fusion.evaluator.entry import evaluate
from fusion.text.parser import parse_hlo
from tiling.fusion_pass.priority_fusion import fuse_module

LAYERNORM_DOT = """HloModule ln_dot
ENTRY e {
  x = f32[2048,768] parameter(0)
  mean = f32[2048] parameter(1)
  rstd = f32[2048] parameter(2)
  g = f32[768] parameter(3)
  be = f32[768] parameter(4)
  w = bf16[768,@N] parameter(5)
  meanb = f32[2048,768] broadcast(mean), dimensions={0}
  c = f32[2048,768] subtract(x, meanb)
  rb = f32[2048,768] broadcast(rstd), dimensions={0}
  n = f32[2048,768] multiply(c, rb)
  gb = f32[2048,768] broadcast(g), dimensions={1}
  m = f32[2048,768] multiply(n, gb)
  bb = f32[2048,768] broadcast(be), dimensions={1}
  y = f32[2048,768] add(m, bb)
  yb = bf16[2048,768] convert(y)
  ROOT d = f32[2048,@N] dot(yb, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""


def _dot_fusion_ops(module) -> list[str]:
    """Opcodes of the kernel that holds the dot (the bare dot when nothing fused into it)."""
    for instr in module.entry.instructions:
        if instr.opcode == "dot":
            return ["dot"]
        if instr.opcode == "fusion":
            ops = [i.opcode for i in module.computation(instr.attr("calls")).instructions]
            if "dot" in ops:
                return ops
    raise AssertionError("no dot")


@pytest.mark.parametrize("n, fused", [(3072, False), (128, True)])
def test_layernorm_prologue_by_recompute_factor(n, fused):
    module = parse_hlo(LAYERNORM_DOT.replace("@N", str(n)))
    result = fuse_module(module)
    ops = _dot_fusion_ops(result.module)
    assert ("multiply" in ops) == fused
    refusals = [d for d in result.decisions if not d.fused and "costs time" in d.reason]
    assert bool(refusals) == (not fused)
    if not fused:
        assert "computed 24 times per element of yb" in refusals[0].reason
        # The normalization is a kernel of its own, then the dot.
        kernels = [i for i in result.module.entry.instructions if i.opcode in ("fusion", "dot")]
        assert len(kernels) == 2
    rng = np.random.default_rng(0)
    args = (rng.standard_normal((2048, 768), dtype=np.float32),
            rng.standard_normal(2048, dtype=np.float32),
            rng.random(2048, dtype=np.float32) + 0.5,
            rng.standard_normal(768, dtype=np.float32),
            rng.standard_normal(768, dtype=np.float32),
            rng.standard_normal((768, n), dtype=np.float32).astype(ml_dtypes.bfloat16))
    want = evaluate(module, *args)[0]
    got = evaluate(result.module, *args)[0]
    np.testing.assert_array_equal(got, want)
