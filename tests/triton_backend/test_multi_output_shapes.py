"""Multi-output fusions whose outputs differ in shape, in the forms XLA's emitters produce them
(input slices, an in-place dynamic-update-slice with a side output, a transpose with a side
output, reshaped outputs, a reduce next to a slice): one kernel over a flat space, each output
computed at its own coordinates; against XLA and the evaluator."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("jax")

from fusion.text.parser import parse_hlo  # noqa: E402
from tests.triton_backend.xla_three_way import compare_three_ways  # noqa: E402
from triton_backend.lowering.kernel_file import iteration_space, output_shapes  # noqa: E402

CASES = {}
CASES["input_slices"] = ("""HloModule input_slices
fused_slices {
  p0 = f32[6,10]{1,0} parameter(0)
  p1 = f32[6,10]{1,0} parameter(1)
  add = f32[6,10]{1,0} add(p0, p1)
  e = f32[6,10]{1,0} exponential(add)
  slice0 = f32[3,10]{1,0} slice(e), slice={[0:3], [0:10]}
  slice1 = f32[2,4]{1,0} slice(e), slice={[3:5], [2:10:2]}
  slice2 = f32[1,3]{1,0} slice(e), slice={[5:6], [7:10]}
  ROOT t = (f32[3,10]{1,0}, f32[2,4]{1,0}, f32[1,3]{1,0}) tuple(slice0, slice1, slice2)
}
ENTRY e {
  a = f32[6,10]{1,0} parameter(0)
  b = f32[6,10]{1,0} parameter(1)
  ROOT f = (f32[3,10]{1,0}, f32[2,4]{1,0}, f32[1,3]{1,0}) fusion(a, b), kind=kInput, calls=fused_slices
}""", [(6, 10), (6, 10)])
CASES["dus_side_output"] = ("""HloModule dus_side
fused_dus {
  p0 = f32[8,4]{1,0} parameter(0)
  p1 = f32[1,4]{1,0} parameter(1)
  p2 = s32[] parameter(2)
  z = s32[] constant(0)
  n = f32[1,4]{1,0} negate(p1)
  dus = f32[8,4]{1,0} dynamic-update-slice(p0, n, p2, z)
  ROOT t = (f32[8,4]{1,0}, f32[1,4]{1,0}) tuple(dus, n)
}
ENTRY e {
  c = f32[8,4]{1,0} parameter(0)
  k = f32[1,4]{1,0} parameter(1)
  i = s32[] parameter(2)
  ROOT f = (f32[8,4]{1,0}, f32[1,4]{1,0}) fusion(c, k, i), kind=kLoop, calls=fused_dus
}""", [(8, 4), (1, 4), "s32:3"])
CASES["transpose_side"] = ("""HloModule transpose_side
fused_t {
  p0 = f32[16,24]{1,0} parameter(0)
  s = f32[16,24]{1,0} sine(p0)
  t = f32[24,16]{1,0} transpose(s), dimensions={1,0}
  ROOT r = (f32[24,16]{1,0}, f32[16,24]{1,0}) tuple(t, s)
}
ENTRY e {
  x = f32[16,24]{1,0} parameter(0)
  ROOT f = (f32[24,16]{1,0}, f32[16,24]{1,0}) fusion(x), kind=kInput, calls=fused_t
}""", [(16, 24)])
CASES["reshaped_outputs"] = ("""HloModule reshaped
fused_r {
  p0 = f32[4,6]{1,0} parameter(0)
  m = f32[4,6]{1,0} multiply(p0, p0)
  r = f32[24]{0} reshape(m)
  r3 = f32[2,3,4]{2,1,0} reshape(m)
  ROOT t = (f32[4,6]{1,0}, f32[24]{0}, f32[2,3,4]{2,1,0}) tuple(m, r, r3)
}
ENTRY e {
  x = f32[4,6]{1,0} parameter(0)
  ROOT f = (f32[4,6]{1,0}, f32[24]{0}, f32[2,3,4]{2,1,0}) fusion(x), kind=kLoop, calls=fused_r
}""", [(4, 6)])
CASES["reduce_and_slice"] = ("""HloModule reduce_and_slice
add { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b) }
fused_rs {
  p0 = f32[8,16]{1,0} parameter(0)
  e = f32[8,16]{1,0} exponential(p0)
  z = f32[] constant(0)
  r = f32[8]{0} reduce(e, z), dimensions={1}, to_apply=add
  sl = f32[3,5]{1,0} slice(e), slice={[1:4], [2:7]}
  ROOT t = (f32[8]{0}, f32[3,5]{1,0}, f32[8,16]{1,0}) tuple(r, sl, e)
}
ENTRY e {
  x = f32[8,16]{1,0} parameter(0)
  ROOT f = (f32[8]{0}, f32[3,5]{1,0}, f32[8,16]{1,0}) fusion(x), kind=kInput, calls=fused_rs
}""", [(8, 16)])


def _arguments(specs, rng):
    return [np.int32(int(s.split(":")[1])) if isinstance(s, str)
            else rng.standard_normal(s).astype(np.float32) for s in specs]


@pytest.mark.parametrize("name", sorted(CASES))
def test_outputs_of_several_shapes_against_xla(name):
    text, specs = CASES[name]
    compiled = compare_three_ways(text, *_arguments(specs, np.random.default_rng(0)))
    # XLA's fusion is kept whole: one kernel writes every output.
    assert list(compiled.fusions) == ["f"]


@pytest.mark.parametrize("name", sorted(CASES))
def test_iteration_space_is_flat_over_the_largest_output(name):
    m = parse_hlo(CASES[name][0])
    fusion = m.entry.root
    outputs = output_shapes(fusion)
    space, projections = iteration_space(m.computation(fusion.attr("calls")), fusion, outputs)
    assert space == (max(int(np.prod(o.dims)) for o in outputs),)
    assert [len(p) for p in projections] == [o.rank for o in outputs]


def test_dynamic_update_slice_position_out_of_range_is_clamped():
    text, specs = CASES["dus_side_output"]
    args = _arguments(specs, np.random.default_rng(1))
    args[2] = np.int32(11)  # clamped to 7, the last row
    compare_three_ways(text, *args)


def test_reduce_of_the_iteration_shape_keeps_the_shared_space():
    # A reduce next to outputs of its input's shape is not flattened (XLA's reduction
    # emitter form: the reduce is stored where its reduced dims are 0).
    text = CASES["reduce_and_slice"][0].replace(
        "  sl = f32[3,5]{1,0} slice(e), slice={[1:4], [2:7]}\n", "").replace(
        "(f32[8]{0}, f32[3,5]{1,0}, f32[8,16]{1,0})", "(f32[8]{0}, f32[8,16]{1,0})").replace(
        "tuple(r, sl, e)", "tuple(r, e)")
    m = parse_hlo(text)
    fusion = m.entry.root
    space, _ = iteration_space(m.computation(fusion.attr("calls")), fusion, output_shapes(fusion))
    assert space == (8, 16)
    compare_three_ways(text, np.random.default_rng(2).standard_normal((8, 16)).astype(np.float32))
