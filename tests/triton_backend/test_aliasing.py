"""Outputs are new values: the caller's tensors are never written and no output shares storage
with an input, a constant or another output (XLA semantics without buffer donation, which the
backend does not support).

The in-place dynamic-update-slice fusion (root a DUS of parameter 0: XLA's in-place emitter
updates the operand's buffer) is the case that could break it; so could scatter (its output
starts as a copy of the operand), a while loop carrying an input, and host views (reshape,
bitcast, tuple, get-tuple-element) returning an input or one value twice.  Truths: the
evaluator and the untouched copy of every input.
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch

from fusion.evaluator import evaluate
from triton_backend import compile_hlo
from triton_backend.host.input_validation import tensor_to_numpy
from triton_backend.integrations.torch_op import torch_op

DUS_IN_PLACE = """HloModule alias_dus
f {
  p0 = f32[16,8] parameter(0)
  p1 = f32[3,8] parameter(1)
  p2 = s32[] parameter(2)
  z = s32[] constant(0)
  ROOT d = f32[16,8] dynamic-update-slice(p0, p1, p2, z)
}
ENTRY e {
  x = f32[16,8] parameter(0)
  u = f32[3,8] parameter(1)
  i = s32[] parameter(2)
  ROOT r = f32[16,8] fusion(x, u, i), kind=kLoop, calls=f
}
"""

SCATTER = """HloModule alias_scatter
add { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b) }
ENTRY e {
  x = f32[6,4] parameter(0)
  i = s32[2,1] parameter(1)
  u = f32[2,4] parameter(2)
  ROOT s = f32[6,4] scatter(x, i, u), update_window_dims={1}, inserted_window_dims={0},
    scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
}
"""

WHILE_DUS = """HloModule alias_while
cond {
  cs = (s32[], f32[8]) parameter(0)
  ci = s32[] get-tuple-element(cs), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(ci, n), direction=LT
}
body {
  s = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  v = f32[8] get-tuple-element(s), index=1
  c = f32[1] constant({-7})
  w = f32[8] dynamic-update-slice(v, c, i)
  one = s32[] constant(1)
  j = s32[] add(i, one)
  ROOT t = (s32[], f32[8]) tuple(j, w)
}
ENTRY e {
  x = f32[8] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[8]) tuple(zero, x)
  loop = (s32[], f32[8]) while(init), condition=cond, body=body
  ROOT r = f32[8] get-tuple-element(loop), index=1
}
"""

HOST_ALIASES = """HloModule alias_host
ENTRY e {
  x = f32[2,3] parameter(0)
  y = f32[2,3] parameter(1)
  v = f32[3,2] reshape(x)
  b = f32[6] bitcast(y)
  s = f32[2,3] add(x, y)
  c = f32[2] constant({1, 2})
  t = (f32[2,3], f32[2,3]) tuple(s, s)
  g = f32[2,3] get-tuple-element(t), index=1
  ROOT r = (f32[2,3], f32[3,2], f32[6], f32[2,3], f32[2,3], f32[2,3], f32[2], f32[2], f32[2,3], f32[2,3]) tuple(x, v, b, s, s, g, c, c, y, x)
}
"""


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _run_checked(compiled, *inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Run; check every output against the evaluator, the inputs unchanged, no shared storage."""
    pristine = [t.clone() for t in inputs]
    outputs = compiled(*inputs)
    for before, after in zip(pristine, inputs):
        assert torch.equal(before, after), "an input was modified"
    references = evaluate(compiled.source_module, *[tensor_to_numpy(t) for t in pristine])
    for out, ref in zip(outputs, references):
        np.testing.assert_array_equal(tensor_to_numpy(out), ref)
    nonempty = [t for t in outputs if t.numel()]
    storages = [_storage(t) for t in nonempty]
    assert len(set(storages)) == len(storages), "two outputs share storage"
    assert not set(storages) & {_storage(t) for t in inputs}, "an output shares an input's storage"
    return outputs


@pytest.mark.parametrize("start", [0, 5, 13, 20])  # 20 is clamped to 13, as XLA does
def test_in_place_dus_fusion_leaves_the_callers_buffer_alone(start):
    compiled = compile_hlo(DUS_IN_PLACE)
    assert compiled.fusions["r"].kind == "in_place_dynamic_update_slice"
    x = torch.randn(16, 8)
    u = torch.randn(3, 8)
    (out,) = _run_checked(compiled, x, u, torch.tensor(start, dtype=torch.int32))
    clamped = min(start, 13)
    torch.testing.assert_close(out[clamped:clamped + 3], u)


def test_in_place_dus_with_small_tiles_still_copies_every_untouched_row():
    """Several blocks: rows outside the update must come from the operand, not be skipped."""
    compiled = compile_hlo(DUS_IN_PLACE, tiling={"r": (2, 8)})
    assert compiled.fusions["r"].grid[0] > 1
    _run_checked(compiled, torch.randn(16, 8), torch.randn(3, 8), torch.tensor(4, dtype=torch.int32))


def test_in_place_dus_through_the_torch_op():
    op = torch_op(DUS_IN_PLACE, name="alias_dus")
    x, u = torch.randn(16, 8), torch.randn(3, 8)
    keep = x.clone()
    out = op(x, u, torch.tensor(2, dtype=torch.int32))
    assert torch.equal(x, keep) and _storage(out) != _storage(x)
    torch.testing.assert_close(out[2:5], u)
    torch.testing.assert_close(out[5:], keep[5:])


def test_dus_whose_update_is_the_operand_itself():
    """The same tensor as operand and (a slice of it as) update: reads see the old values."""
    text = """HloModule m
ENTRY e {
  x = f32[8] parameter(0)
  s = f32[4] slice(x), slice={[0:4]}
  i = s32[] constant(4)
  ROOT d = f32[8] dynamic-update-slice(x, s, i)
}"""
    x = torch.arange(8, dtype=torch.float32)
    (out,) = _run_checked(compile_hlo(text), x)
    assert out.tolist() == [0, 1, 2, 3, 0, 1, 2, 3]


def test_scatter_leaves_the_operand_alone():
    compiled = compile_hlo(SCATTER)
    _run_checked(compiled, torch.randn(6, 4), torch.tensor([[1], [1]], dtype=torch.int32),
                 torch.randn(2, 4))


def test_while_loop_updating_its_carried_input():
    compiled = compile_hlo(WHILE_DUS)
    x = torch.arange(8, dtype=torch.float32)
    (out,) = _run_checked(compiled, x)
    assert out.tolist() == [-7, -7, -7, 3, 4, 5, 6, 7]
    (again,) = compiled(x)  # a second call starts from the caller's unchanged x
    assert torch.equal(again, out)


def test_host_views_tuples_and_constants_never_share_storage():
    compiled = compile_hlo(HOST_ALIASES)
    x, y = torch.randn(2, 3), torch.randn(2, 3)
    outputs = _run_checked(compiled, x, y)
    assert len(outputs) == 10
    outputs[6].fill_(100.0)  # a constant output handed to the caller: writing it is harmless
    assert compiled(x, y)[6].tolist() == [1.0, 2.0]
    for a, b in itertools.combinations(outputs, 2):
        assert _storage(a) != _storage(b)


def test_the_same_tensor_for_both_parameters_returned_twice():
    text = """HloModule m
ENTRY e {
  x = f32[4] parameter(0)
  y = f32[4] parameter(1)
  ROOT t = (f32[4], f32[4], f32[4]) tuple(x, y, y)
}"""
    a = torch.randn(4)
    outputs = _run_checked(compile_hlo(text), a, a)
    assert all(torch.equal(o, a) for o in outputs)


def test_torch_op_tuple_of_one_value_twice_gives_two_tensors():
    text = """HloModule alias_twice
ENTRY e {
  x = f32[4] parameter(0)
  n = f32[4] negate(x)
  ROOT t = (f32[4], f32[4], f32[4]) tuple(n, n, x)
}"""
    op = torch_op(text, name="alias_twice")
    x = torch.randn(4)
    a, b, c = op(x)
    assert len({_storage(a), _storage(b), _storage(c), _storage(x)}) == 4
    a.add_(1.0)
    torch.testing.assert_close(b, -x)
    torch.testing.assert_close(c, x)
    torch.library.opcheck(op.op, (x,))
