"""s4 arrays in ``E(4)`` layouts whose 32-bit words do not lie along one logical dim (issue 29):
``s4[10,6]{1,0:E(4)}`` puts the end of one row and the start of the next in one word.

A loop kernel (transpose, layout change, in-place dynamic-update-slice) iterates over the
output's elements in memory order, tiles of whole words, so each word has one writer; a
scatter, whose targets are data, read-modify-writes each field with one atomic.  Each program
runs against XLA on the same text and the reference evaluator.
"""
from __future__ import annotations

import numpy as np
import pytest

from fusion.analysis.emitter_kind import EmitterKind
from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo
from triton_backend import compile_hlo

pytest.importorskip("jax")
import ml_dtypes  # noqa: E402 - installed with jax

from tests.conformance.xla_oracle import run_xla  # noqa: E402
from tests.triton_backend.xla_three_way import run_compiled  # noqa: E402

RNG = np.random.default_rng(29)

TRANSPOSE = """HloModule m
f {
  a = s4[6,10]{1,0:E(4)} parameter(0)
  ROOT t = s4[10,6]{1,0:E(4)} transpose(a), dimensions={1,0}
}
ENTRY e {
  a = s4[6,10]{1,0:E(4)} parameter(0)
  ROOT f = s4[10,6]{1,0:E(4)} fusion(a), kind=kLoop, calls=f
}"""

RELAYOUT = """HloModule m
ENTRY e {
  a = s4[6,10]{1,0} parameter(0)
  ROOT c = s4[6,10]{0,1:E(4)} copy(a)
}"""

IN_PLACE_DUS = """HloModule m
f {
  a = s4[6,10]{1,0:E(4)} parameter(0)
  u = s4[2,3]{1,0:E(4)} parameter(1)
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  ROOT d = s4[6,10]{1,0:E(4)} dynamic-update-slice(a, u, i, j)
}
ENTRY e {
  a = s4[6,10]{1,0:E(4)} parameter(0)
  u = s4[2,3]{1,0:E(4)} parameter(1)
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  ROOT f = s4[6,10]{1,0:E(4)} fusion(a, u, i, j), kind=kLoop, calls=f
}"""

SCATTER = """HloModule m
add {
  x = s4[] parameter(0)
  y = s4[] parameter(1)
  ROOT s = s4[] add(x, y)
}
f {
  a = s4[6,10]{1,0:E(4)} parameter(0)
  idx = s32[4,1] parameter(1)
  u = s4[4,10]{1,0:E(4)} parameter(2)
  ROOT s = s4[6,10]{1,0:E(4)} scatter(a, idx, u), update_window_dims={1}, inserted_window_dims={0},
    scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add UNIQUE
}
ENTRY e {
  a = s4[6,10]{1,0:E(4)} parameter(0)
  idx = s32[4,1] parameter(1)
  u = s4[4,10]{1,0:E(4)} parameter(2)
  ROOT f = s4[6,10]{1,0:E(4)} fusion(a, idx, u), kind=kInput, calls=f
}"""


def _s4(shape) -> np.ndarray:
    return RNG.integers(-8, 8, shape).astype(np.int8)


def _check(text: str, *arrays, tiling=None):
    """compile_hlo (with ``tiling``) = the evaluator = XLA on ``arrays``; the compiled module."""
    xla_args = [a.astype(ml_dtypes.int4) if a.dtype == np.int8 else a for a in arrays]
    (want,) = run_xla(text, *xla_args)
    (evaluated,) = evaluate(parse_hlo(text), *arrays)
    compiled = compile_hlo(text, tiling=tiling)
    (got,) = run_compiled(text, *arrays, compiled=compiled)
    np.testing.assert_array_equal(np.asarray(want).astype(np.int8), evaluated)
    np.testing.assert_array_equal(got, evaluated)
    return compiled


@pytest.mark.parametrize("tiling, programs", [(None, 1), ({"f": (4, 2)}, 8)])
def test_transpose_tiles_whole_words(tiling, programs):
    compiled = _check(TRANSPOSE, _s4((6, 10)), tiling=tiling)
    (fusion,) = compiled.fusions.values()
    # The flat space of 60 elements in memory order, 8 (one word) per program when asked
    # for 4 x 2; plain word stores, no atomics.
    assert fusion.grid == (programs,) and "tl.atomic" not in fusion.source
    assert "iteration space [60]" in fusion.source


def test_layout_change_to_words_across_columns():
    _check(RELAYOUT, _s4((6, 10)))


@pytest.mark.parametrize("start", [(0, 0), (3, 6), (5, 9), (-2, 4)])
def test_in_place_dynamic_update_slice(start):
    i, j = (np.int32(s) for s in start)
    compiled = _check(IN_PLACE_DUS, _s4((6, 10)), _s4((2, 3)), i, j)
    (fusion,) = compiled.fusions.values()
    assert fusion.kind is EmitterKind.IN_PLACE_DYNAMIC_UPDATE_SLICE


@pytest.mark.parametrize("unique, tiling", [(False, None), (True, {"f": (1, 4)})])
def test_scatter_updates_shared_words_atomically(unique, tiling):
    text = SCATTER.replace(" UNIQUE", ", unique_indices=true" if unique else "")
    rows = np.int32([[4], [1], [3], [0]]) if unique else np.int32([[4], [1], [4], [0]])
    compiled = _check(text, _s4((6, 10)), rows, _s4((4, 10)), tiling=tiling)
    (fusion,) = compiled.fusions.values()
    assert "tl.atomic_xor(" in fusion.source
    if unique:  # 4 rows x 3 window tiles: programs share the words that span rows
        assert fusion.grid == (12,)


MIXED = """HloModule m
f {
  a = s4[6,10]{1,0} parameter(0)
  n = s4[6,10]{1,0} negate(a)
  c = s4[6,10]{0,1:E(4)} copy(n)
  t = s4[10,6]{1,0:E(4)} transpose(a), dimensions={1,0}
  ROOT r = (s4[6,10]{0,1:E(4)}, s4[10,6]{1,0:E(4)}, s4[6,10]{1,0}) tuple(c, t, n)
}
ENTRY e {
  a = s4[6,10]{1,0} parameter(0)
  ROOT f = (s4[6,10]{0,1:E(4)}, s4[10,6]{1,0:E(4)}, s4[6,10]{1,0}) fusion(a), kind=kLoop, calls=f
}"""


def test_packed_and_plain_outputs_of_one_fusion():
    # One kernel; each packed output at its own memory-order coordinates of the flat space.
    a = _s4((6, 10))
    want = run_xla(MIXED, a.astype(ml_dtypes.int4))
    evaluated = evaluate(parse_hlo(MIXED), a)
    compiled = compile_hlo(MIXED)
    got = run_compiled(MIXED, a, compiled=compiled)
    assert len(compiled.fusions) == 1
    for w, e, g in zip(want, evaluated, got):
        np.testing.assert_array_equal(np.asarray(w).astype(np.int8), e)
        np.testing.assert_array_equal(g, e)
