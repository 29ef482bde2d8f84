"""The grouped-query and multi-query attention backward (``fusion.autodiff.vjp`` of
``test_attention_gqa``'s forward: Q reshaped to ``[batch, kv_heads, group, tokens, head]``, or
one K and V without a head dim) is the same three kernels as multi-head attention's: the row
statistics and dQ per query head, reading its kv head's K and V; dK and dV per kv head, one
program summing the query heads of its group in order.  Each case matches the reference
evaluator under the interpreter: f32 at ``run --check``'s tolerances, bf16 within 2**-5 of the
largest gradient (the evaluator rounds every intermediate to bf16, the kernels keep f32
between the dots, so ``dS = P * (dP - rowsum)``'s cancellation leaves an error of a few bf16
ulps of the largest value, the same as multi-head attention's backward at these sizes; a
query head summed into the wrong kv head or left out is off by the gradient itself).
The bench-sized bf16 backward
(``bench/programs/vjp_attention_gqa_*``) is compiled for sm_80 and sm_90 by
``tests/conformance/test_bench_kernels_compile.py``."""
from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import fusion
from fusion.autodiff.vjp_module import vjp
from fusion.ir.shape import flatten_shape
from fusion.text.printer import print_hlo
from tests.triton_backend.test_attention_fusion import S, hlo, kinds, random_inputs, run_and_check
from tests.triton_backend.test_attention_gqa import causal, gqa, shapes, sliding_window
from tiling.fusion_pass.attention_mask import KeyBand
from tiling.fusion_pass.priority_fusion import fuse_module
from tiling.fusion_pass.score_band import output_band
from triton_backend.driver.module_compiler import compile_hlo
from triton_backend.host.output_check import compare_output
from triton_backend.reports.compile_report import build_report
from triton_backend.runtime.kernel_loading import TemplateKind
from triton_backend.templates.attention.backward_driver import score_space

CASES = {
    # name: (form, batch, heads, kv heads, tokens, head dim, mask, dtype, tiles or None).
    # Groups of 4 and of 2 query heads; 24 tokens in (16, 32) tiles pad the last query block
    # (the key kernel's loop) and the one key block (the row and query kernels' loop); 48
    # tokens in blocks of 16 skip key blocks below the window as well as above the diagonal.
    "grouped_causal_f32": ("grouped", 2, 4, 2, 64, 16, causal, jnp.float32, None),
    "grouped_sliding_window_bf16_blocks": ("grouped", 1, 4, 2, 32, 16, sliding_window,
                                           jnp.bfloat16, (16, 16)),
    "grouped_unmasked_f32_padded": ("grouped", 1, 4, 2, 24, 16, None, jnp.float32, (16, 32)),
    "grouped_mqa_causal_bf16": ("grouped", 1, 4, 1, 16, 32, causal, jnp.bfloat16, None),
    "grouped_mqa_unmasked_bf16_blocks": ("grouped", 1, 2, 1, 32, 16, None, jnp.bfloat16,
                                         (16, 16)),
    "shared_mqa_sliding_window_f32_blocks": ("shared", 1, 2, 1, 48, 16, sliding_window,
                                             jnp.float32, (16, 16)),
}

#: The (query, key) band each mask leaves visible (None: every block is visited).
BANDS = {causal: KeyBand(None, 0), sliding_window: KeyBand(-7, 0), None: None}


def check_bf16(text: str, tiling=None):
    """Compile, run under the interpreter, and compare every output with the evaluator's
    within 2**-5 of its largest magnitude (see the module docstring)."""
    module = fusion.parse_hlo(text)
    compiled = compile_hlo(module, tiling=tiling)
    arrays = random_inputs(module)
    got = compiled(*[torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16) for a in arrays])
    for i, (g, w) in enumerate(zip(got, fusion.evaluate(module, *arrays))):
        w = np.asarray(w, np.float32)
        error = np.abs(g.float().numpy() - w).max()
        assert error <= 2 ** -5 * np.abs(w).max(), (i, error, np.abs(w).max())
    return compiled


@pytest.mark.parametrize("case", sorted(CASES))
def test_grouped_query_backward_is_three_kernels_and_matches(case):
    form, batch, heads, kv_heads, tokens, head_dim, visible, dtype, tiles = CASES[case]
    forward = hlo(gqa(form, visible), *shapes(form, kv_heads, dtype, batch, heads, tokens,
                                               head_dim))
    text = print_hlo(vjp(fusion.parse_hlo(forward)))
    result = fuse_module(fusion.parse_hlo(text))
    made = [d for d in result.decisions if d.kind == "attention" and d.fused
            and "attention backward in 3 kernels" in d.reason]
    assert made, [str(d) for d in result.decisions if d.kind == "attention"]
    fused = result.module
    fusions = [i.name for i in fused.entry.instructions if i.opcode == "fusion"]
    check = run_and_check if dtype == jnp.float32 else check_bf16
    compiled = check(text, tiling=None if tiles is None else dict.fromkeys(fusions, tiles))
    assert [f.kind for f in compiled.fusions.values()] == [TemplateKind.ATTENTION_BACKWARD] * 3
    group = heads // kv_heads
    spaces = {}
    for name in fusions:
        space = spaces.setdefault(score_space(fused, name).kind, score_space(fused, name))
        # the group is told apart from the batch: its extent, K and V's batch without it
        assert math.prod(space.group) == group and math.prod(space.kv_batch) == batch * kv_heads
        comp = fused.computation(fused.entry.instruction(name).attr("calls"))
        band = output_band(fused, comp, space)
        assert band == (None if space.kind == "rows" else BANDS[visible]), (name, band)
        grid = compiled.fusions[name].grid
        # programs per query head for the rows and dQ, per kv head for dK and dV (the group
        # summed in one program's loop: no atomics, no per-query-head dK in memory)
        per = batch * kv_heads if space.kind == "key" else batch * heads
        assert math.prod(grid) == per * -(-tokens // compiled.fusions[name].tile_sizes[
            space.kind == "key"]), (space.kind, grid)
    assert sorted(spaces) == ["key", "query", "rows"]
    forms = {k["attention_form"]: k["attention_form_reason"]
             for k in build_report(compiled).to_json()["fusions"]}
    assert f"contracting the queries of {group} query heads" in forms["backward key"], forms


def test_repeated_kv_backward_holds_the_three_kernels_and_matches():
    """K and V repeated with ``jnp.repeat``: the backward is multi-head attention's three
    kernels, and the repeat's vjp sums each group's dK and dV in kernels of their own that
    read the key kernel's outputs (such a reader was once taken for a kernel computing those
    outputs, and the pass failed with a KeyError); they read the key kernel's transposed dV
    rather than transposing a dV of their own, which would keep dV's dot and the
    probabilities it reads in memory."""
    forward = hlo(gqa("repeat", causal), *shapes("repeat", 2, jnp.float32, 1, 4, 32, 16))
    compiled = run_and_check(print_hlo(vjp(fusion.parse_hlo(forward))))
    kinds = [f.kind for f in compiled.fusions.values()]
    assert kinds.count(TemplateKind.ATTENTION_BACKWARD) == 3, kinds
    assert len(kinds) == 5, kinds  # and the two group sums
    written = [leaf.dims for i in compiled.module.entry.instructions if i.opcode == "fusion"
               for leaf in flatten_shape(i.shape)]
    assert not [dims for dims in written if dims[-2:] == (32, 32)], written  # no score matrix


def test_grouped_query_block_backward_with_rope_holds_the_three_kernels_and_matches():
    """A Llama-style block's backward (projections, rotate-half RoPE on Q and K, causal
    grouped-query attention, output projection): the kernels RoPE's vjp makes read the dQ and
    dK the attention kernels write (once taken for kernels computing them: the pass failed with
    a KeyError), and the rest matches the evaluator at 2e-5 of the largest gradient, as the
    multi-head block of ``test_attention_backward`` does."""
    def block(x, w_q, w_k, w_v, w_o):
        b, t, d = x.shape
        kv, hd = w_k.shape[1] // 8, 8

        def rope(a):  # rotate-half at positions 0..t-1
            angles = jnp.arange(t, dtype=a.dtype)[:, None] * (0.5 ** jnp.arange(hd // 2))
            angles = jnp.concatenate([angles, angles], axis=-1)
            rotated = jnp.concatenate([-a[..., hd // 2:], a[..., :hd // 2]], axis=-1)
            return a * jnp.cos(angles) + rotated * jnp.sin(angles)

        q = rope((x @ w_q).reshape(b, t, -1, hd).transpose(0, 2, 1, 3))
        k = rope((x @ w_k).reshape(b, t, kv, hd).transpose(0, 2, 1, 3))
        v = (x @ w_v).reshape(b, t, kv, hd).transpose(0, 2, 1, 3)
        a = gqa("grouped", causal)(q, k, v)
        return x + jnp.tanh(a.transpose(0, 2, 1, 3).reshape(b, t, -1) @ w_o)

    f32 = jnp.float32
    args = (S((1, 32, 32), f32), S((32, 32), f32), S((32, 16), f32), S((32, 16), f32),
            S((32, 32), f32))
    module = vjp(fusion.parse_hlo(hlo(block, *args)))
    compiled = compile_hlo(print_hlo(module))
    kinds = [f.kind for f in compiled.fusions.values()]
    assert kinds.count(TemplateKind.ATTENTION_BACKWARD) == 3, kinds
    arrays = [a * 0.3 for a in random_inputs(module)]  # scores of a few units, as trained
    got = compiled(*[torch.from_numpy(a) for a in arrays])
    for g, w in zip(got, fusion.evaluate(module, *arrays)):
        w = np.asarray(w)
        assert np.abs(g.numpy() - w).max() <= 2e-5 * np.abs(w).max()


@pytest.mark.parametrize("kv_heads,dtype", [(4, jnp.float32), (2, jnp.bfloat16)])
def test_jax_grad_of_jax_dot_product_attention_is_the_backward_s_three_kernels(kv_heads, dtype):
    """``jax.grad`` through ``jax.nn.dot_product_attention`` (its own tokens-first, grouped
    form, and the reductions over unit dims and tuples of inlined calls its jvp writes) is the
    attention backward's rows, query and key kernels, dQ stored in the caller's order by
    its kernel; one run of it matches the reference evaluator (at ``run --check``'s
    tolerances, as ``run_and_check`` compares) and JAX itself."""
    def attention(q, k, v):
        return jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation="xla")

    def loss(q, k, v, w):
        return jnp.sum(attention(q, k, v).astype(jnp.float32) * w)

    grad = jax.grad(loss, argnums=(0, 1, 2))
    shapes = (jax.ShapeDtypeStruct((2, 32, 4, 8), dtype),
              jax.ShapeDtypeStruct((2, 32, kv_heads, 8), dtype),
              jax.ShapeDtypeStruct((2, 32, kv_heads, 8), dtype),
              jax.ShapeDtypeStruct((2, 32, 4, 8), jnp.float32))
    lowered = jax.jit(grad).lower(*shapes)
    text = lowered.as_text(dialect="hlo")
    module = fusion.parse_hlo(text)
    compiled = compile_hlo(module)
    assert sorted(k.value for k in kinds(compiled)) == ["attention_backward"] * 3
    arrays = random_inputs(module, seed=2)
    got = compiled(*[torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
                     if a.dtype.name == "bfloat16" else torch.from_numpy(a) for a in arrays])
    leaves = flatten_shape(module.entry.root.shape)
    evaluated = fusion.evaluate(module, *arrays)
    assert len(got) == len(evaluated) == len(leaves)
    for i, (g, w, leaf) in enumerate(zip(got, evaluated, leaves)):
        result = compare_output(f"o{i}", np.asarray(w), g.float().numpy(), leaf.dtype)
        assert result.passed, result.describe()
    want = lowered.compile()(*[jnp.asarray(a) for a in arrays])  # XLA's run of the same text
    tol = 1e-4 if dtype == jnp.float32 else 3e-2
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.float().numpy(), np.asarray(w, np.float32), atol=tol,
                                   rtol=tol)
