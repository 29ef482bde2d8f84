"""Two scalar forms XLA's parser takes, each run three ways (XLA on the same text, the reference
evaluator, ``compile_hlo`` under the interpreter):

* a ``broadcast`` of a scalar written without ``dimensions``: XLA's parser makes the attribute
  optional exactly when the operand is a scalar and defaults it to ``{}``; an array operand
  still needs it (a located verify error here, a parse error in XLA);
* ``select`` with a rank-0 ``pred`` and array branches (XLA's ``InferSelectShape``: a scalar
  predicate picks one whole branch).  Its indexing map to the predicate is the constant map
  ``(d0, d1) -> ()``, so it fuses like a broadcast scalar.  JAX writes ``jnp.where`` of a
  scalar as a broadcast then a select; the test checks JAX's result too.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from fusion.errors import HloVerifyError
from fusion.shapes.verifier import verify_module
from fusion.text.parser import parse_hlo
from fusion.text.printer import print_hlo
from tiling.indexing_analysis.api import output_to_input_indexing

jax = pytest.importorskip("jax")
from tests.conformance.xla_oracle import OracleError, compile_with_xla  # noqa: E402
from tests.triton_backend.xla_three_way import compare_three_ways, run_compiled  # noqa: E402

RNG = np.random.default_rng(2929)

BROADCAST = """HloModule scalar_broadcast
ENTRY e {
  x = f32[8,33] parameter(0)
  s = f32[] parameter(1)
  c = f32[] constant(0.25)
  bs = f32[8,33] broadcast(s)
  bc = f32[8,33] broadcast(c)
  m = f32[8,33] multiply(x, bs)
  ROOT a = f32[8,33] add(m, bc)
}"""


def test_a_scalar_broadcast_without_dimensions_defaults_to_empty_dimensions():
    module = parse_hlo(BROADCAST)
    assert module.entry.instruction("bs").attr("dimensions") == ()
    assert "bs = f32[8,33] broadcast(s), dimensions={}" in print_hlo(module)
    x = RNG.standard_normal((8, 33)).astype(np.float32)
    compare_three_ways(BROADCAST, x, np.float32(-1.5))


def test_an_array_broadcast_without_dimensions_is_still_a_located_error():
    text = """HloModule b
ENTRY e {
  x = f32[3] parameter(0)
  ROOT b = f32[2,3] broadcast(x)
}"""
    with pytest.raises(HloVerifyError) as info:
        verify_module(parse_hlo(text))
    assert str(info.value) == "4:3: broadcast is missing attribute 'dimensions' (in b)"
    with pytest.raises(OracleError, match="dimensions"):  # XLA's parser wants it too
        compile_with_xla(text)


SELECT = """HloModule scalar_select
ENTRY e {
  p = pred[] parameter(0)
  x = f32[16,40] parameter(1)
  y = f32[16,40] parameter(2)
  ROOT z = f32[16,40] select(p, x, y)
}"""

# The predicate computed in the kernel from scalars, the branches from elementwise producers.
SELECT_FUSED = """HloModule scalar_select_fused
ENTRY e {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  x = bf16[16,40] parameter(2)
  y = bf16[16,40] parameter(3)
  p = pred[] compare(a, b), direction=LT
  ex = bf16[16,40] exponential(x)
  ny = bf16[16,40] negate(y)
  s = bf16[16,40] select(p, ex, ny)
  ROOT r = bf16[16,40] multiply(s, y)
}"""


@pytest.mark.parametrize("pick", [True, False])
def test_select_with_a_scalar_predicate_picks_a_whole_branch(pick):
    x = RNG.standard_normal((16, 40)).astype(np.float32)
    y = RNG.standard_normal((16, 40)).astype(np.float32)
    compare_three_ways(SELECT, np.bool_(pick), x, y)
    want = np.asarray(jax.jit(lambda p, x, y: jax.numpy.where(p, x, y))(pick, x, y))
    np.testing.assert_array_equal(run_compiled(SELECT, np.bool_(pick), x, y)[0], want)


@pytest.mark.parametrize("a,b", [(1.0, 2.0), (2.0, 1.0)])
def test_a_scalar_predicate_fuses_with_its_branches(a, b):
    x = RNG.standard_normal((16, 40)).astype(ml_dtypes.bfloat16)
    y = RNG.standard_normal((16, 40)).astype(ml_dtypes.bfloat16)
    compiled = compare_three_ways(SELECT_FUSED, np.float32(a), np.float32(b), x, y,
                                  rtol=1e-2, atol=1e-2)
    assert len(compiled.fusions) == 1


def test_the_scalar_predicate_is_read_through_a_constant_map():
    module = parse_hlo(SELECT)
    maps = output_to_input_indexing(module.entry.root, module)
    assert [str(m) for (m,) in maps] == [
        "(d0, d1) -> (), domain: d0 in [0, 15], d1 in [0, 39]",
        "(d0, d1) -> (d0, d1), domain: d0 in [0, 15], d1 in [0, 39]",
        "(d0, d1) -> (d0, d1), domain: d0 in [0, 15], d1 in [0, 39]",
    ]


def test_a_predicate_of_another_rank_is_a_located_error():
    text = SELECT.replace("p = pred[] parameter(0)", "p = pred[16] parameter(0)")
    with pytest.raises(HloVerifyError) as info:
        verify_module(parse_hlo(text))
    assert (info.value.line, info.value.column, info.value.where) == (6, 3, "z")
    assert "the predicate and branches of select have incompatible shapes" in info.value.message
