"""The grouped GEMM template (``templates/ragged_dot``) under the interpreter, against brute
force: rows by group (tiles that straddle groups, empty groups, rows in no group, sizes past
the rows, a negative size), the transposed expert matrices of the input gradient, and the
per-group product of the weight gradient; bf16 and f32.  Tiles of 16 give many tiles per
group, so the walk over the groups is what is tested."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo
from tests.fusion.test_ragged_dot import grouped, per_group
from tests.triton_backend.xla_three_way import run_compiled
from triton_backend import compile_hlo
from triton_backend.runtime.kernel_loading import TemplateKind

M, K, N = 70, 24, 40

ROWS = """HloModule moe
ENTRY e {{
  a = {t}[70,24] parameter(0)
  b = {t}[4,{rhs}] parameter(1)
  g = s32[4] parameter(2)
  ROOT r = f32[70,40] ragged-dot(a, b, g), lhs_contracting_dims={{1}}, rhs_contracting_dims={{{c}}}, lhs_ragged_dims={{0}}, rhs_group_dims={{0}}
}}
"""
CONTRACTING = """HloModule moe_weight_grad
ENTRY e {{
  a = {t}[70,24] parameter(0)
  b = {t}[70,40] parameter(1)
  g = s32[4] parameter(2)
  ROOT r = f32[4,24,40] ragged-dot(a, b, g), lhs_contracting_dims={{0}}, rhs_contracting_dims={{0}}, lhs_ragged_dims={{0}}
}}
"""
SIZES = {
    "straddling": [17, 30, 5, 18],         # every row in a group, boundaries inside tiles
    "gaps": [20, 0, 33, 2],                # an empty group; 15 rows in none (zeros)
    "too_many": [50, 40, 9, 1],            # past the 70 rows: clipped
    "negative": [25, -7, 30, 3],           # a negative size counts as 0
}


def _run(text: str, args: list[np.ndarray], tiles=(16, 16, 16)):
    compiled = compile_hlo(text, cache=False, tiling=None)
    (name,) = compiled.fusions
    compiled = compile_hlo(text, cache=False, tiling={name: tiles})
    assert compiled.fusions[name].kind == TemplateKind.RAGGED_DOT
    (got,) = run_compiled(text, *args, compiled=compiled)
    return got


def _operands(rhs_shape, t: str, seed: int, rows=M):
    rng = np.random.default_rng(seed)
    cast = (lambda a: a.astype(ml_dtypes.bfloat16)) if t == "bf16" else np.float32
    return cast(rng.standard_normal((rows, K))), cast(rng.standard_normal(rhs_shape))


@pytest.mark.parametrize("t", ["f32", "bf16"])
@pytest.mark.parametrize("case", sorted(SIZES))
def test_rows_by_group(case, t):
    sizes = np.int32(SIZES[case])
    a, b = _operands((4, K, N), t, seed=len(case))
    got = _run(ROWS.format(t=t, rhs=f"{K},{N}", c=1), [a, b, sizes])
    want = grouped(a.astype(np.float32), b.astype(np.float32), np.maximum(sizes, 0))
    tol = 1e-4 if t == "f32" else 2e-2
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_rows_by_group_with_transposed_expert_matrices():
    # The input gradient's form: the experts' matrices [g, n, k], contracted on their last dim.
    sizes = np.int32(SIZES["gaps"])
    a, b = _operands((4, N, K), "f32", seed=5)
    text = ROWS.format(t="f32", rhs=f"{N},{K}", c=2)
    got = _run(text, [a, b, sizes])
    np.testing.assert_allclose(got, grouped(a, np.swapaxes(b, 1, 2), sizes), rtol=1e-4,
                               atol=1e-4)
    (want,) = evaluate(parse_hlo(text), a, b, sizes)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("t", ["f32", "bf16"])
@pytest.mark.parametrize("case", ["straddling", "gaps", "negative"])
def test_contracting_by_group(case, t):
    sizes = np.int32(SIZES[case])
    a, b = _operands((M, N), t, seed=7)
    got = _run(CONTRACTING.format(t=t), [a, b, sizes])
    want = per_group(a.astype(np.float32), b.astype(np.float32), np.maximum(sizes, 0))
    tol = 1e-4 if t == "f32" else 2e-2
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_a_mixture_of_experts_layer_trains_through_the_torch_op():
    # Forward and backward (the VJP's ragged dots, on the template too) against PyTorch's
    # autograd of one matmul per expert's rows.
    import torch

    from triton_backend.integrations.torch_op import torch_op

    text = """HloModule moe_layer
ENTRY e {
  x = f32[12,8] parameter(0)
  w = f32[3,8,5] parameter(1)
  g = s32[3] parameter(2)
  r = f32[12,5] ragged-dot(x, w, g), lhs_contracting_dims={1}, rhs_contracting_dims={1}, lhs_ragged_dims={0}, rhs_group_dims={0}
  ROOT t = f32[12,5] tanh(r)
}
"""
    op = torch_op(text, "ragged_moe_layer")
    rng = np.random.default_rng(0)
    x = torch.tensor(rng.standard_normal((12, 8)), dtype=torch.float32, requires_grad=True)
    w = torch.tensor(rng.standard_normal((3, 8, 5)), dtype=torch.float32, requires_grad=True)
    sizes = [4, 5, 2]  # the last row in no group
    out = op(x, w, torch.tensor(sizes, dtype=torch.int32))
    out = out[0] if isinstance(out, tuple) else out
    out.sum().backward()
    xs, ws = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    parts, start = [], 0
    for j, n in enumerate(sizes):
        parts.append(xs[start:start + n] @ ws[j])
        start += n
    want = torch.tanh(torch.cat(parts + [torch.zeros(12 - start, 5)]))
    want.sum().backward()
    for got, ref in ((out, want), (x.grad, xs.grad), (w.grad, ws.grad)):
        np.testing.assert_allclose(got.detach().numpy(), ref.detach().numpy(), rtol=1e-5,
                                   atol=1e-5)


GATED = """HloModule gated_experts
ENTRY e {{
  a = {t}[70,24] parameter(0)
  b = {t}[4,24,40] parameter(1)
  g = s32[4] parameter(2)
  up = f32[70,40] parameter(3)
  r = f32[70,40] ragged-dot(a, b, g), lhs_contracting_dims={{1}}, rhs_contracting_dims={{1}}, lhs_ragged_dims={{0}}, rhs_group_dims={{0}}
  s = f32[70,40] logistic(r)
  h = f32[70,40] multiply(r, s)
  m = f32[70,40] multiply(h, up)
  ROOT o = {t}[70,40] convert(m)
}}
"""


@pytest.mark.parametrize("t", ["f32", "bf16"])
def test_an_elementwise_epilogue_is_computed_in_the_grouped_gemm(t):
    # SwiGLU's gate: silu(x . w[group]) * up, in one kernel, the f32 product never stored.
    sizes = np.int32(SIZES["gaps"])
    a, b = _operands((4, K, N), t, seed=9)
    up = np.random.default_rng(10).standard_normal((M, N)).astype(np.float32)
    text = GATED.format(t=t)
    got = _run(text, [a, b, sizes, up])  # one fusion, the template's
    (want,) = evaluate(parse_hlo(text), a, b, sizes, up)
    tol = 1e-5 if t == "f32" else 1e-2
    np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32),
                               rtol=tol, atol=tol)
    product = grouped(a.astype(np.float32), b.astype(np.float32), sizes)
    brute = product / (1 + np.exp(-product)) * up
    np.testing.assert_allclose(np.asarray(got, np.float32), brute, rtol=3 * tol + 1e-4,
                               atol=3 * tol + 1e-4)


def test_a_prologue_and_a_second_reader_stay_apart():
    # The template reads its operands as they are, and writes one output: the squared lhs is
    # a kernel of its own, and so is the second reader of the product.
    text = """HloModule moe_prologue
ENTRY e {
  a = f32[70,24] parameter(0)
  b = f32[4,24,40] parameter(1)
  g = s32[4] parameter(2)
  sq = f32[70,24] multiply(a, a)
  r = f32[70,40] ragged-dot(sq, b, g), lhs_contracting_dims={1}, rhs_contracting_dims={1}, lhs_ragged_dims={0}, rhs_group_dims={0}
  t = f32[70,40] tanh(r)
  e = f32[70,40] exponential(r)
  ROOT o = (f32[70,40], f32[70,40]) tuple(t, e)
}
"""
    sizes = np.int32(SIZES["straddling"])
    a, b = _operands((4, K, N), "f32", seed=11)
    compiled = compile_hlo(text, cache=False)
    kinds = sorted(str(f.kind) for f in compiled.fusions.values())
    assert kinds.count(str(TemplateKind.RAGGED_DOT)) == 1 and len(kinds) >= 2, kinds
    got = run_compiled(text, a, b, sizes, compiled=compiled)
    product = grouped(a * a, b, sizes)
    np.testing.assert_allclose(got[0], np.tanh(product), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got[1], np.exp(product), rtol=1e-4, atol=1e-4)
