"""``get-dimension-size``: a static dim's size, as XLA computes it (the evaluator against XLA
running the op), folded to a constant before fusion; a dynamic dim's size, known only at run
time, and a dim out of range are located errors."""
from __future__ import annotations

import numpy as np
import pytest

from fusion.errors import FusionCompilerError
from fusion.evaluator import evaluate
from fusion.shapes.verifier import verify_module
from fusion.text.parser import parse_hlo
from fusion.transforms.canonicalize import canonicalize

TEXT = """HloModule sizes
ENTRY e {
  x = f32[4,7,3] parameter(0)
  a = s32[] get-dimension-size(x), dimensions={0}
  b = s32[] get-dimension-size(x), dimensions={1}
  m = s32[] multiply(a, b)
  c = f32[] convert(m)
  s = f32[4,7,3] broadcast(c), dimensions={}
  ROOT r = f32[4,7,3] add(x, s)
}
"""


def test_a_static_size_as_xla_computes_it():
    x = np.random.default_rng(0).standard_normal((4, 7, 3)).astype(np.float32)
    (got,) = evaluate(parse_hlo(TEXT), x)
    np.testing.assert_array_equal(got, x + np.float32(28))
    pytest.importorskip("jax")
    from tests.conformance.xla_oracle import run_xla

    (want,) = run_xla(TEXT, x)
    np.testing.assert_array_equal(got, want)


def test_canonicalization_folds_it_to_a_constant():
    opcodes = [i.opcode for i in canonicalize(parse_hlo(TEXT)).entry]
    assert "get-dimension-size" not in opcodes and "constant" in opcodes


@pytest.mark.parametrize("text, message", [
    ("  x = f32[<=8] parameter(0)\n  ROOT n = s32[] get-dimension-size(x), dimensions={0}",
     "dynamic dim 0"),
    ("  x = f32[8] parameter(0)\n  ROOT n = s32[] get-dimension-size(x), dimensions={1}",
     "one dim of the rank-1 operand"),
])
def test_a_size_not_known_here_is_a_located_error(text, message):
    module = parse_hlo(f"HloModule m\nENTRY e {{\n{text}\n}}\n")
    with pytest.raises(FusionCompilerError) as error:
        verify_module(module)
        evaluate(module, np.zeros(8, np.float32))
    assert message in str(error.value) and str(error.value).startswith("4:3:")
