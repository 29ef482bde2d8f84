"""``opt-barrier``: XLA's optimization barrier (``jax.lax.optimization_barrier``; what
``jax.checkpoint`` puts before each recomputation).  Its value is its operand; it keeps
CSE and fusion from merging the recomputation with the forward pass.  The whole remat
gradient against XLA is a conformance program (``remat_mlp_grad``); its VJP rule is checked
by finite differences (``test_rules_finite_differences``)."""
from __future__ import annotations

import numpy as np
import pytest

from fusion.errors import FusionCompilerError
from fusion.evaluator import evaluate
from fusion.shapes.verifier import verify_module
from fusion.text.parser import parse_hlo
from tiling.fusion_pass.priority_fusion import fuse_module

# exp(x) twice: once before the barrier, once on the barrier's copy of x (a remat).
RECOMPUTED = """HloModule remat
ENTRY e {
  x = f32[4,8] parameter(0)
  a = f32[4,8] exponential(x)
  t = (f32[4,8], f32[4,8]) tuple(x, a)
  b = (f32[4,8], f32[4,8]) BARRIER(t)
  y = f32[4,8] get-tuple-element(b), index=0
  c = f32[4,8] exponential(y)
  d = f32[4,8] get-tuple-element(b), index=1
  ROOT s = f32[4,8] add(c, d)
}
"""


def _exponentials(text: str) -> int:
    module = fuse_module(parse_hlo(text)).module
    return sum(i.opcode == "exponential" for c in module.computations for i in c.instructions)


def test_the_recomputation_behind_a_barrier_is_kept() -> None:
    # Without the barrier (the elements read from the tuple itself), CSE merges the two.
    plain = RECOMPUTED.replace("  b = (f32[4,8], f32[4,8]) BARRIER(t)\n", "")
    assert _exponentials(plain.replace("get-tuple-element(b)", "get-tuple-element(t)")) == 1
    assert _exponentials(RECOMPUTED.replace("BARRIER", "opt-barrier")) == 2


def test_no_fusion_crosses_the_barrier() -> None:
    fused = fuse_module(parse_hlo(RECOMPUTED.replace("BARRIER", "opt-barrier"))).module
    entry = fused.entry
    barrier = next(i for i in entry.instructions if i.opcode == "opt-barrier")
    assert entry.instruction(barrier.operands[0]).opcode == "tuple"
    verify_module(fused)


def test_its_value_is_its_operand_array_or_tuple() -> None:
    x = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    (got,) = evaluate(parse_hlo(RECOMPUTED.replace("BARRIER", "opt-barrier")), x)
    np.testing.assert_allclose(got, 2 * np.exp(x), rtol=1e-6)
    array = parse_hlo("""HloModule m
ENTRY e {
  x = s32[3] parameter(0)
  ROOT b = s32[3] opt-barrier(x)
}
""")
    (got,) = evaluate(array, np.int32([4, -5, 6]))
    assert got.tolist() == [4, -5, 6]


@pytest.mark.parametrize("body, message", [
    ("  ROOT b = f32[3] opt-barrier(x, x)", "1 operand"),
    ("  ROOT b = f32[4] opt-barrier(x)", "f32[3]"),
])
def test_a_wrong_barrier_is_a_located_error(body: str, message: str) -> None:
    module = parse_hlo(f"HloModule m\nENTRY e {{\n  x = f32[3] parameter(0)\n{body}\n}}\n")
    with pytest.raises(FusionCompilerError) as error:
        verify_module(module)
    assert message in str(error.value) and str(error.value).startswith("4:3:")
