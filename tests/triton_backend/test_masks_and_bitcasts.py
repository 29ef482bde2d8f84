"""Two kernel bugs of issue 15, each against XLA running the same HLO text.

* A block load or store masked by a comparison of a scalar (a dynamic-slice start) crashed
  the Triton interpreter with ``ValueError('mask has unsupported dtype')``: Triton 3.9's
  interpreter labels a 0-d comparison with its operands' dtype, so splatting it to the block
  gives an int32 mask.  The emitter now compares the start broadcast to the block.
* A ``bitcast`` to another element type of the same width inside a loop fusion was lowered as
  a pass-through (a value conversion): an s16 result of an f16 bitcast came out as 0/1/-1.
"""
from __future__ import annotations

import numpy as np
import pytest

from fusion.evaluator import evaluate
from fusion.evaluator.npz_io import output_arrays
from fusion.text.parser import parse_hlo
from triton_backend import compile_hlo
from triton_backend.host.input_validation import tensor_from_numpy, tensor_to_numpy

pytest.importorskip("jax")
from tests.conformance.xla_oracle import run_xla  # noqa: E402 - after the jax check

# A while-loop body as JAX emits it: the row start is a select on a compare (a 0-d pred).
DYNAMIC_ROW = """HloModule m
f {
  i = s32[] parameter(0)
  x = f32[5,3] parameter(1)
  acc = f32[3] parameter(2)
  zero = s32[] constant(0)
  neg = pred[] compare(i, zero), direction=LT
  five = s32[] constant(5)
  wrapped = s32[] add(i, five)
  row = s32[] select(neg, wrapped, i)
  ds = f32[1,3] dynamic-slice(x, row, zero), dynamic_slice_sizes={1,3}
  r = f32[3] reshape(ds)
  ROOT s = f32[3] add(acc, r)
}
ENTRY e {
  i = s32[] parameter(0)
  x = f32[5,3] parameter(1)
  acc = f32[3] parameter(2)
  ROOT o = f32[3] fusion(i, x, acc), kind=kLoop, calls=f
}"""

# In-place update of a KV cache at a runtime position (the update's window is masked).
KV_UPDATE = """HloModule m
ENTRY e {
  cache = f32[2,6,4] parameter(0)
  new = f32[2,1,4] parameter(1)
  pos = s32[] parameter(2)
  zero = s32[] constant(0)
  ROOT u = f32[2,6,4] dynamic-update-slice(cache, new, zero, pos, zero)
}"""

BITCAST_F16_S16 = """HloModule m
f {
  p = f16[2,4]{1,0} parameter(0)
  n = f16[2,4]{1,0} negate(p)
  b = s16[2,4]{1,0} bitcast(n)
  one = s16[] constant(1)
  ones = s16[2,4]{1,0} broadcast(one), dimensions={}
  ROOT a = s16[2,4]{1,0} add(b, ones)
}
ENTRY e {
  x = f16[2,4]{1,0} parameter(0)
  ROOT o = s16[2,4]{1,0} fusion(x), kind=kLoop, calls=f
}"""

BITCAST_S32_F32 = """HloModule m
f {
  p = s32[3,2]{1,0} parameter(0)
  b = f32[3,2]{1,0} bitcast(p)
  ROOT m = f32[3,2]{1,0} multiply(b, b)
}
ENTRY e {
  x = s32[3,2]{1,0} parameter(0)
  ROOT o = f32[3,2]{1,0} fusion(x), kind=kLoop, calls=f
}"""


def _run(text: str, *arrays: np.ndarray) -> list[np.ndarray]:
    module = parse_hlo(text)
    compiled = compile_hlo(text)
    tensors = [tensor_from_numpy(a, p.shape.dtype) for a, p in zip(arrays, module.entry.parameters)]
    return [tensor_to_numpy(t) for t in compiled(*tensors)]


@pytest.mark.parametrize("start", [0, 3, -2, 7])
def test_dynamic_row_with_a_scalar_start_runs_and_matches_xla(start):
    rng = np.random.default_rng(0)
    arrays = (np.int32(start), rng.standard_normal((5, 3)).astype(np.float32),
              rng.standard_normal(3).astype(np.float32))
    (got,) = _run(DYNAMIC_ROW, *arrays)
    (want,) = run_xla(DYNAMIC_ROW, *arrays)
    np.testing.assert_array_equal(got, np.asarray(want))


@pytest.mark.parametrize("pos", [0, 3, 5, 9, -1])
def test_kv_cache_update_at_a_runtime_position_matches_xla(pos):
    rng = np.random.default_rng(1)
    arrays = (rng.standard_normal((2, 6, 4)).astype(np.float32),
              rng.standard_normal((2, 1, 4)).astype(np.float32), np.int32(pos))
    (got,) = _run(KV_UPDATE, *arrays)
    (want,) = run_xla(KV_UPDATE, *arrays)
    np.testing.assert_array_equal(got, np.asarray(want))


@pytest.mark.parametrize("text,array", [
    (BITCAST_F16_S16, np.array([[0.5, -0.921, -0.0, 65504], [np.inf, np.nan, 1e-7, 3]], np.float16)),
    (BITCAST_S32_F32, np.array([[1, -1], [0x3F800000, 0x7F800000], [-2**31, 12345]], np.int32)),
])
def test_bitcast_to_another_element_type_reinterprets_the_bits(text, array):
    (got,) = _run(text, array)
    (want,) = run_xla(text, array)
    (reference,) = output_arrays(evaluate(parse_hlo(text), array))
    want = np.asarray(want)
    assert got.dtype == want.dtype
    assert got.tobytes() == want.tobytes() == np.asarray(reference).tobytes()
