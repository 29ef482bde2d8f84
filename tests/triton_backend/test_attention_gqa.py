"""Grouped-query and multi-query attention: K and V have fewer heads than Q, each kv head shared
by ``heads // kv_heads`` query heads.  Whichever way JAX writes it (Q reshaped to
``[batch, kv_heads, group, tokens, head]`` with dots batched over ``(batch, kv_heads)``; K and V
repeated with ``jnp.repeat``; one shared K and V without a head dim), the module is one
attention kernel that reads K and V as they are (the kernel's only inputs are the module's
parameters, and it reads their bytes once: no repeated K or V reaches memory), one-pass with
the mask's key blocks skipped, and matches the reference evaluator under the interpreter.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fusion
from tests.triton_backend.test_attention_fusion import S, hlo, kinds, random_inputs, run_and_check
from triton_backend.templates.attention.driver import attention_form, attention_pattern

T, D = 48, 8


def gqa(form: str, visible=None):
    """Attention over q ``[b, heads, T, D]`` and k, v ``[b, kv_heads, T, D]`` (``shared``:
    ``[b, T, D]``) written in ``form``; ``visible(q_index, k_index)``: the mask."""
    def mask(s):
        if visible is None:
            return s
        t = s.shape[-1]
        return jnp.where(visible(jnp.arange(t)[:, None], jnp.arange(t)[None, :]), s, -jnp.inf)

    def f(q, k, v):
        b, h, t, d = q.shape
        if form == "grouped":
            kvh = k.shape[1]
            qg = q.reshape(b, kvh, h // kvh, t, d)
            s = mask(jnp.einsum("bhgqd,bhkd->bhgqk", qg, k) / 4.0)
            o = jnp.einsum("bhgqk,bhkd->bhgqd", jax.nn.softmax(s, axis=-1).astype(v.dtype), v)
            return o.reshape(b, h, t, d)
        if form == "repeat":
            group = h // k.shape[1]
            k, v = jnp.repeat(k, group, axis=1), jnp.repeat(v, group, axis=1)
            spec = ("bhqd,bhkd->bhqk", "bhqk,bhkd->bhqd")
        else:  # shared: one K and V for every head
            spec = ("bhqd,bkd->bhqk", "bhqk,bkd->bhqd")
        s = mask(jnp.einsum(spec[0], q, k) / 4.0)
        return jnp.einsum(spec[1], jax.nn.softmax(s, axis=-1).astype(v.dtype), v)
    return f


def shapes(form: str, kv_heads: int, dtype=jnp.float32, batch: int = 2, heads: int = 4,
           tokens: int = T, head_dim: int = D):
    kv = (batch, tokens, head_dim) if form == "shared" else (batch, kv_heads, tokens, head_dim)
    return S((batch, heads, tokens, head_dim), dtype), S(kv, dtype), S(kv, dtype)


def causal(q, k):
    return k <= q


def sliding_window(q, k):
    return (k <= q) & (k > q - 8)


CASES = {
    # name: (form, kv heads, mask, dtype, batch, tokens).  Each form runs once with a batch of
    # 2.  The sliding windows take 48 tokens: in blocks of 16 the last query block skips the
    # first key block (below the window) as well as the blocks above the diagonal, and the
    # default tiling's one block of 64 pads the tokens; 32 tokens in blocks of 16 are enough
    # for the causal and unmasked loops (two query and two key blocks).
    "grouped_causal_f32": ("grouped", 2, causal, jnp.float32, 2, 32),
    "grouped_sliding_window_bf16": ("grouped", 2, sliding_window, jnp.bfloat16, 1, T),
    "grouped_unmasked_bf16": ("grouped", 2, None, jnp.bfloat16, 1, 32),
    "grouped_mqa_causal_f32": ("grouped", 1, causal, jnp.float32, 1, 32),
    "repeat_sliding_window_f32": ("repeat", 2, sliding_window, jnp.float32, 1, T),
    "repeat_mqa_causal_bf16": ("repeat", 1, causal, jnp.bfloat16, 2, 32),
    "shared_causal_bf16": ("shared", 1, causal, jnp.bfloat16, 2, 32),
}


def _attention_kernel(compiled):
    (name,) = [n for n, f in compiled.fusions.items() if f.kind == "attention"]
    return name


@pytest.mark.parametrize("case", sorted(CASES))
def test_grouped_query_attention_is_one_kernel_reading_kv_once(case):
    form, kv_heads, visible, dtype, batch, tokens = CASES[case]
    text = hlo(gqa(form, visible), *shapes(form, kv_heads, dtype, batch, tokens=tokens))
    compiled = run_and_check(text)
    assert [k.value for k in kinds(compiled)] == ["attention"]
    name = _attention_kernel(compiled)
    run_and_check(text, tiling={name: (16, 16)})  # several query and key blocks per head
    module = compiled.module
    fused = module.entry.instruction(name)
    # K and V go into the kernel as the module's parameters: nothing repeats them in memory.
    assert {module.entry.instruction(o).opcode for o in fused.operands} == {"parameter"}
    form_ = attention_form(module, name)
    assert form_.name == "one-pass", form_.reason
    assert (form_.band is not None) == (visible is not None)


def test_grouped_form_takes_the_group_as_a_batch_dim_kv_read_per_kv_head():
    tokens = 16
    text = hlo(gqa("grouped", causal), *shapes("grouped", 2, batch=2, heads=6, tokens=tokens))
    compiled = run_and_check(text)
    name = _attention_kernel(compiled)
    pattern = attention_pattern(compiled.module, name)
    # batch, kv head, query head in the group; then the query rows
    assert (pattern.batch, pattern.queries, pattern.keys) == ((2, 2, 3), tokens, tokens)
    comp = compiled.module.computation(compiled.module.entry.instruction(name).attr("calls"))
    k = comp.instruction(comp.instruction(pattern.dot1).operands[1])
    assert pattern.roles[k.name] == (("b", 0), ("b", 1), "k", "c")  # not the group's ("b", 2)


def test_report_counts_kv_bytes_once():
    from triton_backend.reports.compile_report import build_report

    text = hlo(gqa("repeat", causal), *shapes("repeat", 1, batch=1, heads=4))
    compiled = run_and_check(text)
    (kernel,) = build_report(compiled).to_json()["fusions"]
    # q [1, 4, T, D], k and v [1, 1, T, D], f32: what the kernel reads, each byte counted once
    assert kernel["bytes_read"] == 4 * (4 * T * D + 2 * T * D)
    assert kernel["attention_form"] == "one-pass" and 0 < kernel["kv_blocks_visited_fraction"] <= 1


def test_grouped_bf16_sliding_window_matches_jax():
    """The same program against XLA itself (not only the evaluator)."""
    import torch
    from triton_backend import compile_hlo

    f = gqa("grouped", sliding_window)
    args = shapes("grouped", 2, jnp.bfloat16, batch=1)  # CASES' grouped_sliding_window_bf16
    lowered = jax.jit(f).lower(*args)
    module = fusion.parse_hlo(lowered.as_text(dialect="hlo"))
    arrays = random_inputs(module, seed=3)
    got = compile_hlo(module)(*[torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
                                for a in arrays])[0].float().numpy()
    want = np.asarray(lowered.compile()(*[jnp.asarray(a) for a in arrays]), np.float32)
    np.testing.assert_allclose(got, want, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("kv_heads,window,batch,tokens", [(4, None, 2, 32), (2, (7, 0), 1, T)])
def test_jax_dot_product_attention_stores_its_tokens_first_output_itself(kv_heads, window,
                                                                        batch, tokens):
    """``jax.nn.dot_product_attention`` takes and gives ``[batch, tokens, heads, dim]``: its
    second dot's ``[batch, heads, tokens, dim]`` (grouped: ``[batch, kv_heads, group, ...]``)
    is transposed, and reshaped over the group, by the root.  The kernel stores through that
    rearrangement (``layout_tail``): one kernel, no transpose kernel after it.  (The window
    takes 48 tokens so that blocks of 16 skip keys below it too.)"""
    def f(q, k, v):
        return jax.nn.dot_product_attention(q, k, v, is_causal=True, local_window_size=window,
                                            implementation="xla")
    q = S((batch, tokens, 4, D), jnp.bfloat16)
    kv = S((batch, tokens, kv_heads, D), jnp.bfloat16)
    text = hlo(f, q, kv, kv)
    compiled = run_and_check(text, tiling=None)
    assert [k.value for k in kinds(compiled)] == ["attention"]
    name = _attention_kernel(compiled)
    run_and_check(text, tiling={name: (16, 16)})
    pattern = attention_pattern(compiled.module, name)
    assert pattern.tail.ops and pattern.tail.value != pattern.tail.ops[-1]


def test_jax_dot_product_attention_bf16_matches_xla():
    """The grouped sliding-window case against XLA itself: its scores dot names
    ``algorithm=dot_bf16_bf16_f32`` on bf16 operands (``fusion.transforms.
    dot_operand_rounding``)."""
    import torch
    from triton_backend import compile_hlo

    def f(q, k, v):
        return jax.nn.dot_product_attention(q, k, v, is_causal=True, local_window_size=(7, 0),
                                            implementation="xla")
    # the grouped window case of the test above
    q, kv = S((1, T, 4, D), jnp.bfloat16), S((1, T, 2, D), jnp.bfloat16)
    lowered = jax.jit(f).lower(q, kv, kv)
    module = fusion.parse_hlo(lowered.as_text(dialect="hlo"))
    arrays = random_inputs(module, seed=5)
    got = compile_hlo(module)(*[torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16)
                                for a in arrays])[0].float().numpy()
    want = np.asarray(lowered.compile()(*[jnp.asarray(a) for a in arrays]), np.float32)
    np.testing.assert_allclose(got, want, atol=2e-2, rtol=2e-2)
