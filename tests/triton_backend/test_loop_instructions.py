"""``bench/loop_instructions.py`` and the compile report's loop facts, compiled for sm_90
without a GPU: our one-pass attention's main loop against FlashAttention-2's (the tutorial's
structure) at the same tiles, read from both kernels' SASS."""
from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import pytest

from tests.triton_backend.test_attention_one_pass import masked_attention
from triton_backend.reports.ptx_report import find_ptxas
from triton_backend.reports.sass_loops import find_cuobjdump

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(find_ptxas(90) is None or find_cuobjdump() is None,
                                reason="the Triton wheel's ptxas/cuobjdump are missing")


def _bench():
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        spec = importlib.util.spec_from_file_location("bench_loop_instructions",
                                                      ROOT / "bench" / "loop_instructions.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(ROOT / "bench"))


@pytest.fixture(scope="module")
def rows(tmp_path_factory) -> dict[str, dict]:
    """Both programs through one run of the bench (one child compiles both references)."""
    shape = jax.ShapeDtypeStruct((1, 4, 256, 64), jnp.bfloat16)
    text = jax.jit(masked_attention(lambda q, k: k <= q, fill=-1e30)).lower(
        shape, shape, shape).as_text(dialect="hlo")
    attention = tmp_path_factory.mktemp("loops") / "attention_causal.hlo"
    attention.write_text(text)
    # 2048x1024 output: 128 tiles of 128x128, too many to split K on 132 SMs; 512x1024: 64
    # tiles of 64x128 (BLOCK_M halved first), so K splits in 2, a loop with a variable start.
    files = []
    for m in (2048, 512):
        a, w, b = (jax.ShapeDtypeStruct(s, jnp.bfloat16) for s in ((m, 1024), (1024, 1024), (1024,)))
        text = jax.jit(lambda a, w, b: jax.nn.gelu(
            jnp.dot(a, w, preferred_element_type=jnp.float32) + b.astype(jnp.float32),
            approximate=True).astype(jnp.bfloat16)).lower(a, w, b).as_text(dialect="hlo")
        files.append(tmp_path_factory.mktemp("loops") / f"matmul_bias_gelu_{m}.hlo")
        files[-1].write_text(text)
    unsplit, split = files
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert _bench().main([str(attention), str(unsplit), str(split), "--json"]) == 0
    by_program = {row["program"]: row for row in json.loads(out.getvalue())}
    assert sorted(row["kind"] for row in by_program.values()) == ["attention", "dot", "dot"]
    return {"attention": by_program["attention_causal"],
            "dot": by_program["matmul_bias_gelu_2048"],
            "split_k_dot": by_program["matmul_bias_gelu_512"]}


def test_causal_bf16_attention_loop_is_within_the_target_of_the_reference(rows):
    row = rows["attention"]
    ours, ref = row["main_loop"], row["reference"]["main_loop"]
    assert row["request"]["causal"]
    assert ours["tensor_core"] == ref["tensor_core"] > 0  # wgmma, as the reference
    assert ours["async_copies"] > 0 and row["ptx"]["wgmma"] > 0 and row["ptx"]["cp.async"] > 0
    assert ours["instructions"] <= 1.5 * ref["instructions"], (ours, ref)


def test_unrolled_bf16_dot_with_a_gelu_epilogue_is_counted_per_k_step(rows):
    # K = 1024 in 64-wide steps is a constant trip count the compiler unrolls completely; the
    # fused bias and tanh-GELU run once after the loop, so they must not count per K step.
    row = rows["dot"]
    ours, ref = row["main_loop"], row["reference"]["main_loop"]
    assert ours["unrolled"] and ours["tensor_core"] > ref["tensor_core"]
    per_step = _bench()._per_step(ours, ref)
    assert per_step <= 1.5 * ref["instructions"], (ours, ref)
    # The span is the steps' work: far less than the whole kernel with its epilogue.
    assert ours["instructions"] < ours["tensor_core"] // ref["tensor_core"] * ref["instructions"]


def test_split_k_dot_loop_is_a_loop_within_the_target_of_the_reference(rows):
    # Split in 2, each program runs 8 of the 16 K steps from a start that depends on its
    # slice: a real loop, with the tutorial's tensor-core and asynchronous-copy shape.
    row = rows["split_k_dot"]
    ours, ref = row["main_loop"], row["reference"]["main_loop"]
    assert row["tiles"] == [64, 128, 64, 2] and "unrolled" not in ours
    assert ours["tensor_core"] == ref["tensor_core"] > 0 and ours["async_copies"] > 0
    assert ours["instructions"] <= 1.5 * ref["instructions"], (ours, ref)
