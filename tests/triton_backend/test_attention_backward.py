"""The attention backward (``fusion.autodiff.vjp`` of attention as JAX lowers it) compiles to
at most three kernels (the row statistics, dQ, dK with dV: ``tiling.fusion_pass.
attention_backward``) that match the reference evaluator under the interpreter; a backward the
kernels do not fit keeps today's fusion and the decision says why.  The bench-sized bf16 and
f32 backward (``bench/programs/vjp_attention_*``) are compiled for sm_80 and sm_90 by
``tests/conformance/test_bench_kernels_compile.py``: no spills, bf16 on ``wgmma``.  Grouped-query
and multi-query attention's backward: ``test_attention_backward_gqa``."""
from __future__ import annotations


import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import fusion
from fusion.autodiff.vjp_module import vjp
from fusion.text.printer import print_hlo
from tests.triton_backend.test_attention_fusion import (S, attention, hlo, random_inputs,
                                                         run_and_check)
from tests.triton_backend.test_attention_one_pass import masked_attention
from tiling.fusion_pass.attention_mask import KeyBand
from tiling.fusion_pass.priority_fusion import fuse_module
from tiling.fusion_pass.score_band import output_band, reduction_band
from triton_backend.driver.module_compiler import compile_hlo
from triton_backend.runtime.kernel_loading import TemplateKind
from triton_backend.templates.attention.backward_driver import score_space


def backward(f, shape, dtype) -> str:
    """The vjp module of ``f(q, k, v)`` at ``shape`` (all three alike)."""
    return print_hlo(vjp(fusion.parse_hlo(hlo(f, *[S(shape, dtype)] * 3))))


CASES = {
    # name: (forward, [batch, heads, tokens, head], dtype, tiles or None for the default)
    "causal_f32": (attention(True), (1, 2, 64, 32), jnp.float32, None),
    "causal_bf16_several_blocks": (attention(True), (1, 1, 48, 16), jnp.bfloat16, (16, 16)),
    "unmasked_f32_padded": (attention(False), (1, 1, 40, 8), jnp.float32, (16, 32)),
    "sliding_window_f32": (masked_attention(lambda q, k: (k <= q) & (k > q - 8)),
                           (1, 1, 48, 8), jnp.float32, (16, 16)),
}

#: The (query, key) band each case's mask leaves visible (None: every block is visited).
BANDS = {"causal_f32": KeyBand(None, 0), "causal_bf16_several_blocks": KeyBand(None, 0),
         "unmasked_f32_padded": None, "sliding_window_f32": KeyBand(-7, 0)}


@pytest.mark.parametrize("case", sorted(CASES))
def test_attention_backward_is_three_kernels_and_matches(case):
    forward, shape, dtype, tiles = CASES[case]
    text = backward(forward, shape, dtype)
    fused = fuse_module(fusion.parse_hlo(text)).module
    fusions = [i.name for i in fused.entry.instructions if i.opcode == "fusion"]
    tiling = None if tiles is None else dict.fromkeys(fusions, tiles)
    compiled = run_and_check(text, tiling=tiling)
    kinds = [f.kind for f in compiled.fusions.values()]
    assert kinds == [TemplateKind.ATTENTION_BACKWARD] * 3, kinds
    for name in fusions:  # the blocks skipped are those the mask hides
        space = score_space(fused, name)
        comp = fused.computation(fused.entry.instruction(name).attr("calls"))
        band = output_band(fused, comp, space)
        assert band == (None if space.kind == "rows" else BANDS[case]), (name, band)
        # The row statistics (max, sum, sum(p * dp)) skip them too: the rows kernel's loops.
        statistics = reduction_band(fused, comp, space)
        assert statistics == (BANDS[case] if space.kind == "rows" else None), (name, statistics)
        source = compiled.fusions[name].source
        assert (statistics is None) == ("blocks the mask hides" not in source
                                        or space.kind != "rows"), name


def test_transformer_block_backward_holds_the_three_kernels_and_matches():
    """A training step's backward: q, k, v sliced from one projection dot, the forward's
    ``P @ V`` (which the backward's ``dP`` depends on) left to the other stages, its row max
    and sum read by the backward kernels rather than computed again.  The other kernels
    (projection dots) sum in another order than the evaluator: compared at 2e-5 of the
    largest gradient, as they are on main."""
    def block(x, w_qkv, w_o):
        b, t, d = x.shape
        q, k, v = jnp.split(x @ w_qkv, 3, axis=-1)

        def split(a):
            return a.reshape(b, t, 2, d // 2).transpose(0, 2, 1, 3)

        s = jnp.einsum("bhqd,bhkd->bhqk", split(q), split(k)) / 4.0
        s = jnp.where(jnp.tril(jnp.ones((t, t), dtype=bool)), s, -1e30)
        a = jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), split(v))
        return x + jnp.tanh(a.transpose(0, 2, 1, 3).reshape(b, t, d) @ w_o)

    shapes = S((1, 32, 32), jnp.float32), S((32, 96), jnp.float32), S((32, 32), jnp.float32)
    module = vjp(fusion.parse_hlo(hlo(block, *shapes)))
    compiled = compile_hlo(print_hlo(module))
    kinds = [f.kind for f in compiled.fusions.values()]
    assert kinds.count(TemplateKind.ATTENTION_BACKWARD) == 3, kinds
    arrays = random_inputs(module)
    got = compiled(*[torch.from_numpy(a) for a in arrays])
    for g, w in zip(got, fusion.evaluate(module, *arrays)):
        w = np.asarray(w)
        assert np.abs(g.numpy() - w).max() <= 2e-5 * np.abs(w).max()
