"""A compiled module's call runs a prepared plan (``driver/host_plan``): pinned as a work
count (Python function calls per call, which is deterministic), not as a time."""
from __future__ import annotations

import sys

import torch

from triton_backend import compile_hlo

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


def _stub_kernels(compiled) -> None:
    """Launches that do nothing, so only the host's work is counted (the plan and the ENTRY
    call bind the launches when first built: they are built again, with the stubs)."""
    class InterpretedFunction:  # named as the interpreter's: a CPU call uses the module as is
        def __getitem__(self, grid):
            return lambda *args, **kwargs: None

    for fusion in compiled.fusions.values():
        fusion.module.KERNEL = InterpretedFunction()
    compiled.__dict__.pop("_plans", None)
    compiled.__dict__.pop("_entry_call", None)


def test_a_one_kernel_call_makes_a_handful_of_python_calls():
    compiled = compile_hlo(TEXT)
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    assert torch.equal(compiled(x, y)[0], x + y)
    _stub_kernels(compiled)
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
    _stub_kernels(one)
    _stub_kernels(compiled)
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
    _stub_kernels(one)
    _stub_kernels(compiled)
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
