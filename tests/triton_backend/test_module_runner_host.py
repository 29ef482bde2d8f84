"""The host side of ``compile_hlo``: control flow, views, constants, tuples, aliasing, one-op
fusions, dtype conversions and the output check; truths are NumPy and the reference evaluator."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo
from fusion.shapes.verifier import verify_module
from triton_backend import compile_hlo
from triton_backend.host.views import is_view_layout
from triton_backend.host.input_validation import TORCH_DTYPES, tensor_from_numpy, tensor_to_numpy
from triton_backend.runtime.launch_mode import configure_launch_mode, interpreting
from triton_backend.host.output_check import compare_output
from triton_backend.driver.single_op_fusion import wrap_lone_ops

WHILE = """HloModule w
cond {
  cs = (s32[], f32[4]) parameter(0)
  ci = s32[] get-tuple-element(cs), index=0
  n = s32[] constant(%d)
  ROOT lt = pred[] compare(ci, n), direction=LT
}
body {
  s = (s32[], f32[4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  v = f32[4] get-tuple-element(s), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  c = f32[] constant(1.5)
  b = f32[4] broadcast(c), dimensions={}
  w = f32[4] multiply(v, b)
  ROOT t = (s32[], f32[4]) tuple(j, w)
}
ENTRY e {
  x = f32[4] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[4]) tuple(zero, x)
  loop = (s32[], f32[4]) while(init), condition=cond, body=body
  ROOT r = f32[4] get-tuple-element(loop), index=1
}
"""

CONDITIONAL = """HloModule c
neg {
  a0 = f32[3] parameter(0)
  ROOT n = f32[3] negate(a0)
}
dbl {
  a1 = f32[3] parameter(0)
  ROOT d = f32[3] add(a1, a1)
}
sq {
  a2 = f32[3] parameter(0)
  ROOT s = f32[3] multiply(a2, a2)
}
ENTRY e {
  k = s32[] parameter(0)
  x = f32[3] parameter(1)
  ROOT r = f32[3] conditional(k, x, x, x), branch_computations={neg, dbl, sq}
}
"""


@pytest.mark.parametrize("trips", [0, 1, 5])
@pytest.mark.parametrize("fuse", [True, False])
def test_while_runs_the_body_kernels_on_the_host(trips, fuse):
    compiled = compile_hlo(WHILE % trips, fuse=fuse)
    x = np.array([1, -2, 0.5, 3], np.float32)
    (out,) = compiled(torch.from_numpy(x))
    np.testing.assert_array_equal(out.numpy(), x * np.float32(1.5) ** trips)


@pytest.mark.parametrize("k", [-1, 0, 1, 2, 3, 7])
def test_conditional_picks_the_branch_out_of_range_is_last(k):
    compiled = compile_hlo(CONDITIONAL)
    x = torch.tensor([1.0, -2.0, 3.0])
    (out,) = compiled(torch.tensor(k, dtype=torch.int32), x)
    (ref,) = evaluate(parse_hlo(CONDITIONAL), np.int32(k), x.numpy())
    np.testing.assert_array_equal(out.numpy(), ref)


def test_call_is_run_inline_and_tuples_are_flattened():
    text = """HloModule m
f {
  a = f32[2] parameter(0)
  b = f32[2] parameter(1)
  s = f32[2] add(a, b)
  ROOT t = (f32[2], f32[2]) tuple(s, a)
}
ENTRY e {
  x = f32[2] parameter(0)
  y = f32[2] parameter(1)
  c = (f32[2], f32[2]) call(x, y), to_apply=f
  g = f32[2] get-tuple-element(c), index=0
  ROOT r = ((f32[2], f32[2]), f32[2]) tuple(c, g)
}
"""
    x, y = torch.tensor([1.0, 2.0]), torch.tensor([10.0, 20.0])
    out = compile_hlo(text, fuse=False)(x, y)
    assert [o.tolist() for o in out] == [[11.0, 22.0], [1.0, 2.0], [11.0, 22.0]]
    # o1 is the input itself and o0/o2 the same value: each output is its own tensor.
    out[1][0] = 99.0
    out[0][0] = -1.0
    assert x.tolist() == [1.0, 2.0] and out[2].tolist() == [11.0, 22.0]


def test_bitcast_and_reshape_are_views_not_kernels():
    text = """HloModule m
ENTRY e {
  x = f32[2,3] parameter(0)
  b = f32[3,2] bitcast(x)
  ROOT r = f32[6] reshape(b)
}
"""
    compiled = compile_hlo(text, fuse=False)
    assert compiled.fusions == {}
    x = torch.arange(6.0).reshape(2, 3)
    (out,) = compiled(x)
    assert out.tolist() == list(range(6))
    out[0] = 42.0
    assert x[0, 0] == 0.0  # the returned view of the input was copied


def test_bitcast_across_layouts_is_a_kernel_matching_the_evaluator():
    text = """HloModule m
ENTRY e {
  x = f32[2,3]{0,1} parameter(0)
  ROOT b = f32[3,2]{1,0} bitcast(x)
}
"""
    module = parse_hlo(text)
    compiled = compile_hlo(text, fuse=False)
    assert list(compiled.fusions) == ["wrapped_b"]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (out,) = compiled(torch.from_numpy(x))
    np.testing.assert_array_equal(out.numpy(), evaluate(module, x)[0])


def test_constant_output_is_not_shared_between_calls():
    text = "HloModule m\nENTRY e {\n  x = f32[2] parameter(0)\n  ROOT c = f32[2] constant({1, 2})\n}\n"
    compiled = compile_hlo(text)
    (first,) = compiled(torch.zeros(2))
    first[0] = 7.0
    (second,) = compiled(torch.zeros(2))
    assert second.tolist() == [1.0, 2.0]


def test_lone_ops_become_one_op_fusions_that_verify():
    module = parse_hlo("""HloModule m
ENTRY e {
  x = f32[4] parameter(0)
  param_0 = f32[4] parameter(1)
  m = f32[4] multiply(x, x)
  ROOT a = f32[4] add(m, param_0)
}
""")
    wrapped = wrap_lone_ops(module, {"e": ("m", "a")})
    verify_module(wrapped)
    entry = wrapped.entry
    assert [i.opcode for i in entry.instructions] == ["parameter", "parameter", "fusion", "fusion"]
    assert entry.instruction("wrapped_m").operands == ("x",)
    assert entry.root.name == "wrapped_a" and entry.root.operands == ("wrapped_m", "param_0")
    fused = wrapped.computation(entry.root.attr("calls"))
    # param_0 is an ENTRY name and param_0.1 a parameter of wrapped_m_computation.
    assert [p.name for p in fused.parameters] == ["param_0.2", "param_1"]
    assert fused.root.name == "a" and fused.root.operands == ("param_0.2", "param_1")
    x, p = np.float32([1, 2, 3, 4]), np.float32([0.5, 0, -1, 2])
    np.testing.assert_array_equal(evaluate(wrapped, x, p)[0], evaluate(module, x, p)[0])


def test_view_layouts():
    from fusion.text.parser import parse_shape

    assert is_view_layout(parse_shape("f32[4,6]{1,0}"))
    assert is_view_layout(parse_shape("f32[4,1,6]{2,0,1}"))
    assert not is_view_layout(parse_shape("f32[4,6]{0,1}"))
    assert not is_view_layout(parse_shape("f32[8,128]{1,0:T(8,128)}"))
    assert is_view_layout(parse_shape("s4[8]{0}"))  # one value per byte, as XLA stores it
    assert not is_view_layout(parse_shape("s4[8]{0:E(4)}"))  # packed: words, not a view


def test_no_gpu_means_the_interpreter_on_cpu():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    assert configure_launch_mode() == torch.device("cpu") and interpreting()


@settings(max_examples=12, deadline=None)
# Sub-byte integers travel as int8/uint8 values (test_sub_byte_boundary.py), not as their bits.
@given(st.sampled_from(sorted(set(TORCH_DTYPES) - {"s2", "s4", "u2", "u4"})),
       st.lists(st.integers(0, 255), min_size=1, max_size=12))
def test_numpy_torch_round_trip_keeps_every_bit(hlo, raw):
    from fusion.ir.element_types import element_type

    dtype = element_type(hlo).numpy_dtype()
    width = max(1, element_type(hlo).bits // 8)
    data = bytes(raw * width)[: len(raw) * width]
    array = np.frombuffer(data, dtype=dtype).copy()
    tensor = tensor_from_numpy(array, hlo)
    assert tensor.dtype == TORCH_DTYPES[hlo] and tuple(tensor.shape) == array.shape
    back = tensor_to_numpy(tensor, hlo)  # a byte carrier's codes viewed as the type again
    assert back.dtype == dtype and back.tobytes() == array.tobytes()


def test_scalars_keep_rank_zero():
    t = tensor_from_numpy(np.array(3, np.int32), "s32")
    assert t.shape == () and t.item() == 3


def test_output_check_tolerances():
    ref = np.float32([1.0, np.nan, np.inf, -2.0])
    assert compare_output("o0", ref, ref.copy(), "f32").passed
    off = compare_output("o0", ref, np.float32([1.0 + 2e-5, np.nan, np.inf, -2.0]), "f32")
    assert not off.passed and off.mismatches == 1
    assert off.max_abs_error == pytest.approx(2e-5, rel=0.1)
    assert not compare_output("o0", ref, np.float32([1, 0, np.inf, -2]), "f32").passed
    # Near a zero reference the relative error is taken over atol, not over 0 (1e301 before).
    zero = compare_output("o0", np.float32([0.0, 4.0]), np.float32([3e-6, 4.0]), "f32")
    assert not zero.passed and zero.max_rel_error == pytest.approx(3e-6 / zero.tolerance.atol,
                                                                   rel=1e-3)
    assert not compare_output("o0", ref, np.float32([1, np.nan, -np.inf, -2]), "f32").passed
    bf = np.array([1.0, 2.0], ml_dtypes.bfloat16)
    one_ulp = np.array([1.0078125, 2.0], ml_dtypes.bfloat16)
    assert compare_output("o0", bf, one_ulp, "bf16").passed
    assert "FAILED" in compare_output("o0", np.int8([1]), np.int8([2]), "s8").describe()


_IMPORTED_FIRST = '''
import triton, triton.language as tl, torch
from triton.runtime.jit import JITFunction
assert isinstance(tl.zeros, JITFunction)  # decorated before the interpreter was chosen
from triton_backend import compile_hlo
run = compile_hlo("""HloModule m
ENTRY e {
  a = f32[16,32] parameter(0)
  b = f32[32,16] parameter(1)
  d = f32[16,16] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT t = f32[16,16] tanh(d)
}""", cache=False)
a, b = torch.randn(16, 32, dtype=torch.float32), torch.randn(32, 16, dtype=torch.float32)
got = run(a, b)[0]
assert torch.allclose(got, torch.tanh(a @ b), atol=1e-5), (got - torch.tanh(a @ b)).abs().max()
assert isinstance(tl.zeros, JITFunction)  # swapped back after the launch
print("ok")
'''


def test_a_process_that_imported_triton_before_the_interpreter_runs_its_library_calls():
    # Triton's tl.zeros (a dot's accumulator) is a @jit function, decorated when triton is
    # first imported; without TRITON_INTERPRET then, the interpreter would refuse to call it.
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", _IMPORTED_FIRST], env=env, capture_output=True,
                          text=True, timeout=240, cwd=str(Path(__file__).resolve().parents[2]))
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]
