"""Sub-byte integers (s4, u4, s2, u2) at the module boundary and in kernels (issue 15).

A parameter or result of such a type is an int8/uint8 tensor holding one value per element; a
value out of the type's range is an error naming the parameter.  With an ``E(4)`` layout the
buffer is packed (eight 4-bit fields per uint32 word), and either the logical tensor or the
packed words may be passed.  Results are checked against XLA on the same HLO text.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from fusion.errors import EvaluationError
from fusion.evaluator import evaluate
from fusion.evaluator.npz_io import output_arrays
from fusion.text.parser import parse_hlo, parse_layout
from triton_backend import compile_hlo
from triton_backend.host.host_packing import pack_tensor

pytest.importorskip("jax")
import ml_dtypes  # noqa: E402 - installed with jax

from tests.conformance.xla_oracle import run_xla  # noqa: E402

ARITHMETIC = """HloModule m
ENTRY e {
  a = s4[2,8] parameter(0)
  b = s4[2,8] parameter(1)
  u = u4[2,8] parameter(2)
  w = s32[2,8] parameter(3)
  s = s4[2,8] add(a, b)
  m = s4[2,8] multiply(a, b)
  f = f32[2,8] convert(s)
  c = u4[2,8] convert(a)
  sh = s4[2,8] shift-right-logical(a, b)
  uu = u4[2,8] add(u, u)
  ss = s2[2,8] convert(a)
  wn = s4[2,8] convert(w)
  ROOT t = (s4[2,8], s4[2,8], f32[2,8], u4[2,8], s4[2,8], u4[2,8], s2[2,8], s4[2,8]) tuple(s, m, f, c, sh, uu, ss, wn)
}"""

PACKED = """HloModule m
ENTRY e {
  a = s4[3,16]{1,0:E(4)} parameter(0)
  b = u4[3,16]{1,0} parameter(1)
  c = s4[3,16]{1,0} convert(b)
  ROOT s = s4[3,16]{1,0:E(4)} subtract(a, c)
}"""


def _inputs(rng):
    return (rng.integers(-8, 8, (2, 8)).astype(np.int8), rng.integers(-8, 8, (2, 8)).astype(np.int8),
            rng.integers(0, 16, (2, 8)).astype(np.uint8),
            rng.integers(-300, 300, (2, 8)).astype(np.int32))


def _as_xla(a: np.ndarray, dtype: str) -> np.ndarray:
    return a.astype({"s4": ml_dtypes.int4, "u4": ml_dtypes.uint4}.get(dtype, a.dtype))


def test_sub_byte_arithmetic_matches_xla_and_the_evaluator():
    module = parse_hlo(ARITHMETIC)
    arrays = _inputs(np.random.default_rng(0))
    xla_arrays = [_as_xla(a, p.shape.dtype) for a, p in zip(arrays, module.entry.parameters)]
    want = [np.asarray(w).astype(np.int64) for w in run_xla(ARITHMETIC, *xla_arrays)]
    reference = [np.asarray(r).astype(np.int64) for r in output_arrays(evaluate(module, *xla_arrays))]
    got = compile_hlo(ARITHMETIC)(*[torch.from_numpy(a) for a in arrays])
    carriers = [torch.int8, torch.int8, torch.float32, torch.uint8, torch.int8, torch.uint8,
                torch.int8, torch.int8]
    assert [g.dtype for g in got] == carriers
    for n, (g, w, r) in enumerate(zip(got, want, reference)):
        np.testing.assert_array_equal(g.numpy().astype(np.int64), w, err_msg=f"output {n}")
        np.testing.assert_array_equal(r, w, err_msg=f"evaluator output {n}")


@pytest.mark.parametrize("number,value", [(0, 8), (0, -9), (2, 16)])
def test_a_value_out_of_range_is_an_error_naming_the_parameter(number, value):
    arrays = [torch.from_numpy(a) for a in _inputs(np.random.default_rng(1))]
    arrays[number][1, 3] = value
    name = parse_hlo(ARITHMETIC).entry.parameters[number].name
    with pytest.raises(EvaluationError, match=rf"parameter {number} \(%{name}\): holds {value}, outside"):
        compile_hlo(ARITHMETIC)(*arrays)


def test_an_e4_layout_packs_eight_values_per_word_both_ways():
    rng = np.random.default_rng(2)
    a = rng.integers(-8, 8, (3, 16)).astype(np.int8)
    b = rng.integers(0, 16, (3, 16)).astype(np.uint8)
    (want,) = run_xla(PACKED.replace(":E(4)", ""), _as_xla(a, "s4"), _as_xla(b, "u4"))
    want = np.asarray(want).astype(np.int64)
    compiled = compile_hlo(PACKED)
    (logical,) = compiled(torch.from_numpy(a), torch.from_numpy(b))
    words = pack_tensor(torch.from_numpy(a), parse_layout("{1,0:E(4)}"), "s4")
    assert words.dtype == torch.uint32 and words.numel() == 3 * 16 // 8
    (from_words,) = compiled(words, torch.from_numpy(b))
    for got in (logical, from_words):
        assert got.dtype == torch.int8
        np.testing.assert_array_equal(got.numpy().astype(np.int64), want)
