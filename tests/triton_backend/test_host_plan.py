"""A compiled module's call runs a prepared plan (``driver/host_plan``): pinned as a work
count (Python function calls per call, which is deterministic), not as a time."""
from __future__ import annotations

import sys

import torch

from triton_backend import compile_hlo
from triton_backend.reports.launch_stubs import stub_launches

TEXT = """HloModule m
ENTRY e {
  x = f32[4,8] parameter(0)
  y = f32[4,8] parameter(1)
  ROOT s = f32[4,8] add(x, y)
}"""

TWO_KERNELS = """HloModule m
f { a = f32[4,8] parameter(0)
    ROOT n = f32[4,8] negate(a) }
g { b = f32[4,8] parameter(0)
    ROOT e = f32[4,8] exponential(b) }
ENTRY e {
  x = f32[4,8] parameter(0)
  n = f32[4,8] fusion(x), kind=kLoop, calls=f
  m = f32[4,8] fusion(n), kind=kLoop, calls=g
  ROOT t = (f32[4,8], f32[4,8]) tuple(n, m)
}"""


def _python_calls(function, *args) -> int:
    count = 0

    def profile(frame, event, arg):
        nonlocal count
        count += event == "call"

    sys.setprofile(profile)
    try:
        function(*args)
    finally:
        sys.setprofile(None)
    return count


def test_a_one_kernel_call_makes_a_handful_of_python_calls():
    compiled = compile_hlo(TEXT)
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    assert torch.equal(compiled(x, y)[0], x + y)
    stub_launches(compiled)
    compiled(x, y)
    # __call__, the bound ENTRY call, the signature check, the plan's run, the kernel's
    # prepared launch, the stubbed launch and the result's flattening (33 before the plan).
    assert _python_calls(compiled, x, y) <= 8


def test_each_further_kernel_costs_a_few_python_calls_and_results_are_unchanged():
    compiled = compile_hlo(TWO_KERNELS)
    x = torch.randn(4, 8)
    n, m = compiled(x)
    assert torch.equal(n, -x) and torch.allclose(m, torch.exp(-x))
    assert n.data_ptr() != m.data_ptr()
    one = compile_hlo(TEXT)
    stub_launches(one)
    stub_launches(compiled)
    compiled(x)
    one(x, x)
    # The second kernel (its prepared launch and stub) and the root tuple's executor.
    assert _python_calls(compiled, x) - _python_calls(one, x, x) <= 6


VIEW_ROOT = """HloModule m
f { a = f32[4,8] parameter(0)
    ROOT n = f32[4,8] negate(a) }
ENTRY e {
  x = f32[4,8] parameter(0)
  n = f32[4,8] fusion(x), kind=kLoop, calls=f
  ROOT r = f32[32] reshape(n)
}"""


def test_a_host_view_of_a_kernel_output_costs_one_call_and_no_alias_check():
    compiled = compile_hlo(VIEW_ROOT)
    x = torch.randn(4, 8)
    (out,) = compiled(x)
    assert torch.equal(out, -x.reshape(32)) and out.data_ptr() != x.data_ptr()
    one = compile_hlo(TEXT)
    stub_launches(one)
    stub_launches(compiled)
    compiled(x)
    one(x, x)
    # The view's executor, called without a host context; the result needs no aliasing check.
    assert _python_calls(compiled, x) - _python_calls(one, x, x) <= 1


def test_a_view_of_a_parameter_is_still_a_copy():
    compiled = compile_hlo("""HloModule m
ENTRY e {
  x = f32[4,8] parameter(0)
  ROOT r = f32[32] reshape(x)
}""")
    x = torch.randn(4, 8)
    for _ in range(2):
        (out,) = compiled(x)
        assert torch.equal(out, x.reshape(32)) and out.data_ptr() != x.data_ptr()
