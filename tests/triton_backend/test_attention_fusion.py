"""Attention as JAX lowers it becomes one flash-attention-style kernel (fusion pass + template),
matching the reference evaluator under the interpreter; where the pattern does not apply the
module stays at no more than 3 kernels and still matches.  The realistic f32[4,8,512,64]
program fuses to one kernel that compiles for sm_90 without spills (PTX only, no GPU)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fusion
from tests.triton_backend.test_dot_fusion_ptx import ptx_counts
from tiling.fusion_pass.priority_fusion import fuse_module
from triton_backend.templates.attention.driver import compile_attention_fusion, is_attention_fusion
from triton_backend.driver.module_compiler import compile_hlo
from triton_backend.host.output_check import compare_output
from triton_backend.reports.ptx_report import find_ptxas

S = jax.ShapeDtypeStruct


def attention(causal: bool, scale: float = 8.0, bias: bool = False):
    """JAX attention over ``[..., queries, head]`` operands (``bias``: an additive score bias)."""
    def f(q, k, v, *extra):
        s = jnp.einsum("...qd,...kd->...qk", q, k) / scale
        if bias:
            s = s + extra[0]
        if causal:
            t, n = q.shape[-2], k.shape[-2]
            s = jnp.where(jnp.tril(jnp.ones((t, n), bool)), s, -1e30)
        return jnp.einsum("...qk,...kd->...qd", jax.nn.softmax(s, axis=-1), v)
    return f


def hlo(f, *shapes) -> str:
    return jax.jit(f).lower(*shapes).as_text(dialect="hlo")


def random_inputs(module: fusion.HloModule, seed: int = 0) -> list[np.ndarray]:
    import ml_dtypes  # noqa: F401 - registers bfloat16 with numpy
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(p.shape.dims).astype(np.float32)
            .astype(p.shape.element_type.numpy_name) for p in module.entry.parameters]


def run_and_check(text: str, tiling=None):
    """Compile the whole module, run it under the interpreter, compare every output with the
    reference evaluator at ``run --check``'s tolerances; returns the compiled module."""
    import torch

    module = fusion.parse_hlo(text)
    compiled = compile_hlo(module, tiling=tiling)
    arrays = random_inputs(module)
    tensors = [torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
               if a.dtype.name == "bfloat16" else torch.from_numpy(a) for a in arrays]
    got = compiled(*tensors)
    want = fusion.evaluate(module, *arrays)
    want = want if isinstance(want, (tuple, list)) else (want,)
    leaves = fusion.ir.shape.flatten_shape(module.entry.root.shape)
    assert len(got) == len(want) == len(leaves)
    for i, (g, w, shape) in enumerate(zip(got, want, leaves)):
        result = compare_output(f"o{i}", np.asarray(w), g.float().numpy(), shape.dtype)
        assert result.passed, result.describe()
    return compiled


def kinds(compiled) -> list[str]:
    return sorted(f.kind for f in compiled.fusions.values())


CASES = {
    # name: (causal, dtype, q shape, k shape, v shape)
    "causal_f32": (True, jnp.float32, (2, 2, 16, 8), (2, 2, 16, 8), (2, 2, 16, 8)),
    "causal_bf16": (True, jnp.bfloat16, (2, 2, 16, 8), (2, 2, 16, 8), (2, 2, 16, 8)),
    "plain_f32": (False, jnp.float32, (2, 2, 16, 8), (2, 2, 16, 8), (2, 2, 16, 8)),
    "plain_f16": (False, jnp.float16, (1, 2, 16, 16), (1, 2, 16, 16), (1, 2, 16, 16)),
    # head dim 12, value dim 20, 40 keys in blocks of 16 (a partial last block), 24 queries
    "ragged_f32": (False, jnp.float32, (1, 2, 24, 12), (1, 2, 40, 12), (1, 2, 40, 20)),
    "no_batch_bf16": (True, jnp.bfloat16, (32, 16), (32, 16), (32, 16)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_attention_is_one_kernel_and_matches(name):
    causal, dtype, qs, ks, vs = CASES[name]
    text = hlo(attention(causal), S(qs, dtype), S(ks, dtype), S(vs, dtype))
    fused = fuse_module(fusion.parse_hlo(text))
    decisions = [d for d in fused.decisions if d.kind == "attention"]
    assert [d.fused for d in decisions] == [True], [str(d) for d in decisions]
    compiled = run_and_check(text)
    assert kinds(compiled) == ["attention"]
    if name == "ragged_f32":  # several query and key blocks: the loops and masks run
        (fusion_name,) = compiled.fusions
        small = compile_attention_fusion(compiled.module, fusion_name, tile_sizes=(16, 16))
        assert small.grid == (2, 2) and small.tile_sizes == (16, 16)
        run_and_check(text, tiling={fusion_name: (16, 16)})


def test_additive_bias_read_at_the_score_index():
    shapes = [S((1, 2, 16, 8), jnp.float32)] * 3 + [S((1, 2, 16, 16), jnp.float32)]
    compiled = run_and_check(hlo(attention(False, bias=True), *shapes))
    assert kinds(compiled) == ["attention"]


def test_normalized_scores_also_returned_stay_three_kernels():
    def f(q, k, v):
        p = jax.nn.softmax(jnp.einsum("bqd,bkd->bqk", q, k), axis=-1)
        return jnp.einsum("bqk,bkd->bqd", p, v), p

    text = hlo(f, *[S((2, 16, 8), jnp.float32)] * 3)
    fused = fuse_module(fusion.parse_hlo(text))
    (decision,) = [d for d in fused.decisions if d.kind == "attention"]
    assert not decision.fused and "also read elsewhere" in decision.reason
    compiled = run_and_check(text)
    assert len(compiled.fusions) <= 3 and "attention" not in kinds(compiled)


def test_softmax_over_the_query_dim_is_not_attention():
    def f(q, k, v):  # normalized over queries, contracted over keys: two different dims
        p = jax.nn.softmax(jnp.einsum("bqd,bkd->bqk", q, k), axis=-2)
        return jnp.einsum("bqk,bkd->bqd", p, v)

    text = hlo(f, *[S((2, 16, 8), jnp.float32)] * 3)
    fused = fuse_module(fusion.parse_hlo(text))
    (decision,) = [d for d in fused.decisions if d.kind == "attention"]
    assert not decision.fused and "not attention" in decision.reason
    compiled = run_and_check(text)
    assert len(compiled.fusions) <= 3 and "attention" not in kinds(compiled)


def test_two_dots_without_normalization_are_not_attention():
    def f(a, b, c):
        return jnp.tanh(a @ b) @ c

    text = hlo(f, S((16, 16), jnp.float32), S((16, 16), jnp.float32), S((16, 16), jnp.float32))
    compiled = run_and_check(text)
    assert "attention" not in kinds(compiled)


def realistic(dtype) -> str:
    shape = S((4, 8, 512, 64), dtype)
    return hlo(attention(True), shape, shape, shape)


requires_ptxas = pytest.mark.skipif(find_ptxas(90) is None,
                                    reason="ptxas not found in the Triton wheel")


@requires_ptxas
def test_realistic_attention_is_one_kernel_without_spills_on_sm90():
    requests = []
    for dtype in (jnp.float32, jnp.bfloat16):
        module = fuse_module(fusion.parse_hlo(realistic(dtype))).module
        fusions = [i.name for _, i in module.fusions()]
        assert len(fusions) == 1 and is_attention_fusion(module, fusions[0])
        compiled = compile_attention_fusion(module, fusions[0], target="sm_90")
        requests.append([str(compiled.kernel_path), 90])
    f32, bf16 = ptx_counts(requests)
    assert f32["spills"] == 0 and bf16["spills"] == 0, (f32, bf16)
    assert bf16["wgmma"] + bf16["mma"] > 0  # bf16 dots on the tensor cores


def qkv_heads_attention(b: int = 1, t: int = 16, h: int = 2, dh: int = 8):
    """A GPT-2 style block's attention: one QKV matmul ``[b, t, 3 * h * dh]`` split into q, k
    and v, each reshaped to ``[b, t, h, dh]`` and transposed to ``[b, h, t, dh]``; causal
    attention; the heads transposed and merged back to ``[b, t, h * dh]``."""
    def f(x, w):
        q, k, v = jnp.split(x @ w, 3, axis=-1)
        heads = lambda a: a.reshape(b, t, h, dh).transpose(0, 2, 1, 3)  # noqa: E731
        o = attention(True, scale=dh ** 0.5)(heads(q), heads(k), heads(v))
        return o.transpose(0, 2, 1, 3).reshape(b, t, h * dh)
    return hlo(f, S((b, t, h * dh), jnp.float32), S((h * dh, 3 * h * dh), jnp.float32))


@pytest.mark.parametrize("dh", [8, 4])
def test_qkv_slice_reshape_transpose_prologues_fuse_into_attention(dh):
    """The slice -> reshape (split into heads) -> transpose prologues of q, k and v are read by
    the attention kernel at ``heads * dh + head`` (a composite index) and merge into it: the
    three transpose kernels disappear.  Both head dims pad the 16-wide head tile (masked
    lanes: a padding lane of one head would read the next head)."""
    text = qkv_heads_attention(dh=dh)
    from tiling.fusion_pass.graph import FusionOptions
    from tiling.fusion_pass.traffic_model import count_kernels
    module = fusion.parse_hlo(text)
    fused = fuse_module(module)
    unmerged = fuse_module(module, options=FusionOptions(tiled_merges=False))
    assert count_kernels(fused.module) < count_kernels(unmerged.module)
    (attention_fusion,) = [i for _, i in fused.module.fusions()
                           if is_attention_fusion(fused.module, i.name)]
    body = fused.module.computation(attention_fusion.attr("calls"))
    opcodes = [i.opcode for i in body.instructions]
    assert opcodes.count("transpose") >= 3 and opcodes.count("slice") == 3, opcodes
    compiled = run_and_check(text)
    assert "attention" in kinds(compiled)
    assert not any(f.kind != "attention" and "transpose" in name for name, f in
                   compiled.fusions.items())
