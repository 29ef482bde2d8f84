"""A compiled module's call decides once what it may (``driver/prepared_call``): a signature
that passed the full validation unchanged skips it, and kernel outputs skip the aliasing
check; everything else (a new signature, a view, autograd, an output that could alias) still
takes the full path with its clear error, and results never change."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from fusion.errors import EvaluationError
from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo
from tests.triton_backend.call_counting import count_calls
from triton_backend import compile_hlo
from triton_backend.driver import module_runner, prepared_call
from triton_backend.driver.prepared_call import AcceptedSignatures

ROOT = Path(__file__).resolve().parents[2]

TEXT = """HloModule m
ENTRY e {
  x = f32[4,8] parameter(0)
  y = f32[4,8] parameter(1)
  ROOT s = f32[4,8] add(x, y)
}"""


def _counted(monkeypatch):
    return count_calls(monkeypatch, module_runner, "validate_arguments")


def test_a_signature_validated_once_is_not_validated_again(monkeypatch):
    compiled = compile_hlo(TEXT)
    calls = _counted(monkeypatch)
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    for _ in range(3):
        (out,) = compiled(x, y)
        assert torch.equal(out, x + y) and out.data_ptr() not in (x.data_ptr(), y.data_ptr())
    assert len(calls) == 1
    with pytest.raises(EvaluationError, match=r"has shape \[8, 4\]"):
        compiled(torch.randn(8, 4), y)  # a new signature: the full check and its message


@pytest.mark.parametrize("make", [
    lambda: torch.randn(8, 4).t(),                       # a transposed view: copied
    lambda: torch.randn(4, 8, requires_grad=True),       # autograd: detached
])
def test_other_arguments_take_the_full_path_every_time(monkeypatch, make):
    compiled = compile_hlo(TEXT)
    calls = _counted(monkeypatch)
    y = torch.randn(4, 8)
    for _ in range(2):
        x = make()
        (out,) = compiled(x, y)
        assert torch.equal(out, x.detach() + y) and not out.requires_grad
    assert len(calls) == 2


def test_an_output_that_could_alias_an_input_is_still_copied():
    compiled = compile_hlo("""HloModule m
ENTRY e {
  x = f32[4] parameter(0)
  n = f32[4] negate(x)
  ROOT t = (f32[4], f32[4], f32[4]) tuple(x, n, n)
}""")
    x = torch.randn(4)
    for _ in range(2):
        a, b, c = compiled(x)
        assert torch.equal(a, x) and a.data_ptr() != x.data_ptr()
        assert torch.equal(b, -x) and b.data_ptr() != c.data_ptr()


def test_host_overhead_bench_reports_rows(capsys):
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        spec = importlib.util.spec_from_file_location("bench_host_overhead",
                                                      ROOT / "bench" / "host_overhead.py")
        bench = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(bench)
    finally:
        sys.path.remove(str(ROOT / "bench"))
    program = ROOT / "tests" / "data" / "hlo" / "softmax.before.hlo"
    assert bench.main([str(program), "--json", "--calls", "5"]) == 0
    (row,) = json.loads(capsys.readouterr().out)["rows"]
    assert row["kernels"] == 1 and row["host_us_per_call"] > 0 and row["floor_us"] > 0
    assert row["python_calls_per_call"] > 0


def test_results_match_the_evaluator_on_repeated_calls():
    module = parse_hlo(TEXT)
    compiled = compile_hlo(module)
    rng = np.random.default_rng(0)
    for _ in range(3):
        x, y = (rng.standard_normal((4, 8)).astype(np.float32) for _ in range(2))
        (out,) = compiled(torch.from_numpy(x), torch.from_numpy(y))
        np.testing.assert_array_equal(out.numpy(), evaluate(module, x, y)[0])


def test_kernel_outputs_in_a_column_major_layout_come_back_contiguous():
    compiled = compile_hlo("""HloModule m
ENTRY e {
  x = f32[3,5]{1,0} parameter(0)
  ROOT t = f32[5,3]{0,1} transpose(x), dimensions={1,0}
}""")
    x = torch.randn(3, 5)
    for _ in range(2):
        (out,) = compiled(x)
        assert out.is_contiguous() and torch.equal(out, x.t())


#: Arguments unlike ``torch.zeros(4, 8)`` in one way each: none may pass as its signature.
UNLIKE = {
    "transposed": lambda: torch.zeros(8, 4).t(),
    "dtype": lambda: torch.zeros(4, 8, dtype=torch.float64),
    "shape": lambda: torch.zeros(4, 9),
    "requires_grad": lambda: torch.zeros(4, 8, requires_grad=True),
    "negative view": lambda: torch.zeros(4, 8)._neg_view(),
    "subclass": lambda: torch.nn.Parameter(torch.zeros(4, 8), requires_grad=False),
    "device": lambda: torch.zeros(4, 8, device="meta"),
    "not a tensor": lambda: np.zeros((4, 8), np.float32),
}


@pytest.mark.parametrize("c_check", [True, False], ids=["c++ check", "python signature"])
@pytest.mark.parametrize("unlike", sorted(UNLIKE))
def test_only_a_remembered_signature_matches(monkeypatch, c_check, unlike):
    if not c_check:
        monkeypatch.setattr(prepared_call, "TensorGuards", None)
    accepted = AcceptedSignatures(enabled=True)
    x = torch.zeros(4, 8)
    assert accepted.remember((x, x), (x, x))
    assert accepted.matches((torch.ones(4, 8), torch.ones(4, 8)))
    assert not accepted.matches((UNLIKE[unlike](), x))
    assert not accepted.matches((x,))  # another number of arguments
    assert accepted.matches((x, torch.ones(4, 8)))  # still known after a miss


def test_a_column_major_kernel_output_is_made_contiguous_for_a_row_major_reader():
    """A launch skips ``contiguous()`` only for operands known contiguous: the permuted view
    a column-major output comes back as is not one of them."""
    module = parse_hlo("""HloModule m
f { a = f32[4,8]{1,0} parameter(0)
    ROOT n = f32[4,8]{0,1} negate(a) }
g { b = f32[4,8]{1,0} parameter(0)
    ROOT e = f32[4,8]{1,0} exponential(b) }
ENTRY e {
  x = f32[4,8]{1,0} parameter(0)
  n = f32[4,8]{0,1} fusion(x), kind=kLoop, calls=f
  ROOT m = f32[4,8]{1,0} fusion(n), kind=kLoop, calls=g
}""")
    compiled = compile_hlo(module)
    x = np.arange(32, dtype=np.float32).reshape(4, 8) / 32
    for _ in range(2):
        (out,) = compiled(torch.from_numpy(x))
        np.testing.assert_allclose(out.numpy(), evaluate(module, x)[0], rtol=1e-6)
