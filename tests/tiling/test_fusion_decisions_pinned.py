"""The fusion pass's decisions on the corpus, pinned: the kernel count of every unfused
program (``tests/data/hlo/*.before.hlo``, ``bench/programs/*.hlo`` and the JAX training step
``bench/programs/training/transformer_train_step.hlo``) after ``fuse_module``.

The incremental producer-consumer stage (a heap of candidate merges, only the producers next
to a merge judged again) must take exactly the decisions of the pass that judged every
producer after every merge; these counts pin that.  A change of the fusion rules that
changes a count must update it here, on purpose.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from fusion.text.parser import parse_hlo
from fusion.shapes.verifier import verify_module
from tiling.fusion_pass.traffic_model import count_kernels
from tiling.fusion_pass.priority_fusion import fuse_module

ROOT = Path(__file__).resolve().parents[2]
PLACES = (ROOT / "tests" / "data" / "hlo", ROOT / "bench" / "programs",
          ROOT / "bench" / "programs" / "training")

# Captured from the code BEFORE the pass became incremental (the quadratic pass that judged
# every producer after each merge), default ``FusionOptions``; the printed fused modules of
# the two versions were compared and are identical on every one of these programs.
PINNED_KERNELS = {
    "attention_bf16_4x16x2048x128.hlo": 1,
    "attention_causal_bf16_4x16x2048x128.hlo": 1,
    "attention_causal_bf16_4x8x512x64.hlo": 1,
    "attention_causal_f32_4x8x512x64.hlo": 1,
    "attention_gqa_sliding_window_bf16_4x16x2048x128_kv4_w512.hlo": 1,
    "batched_einsum.before.hlo": 1,
    "bf16_gelu.before.hlo": 1,
    "bf16_softmax.before.hlo": 1,
    "bf16_special_floats.before.hlo": 16,
    "bitcast_convert.before.hlo": 1,
    "broadcast_reshape.before.hlo": 1,
    "cnn_block.before.hlo": 1,
    "cnn_block_grad.before.hlo": 4,
    "compare_select.before.hlo": 4,
    "concatenate.before.hlo": 1,
    "cond.before.hlo": 3,
    "bias_grad_bf16_8192x768.hlo": 1,
    "cross_entropy_bf16_4096x8192.hlo": 1,
    "cross_entropy_f32_4096x8192.hlo": 1,
    "cross_entropy_one_hot_bf16_4096x8192.hlo": 1,
    "cross_entropy_one_hot_f32_4096x8192.hlo": 1,
    "cumsum.before.hlo": 1,
    "dynamic_slice.before.hlo": 1,
    "dynamic_update_slice.before.hlo": 2,
    "erf_atan2.before.hlo": 1,
    "f64_constants.before.hlo": 1,
    "fori_loop.before.hlo": 4,
    "gather.before.hlo": 1,
    "gelu.before.hlo": 1,
    "gelu_bf16_6x512x4096.hlo": 1,
    "gelu_f32_4096x4096.hlo": 1,
    "global_norm_f32_4096x8192.hlo": 1,
    "gpt2_block_bf16_b4_s512_d768.hlo": 7,
    "gpt2_block_f32_b1_s512_d768.hlo": 7,
    "integer_ops.before.hlo": 10,
    "iota_convert.before.hlo": 1,
    "kv_cache_update.before.hlo": 6,
    "layernorm.before.hlo": 1,
    "jax_attention_causal_gqa_bf16_4x2048x16x128_kv4.hlo": 1,
    "jax_attention_grad_causal_gqa_bf16_4x2048x16x128_kv4.hlo": 3,
    "layernorm_bf16_1024x8192.hlo": 1,
    "layernorm_bf16_4096x1024.hlo": 1,
    "layernorm_f32_1024x8192.hlo": 1,
    "layernorm_f32_4096x1024.hlo": 1,
    "llama_block_bf16_b1_s512_d1024_h8_kv2.hlo": 11,
    "log_softmax_bf16_4096x4096.hlo": 1,
    "log_softmax_f32_4096x4096.hlo": 1,
    "matmul.before.hlo": 1,
    "matmul_bf16_2048x3072x768.hlo": 1,
    "matmul_bf16_2048x768x2304.hlo": 1,
    "matmul_bf16_4096x4096x4096.hlo": 1,
    "matmul_bias_gelu_bf16_1024.hlo": 1,
    "max_pool.before.hlo": 1,
    "median.before.hlo": 3,
    "pad.before.hlo": 1,
    "reductions.before.hlo": 3,
    "reverse.before.hlo": 1,
    "rmsnorm.before.hlo": 1,
    "rmsnorm_bf16_1024x8192.hlo": 1,
    "rmsnorm_bf16_4096x4096.hlo": 1,
    "rmsnorm_f32_2048x1024.hlo": 1,
    "rmsnorm_f32_4096x4096.hlo": 1,
    "scan_carry.before.hlo": 5,
    "scatter.before.hlo": 2,
    "slices.before.hlo": 1,
    "softmax.before.hlo": 1,
    "softmax_bf16_1024x8192.hlo": 1,
    "softmax_bf16_4096x1024.hlo": 1,
    "softmax_f32_1024x8192.hlo": 1,
    "softmax_f32_4096x1024.hlo": 1,
    "sort.before.hlo": 1,
    "moe_bf16_t2048_d1024_f2816_e8.hlo": 1,
    "special_floats.before.hlo": 16,
    "swiglu.before.hlo": 2,
    "swiglu_bf16_4096x4096.hlo": 1,
    "swiglu_f32_4096x4096.hlo": 1,
    "transformer_train_step.hlo": 65,
    "transpose.before.hlo": 1,
    "unique.before.hlo": 11,
    "vjp_attention_causal_bf16_4x8x512x64.hlo": 3,
    "vjp_attention_causal_f32_4x8x512x64.hlo": 3,
    "vjp_attention_gqa_sliding_window_bf16_4x16x2048x128_kv4_w512.hlo": 3,
    "while_dynamic_slice.before.hlo": 4,
}
# Lowered on purpose when gathers became fusible producers (a gather reads one operand
# element per output element at a clamped runtime column): cross_entropy_bf16 5 -> 2,
# cross_entropy_f32 4 -> 2, gather 2 -> 1, median 5 -> 3, unique 17 -> 14.
# Added later with their programs, as the pass of the day fused them: the plain bf16 matmuls
# and the Llama block.
# The attention backward programs (``vjp_*``): the row statistics, dQ, dK with dV; the
# grouped-query one since the score-space kernels take the query-head group.
# Llama block 10 -> 11 on purpose: K's RoPE (cos/sin) is a kernel of its own instead of a
# prologue every query block's program of the attention kernel recomputed
# (``attention.split_attention_prologues``).
# The four cross-entropy programs 2 -> 1 on purpose: the mean over rows takes the rows' loss
# in (``decisions.outer_reduction_problem``), its kernel split among programs by rows.
# unique 14 -> 12 on purpose: its two cumulative sums take their elementwise producers and
# consumers in (a scan's tile runs along its dim: ``tiling.policy.tile_scans``).
# JAX's own attention (``jax.nn.dot_product_attention``) and its ``jax.grad``, added with
# their programs: one attention kernel, and the attention backward's three.
# unique 12 -> 11 and the training step 89 -> 87 on purpose: an element of a tuple built in
# the computation is that element (``canonicalize``'s get-tuple-element rule, XLA's
# TupleSimplifier), so no tuple of an inlined call stands between fusible ops.
# The training step 87 -> 67 on purpose: a reduction over unit dims is the elementwise
# ``reducer(init, x)`` it is (``canonicalize``), not a reduction that keeps JAX's softmax
# gradient apart; the attention backward's kernels now form in it.
# The mixture-of-experts layer, added with its program: the ragged dot with the SiLU of its
# f32 result as the grouped GEMM template's epilogue (``tiled_merge.ragged_member``).
# The training step 67 -> 65 on purpose: P @ V stores its result through the head merge
# (transpose, reshape) that followed it as a kernel of its own (the dot template's layout
# tail: ``tiled_merge.dot_member``).


def _path(name: str) -> Path:
    found = [p / name for p in PLACES if (p / name).exists()]
    assert found, f"corpus program {name} is gone: unpin it on purpose"
    return found[0]


@pytest.mark.parametrize("name", sorted(PINNED_KERNELS))
def test_kernel_count_is_pinned(name):
    result = fuse_module(parse_hlo(_path(name).read_text()))
    verify_module(result.module)
    assert count_kernels(result.module) == PINNED_KERNELS[name], result.explain()
