"""The attention bench programs (``bench/programs/attention_*.hlo``: causal, unmasked and
Mistral-style sliding-window grouped-query attention at [4,16,2048,128] bf16, the smaller
causal ones) as the GPU would run them (``compile_hlo(..., target="sm_90")``, no kernel runs):
one attention kernel each, one pass over the keys, and at the GPU tiling every query block
visits exactly the key blocks that hold a key one of its rows sees (the truth: each program's
mask, written out here in NumPy).  The sm_80/sm_90 spill checks are
``tests/conformance/test_bench_kernels_compile.py``'s."""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import fusion
from triton_backend import compile_hlo
from triton_backend.templates.attention.driver import attention_form, attention_pattern

PROGRAMS = sorted((Path(__file__).resolve().parents[2] / "bench" / "programs")
                  .glob("attention*.hlo"))


def visible(name: str, queries: int, keys: int) -> np.ndarray:
    """``[queries, keys]``: which keys each query row sees, from the program's name (the mask
    ``bench/programs/generate.py`` wrote into it)."""
    q, k = np.arange(queries)[:, None], np.arange(keys)[None, :]
    window = re.search(r"_w(\d+)$", name)
    if window:
        return (k <= q) & (k > q - int(window.group(1)))
    if "causal" in name:
        return np.broadcast_to(k <= q, (queries, keys))
    return np.ones((queries, keys), bool)


def test_the_attention_programs_are_there():
    names = {p.stem for p in PROGRAMS}
    assert {"attention_bf16_4x16x2048x128", "attention_causal_bf16_4x16x2048x128",
            "attention_gqa_sliding_window_bf16_4x16x2048x128_kv4_w512"} <= names


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.stem)
def test_one_pass_and_no_hidden_key_block_visited_at_the_gpu_tiling(path):
    compiled = compile_hlo(fusion.parse_hlo(path.read_text()), target="sm_90")
    (name,) = [n for n, f in compiled.fusions.items()]
    assert compiled.fusions[name].kind == "attention"
    module = compiled.module
    pattern = attention_pattern(module, name)
    form = attention_form(module, name)
    assert form.name == "one-pass", form.reason
    block_m, block_n = compiled.fusions[name].tile_sizes
    truth = visible(path.stem, pattern.queries, pattern.keys)
    seen_blocks = []
    for q0 in range(0, pattern.queries, block_m):
        first, end = (0, pattern.keys) if form.band is None else \
            form.band.key_range(q0, block_m, pattern.keys)
        rows = truth[q0:q0 + block_m]
        blocks = rows.reshape(len(rows), -1, block_n).any(axis=(0, 2))
        # visited: the blocks [first, end) covers; they are exactly those holding a seen key
        visited = np.zeros_like(blocks)
        visited[first // block_n:-(-end // block_n)] = True
        assert np.array_equal(visited, blocks), (q0, first, end)
        seen_blocks.append(blocks.mean())
    assert form.visited_fraction(pattern, block_m, block_n) == pytest.approx(np.mean(seen_blocks))


def test_grouped_query_program_reads_kv_per_kv_head():
    path = next(p for p in PROGRAMS if "gqa" in p.stem)
    compiled = compile_hlo(fusion.parse_hlo(path.read_text()), target="sm_90")
    (name,) = compiled.fusions
    module = compiled.module
    assert attention_pattern(module, name).batch == (4, 4, 4)  # batch, kv head, group
    operands = [module.entry.instruction(o) for o in module.entry.instruction(name).operands]
    assert [(o.opcode, o.shape.dims) for o in operands] == [
        ("parameter", (4, 16, 2048, 128)), ("parameter", (4, 4, 2048, 128)),
        ("parameter", (4, 4, 2048, 128))]


@pytest.mark.parametrize("path", PROGRAMS, ids=lambda p: p.stem)
def test_lean_head_dim_128_kernels_take_the_wide_blocks(path):
    """At head dim 128 on sm_90 a 16-bit kernel whose scores are lean (no per-point loads, a
    mask open on one side at least) takes 128 x 128 blocks at 8 warps (faster on an H200, and
    without spills: ``test_bench_kernels_compile``); a sliding window keeps 64 x 64."""
    from triton_backend.templates.attention.driver import lean_scores

    compiled = compile_hlo(fusion.parse_hlo(path.read_text()), target="sm_90")
    (name,) = compiled.fusions
    module = compiled.module
    comp = module.computation(module.entry.instruction(name).attr("calls"))
    pattern = attention_pattern(module, name)
    rows = visible(path.stem, pattern.queries, pattern.keys)
    # one-sided: every row's visible keys run to the first key or to the last
    one_sided = all(r[0] or r[-1] for r in rows if r.any())
    assert lean_scores(comp, pattern, attention_form(module, name)) == one_sided
    if "f32" in path.stem:  # 4-byte operands: the register rule's blocks, whatever the scores
        return
    wide = one_sided and pattern.head_dim == 128
    assert tuple(compiled.fusions[name].tile_sizes) == ((128, 128) if wide else (64, 64))
    assert ("num_warps=8" in compiled.fusions[name].source) == wide


def test_scores_reading_a_bias_are_not_lean():
    import jax
    import jax.numpy as jnp

    from triton_backend.templates.attention.driver import lean_scores

    def biased(q, k, v, bias):
        s = jnp.einsum("...qd,...kd->...qk", q, k) + bias
        return jnp.einsum("...qk,...kd->...qd", jax.nn.softmax(s, axis=-1), v)

    qkv = jax.ShapeDtypeStruct((1, 2, 256, 128), jnp.bfloat16)
    text = jax.jit(biased).lower(qkv, qkv, qkv, jax.ShapeDtypeStruct(
        (1, 2, 256, 256), jnp.bfloat16)).as_text(dialect="hlo")
    compiled = compile_hlo(fusion.parse_hlo(text), target="sm_90")
    (name,) = [n for n, f in compiled.fusions.items() if f.kind == "attention"]
    module = compiled.module
    comp = module.computation(module.entry.instruction(name).attr("calls"))
    form = attention_form(module, name)
    assert form.name == "one-pass" and not lean_scores(comp, attention_pattern(module, name), form)
    assert tuple(compiled.fusions[name].tile_sizes) == (64, 64)
