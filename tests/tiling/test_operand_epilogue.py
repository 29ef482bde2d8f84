"""A dot's result chain moved from the operand prologue of the dot or attention kernel reading
it into the producing dot's epilogue (``tiling.fusion_pass.operand_epilogue``): the QKV
projection's bias, which producer-consumer fusion put into the attention kernel, where every
query block's program added it again to every K and V tile and the tiles went through
registers to reach the tensor cores.  Checked against the evaluator (the fused module bit for
bit, the compiled one under the Triton interpreter)."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from fusion.evaluator.entry import evaluate
from fusion.text.parser import parse_hlo
from tiling.fusion_pass.priority_fusion import fuse_module
from tiling.fusion_pass.traffic_model import count_kernels

QKV_ATTENTION = """HloModule m
mx { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b) }
add { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b) }
ENTRY e {
  x = bf16[1,256,64] parameter(0)
  w = bf16[64,96] parameter(1)
  bias = bf16[96] parameter(2)
  d = bf16[1,256,96] dot(x, w), lhs_contracting_dims={2}, rhs_contracting_dims={0}
  bb = bf16[1,256,96] broadcast(bias), dimensions={2}
  qkv = @TYPE[1,256,96] @OP
  q = @TYPE[1,256,32] slice(qkv), slice={[0:1], [0:256], [0:32]}
  k = @TYPE[1,256,32] slice(qkv), slice={[0:1], [0:256], [32:64]}
  v = @TYPE[1,256,32] slice(qkv), slice={[0:1], [0:256], [64:96]}
  s = f32[1,256,256] dot(q, k), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={2}
  ninf = f32[] constant(-inf)
  m = f32[1,256] reduce(s, ninf), dimensions={2}, to_apply=mx
  mb = f32[1,256,256] broadcast(m), dimensions={0,1}
  sub = f32[1,256,256] subtract(s, mb)
  e = f32[1,256,256] exponential(sub)
  zero = f32[] constant(0)
  l = f32[1,256] reduce(e, zero), dimensions={2}, to_apply=add
  lb = f32[1,256,256] broadcast(l), dimensions={0,1}
  p = f32[1,256,256] divide(e, lb)
  pc = @TYPE[1,256,256] convert(p)
  ROOT o = f32[1,256,32] dot(pc, v), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
}
"""
BIAS = QKV_ATTENTION.replace("@TYPE", "bf16").replace("@OP", "add(d, bb)")
# The attention in f32 of the bf16 projection: as an epilogue the dot would write f32.
WIDENED = QKV_ATTENTION.replace("@TYPE", "f32").replace("@OP", "convert(d)").replace(
    "  bb = bf16[1,256,96] broadcast(bias), dimensions={2}\n", "")


def _args(module, seed=0):
    """bf16 inputs (as ml_dtypes arrays)."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(p.shape.dims).astype(ml_dtypes.bfloat16)
            for p in module.entry.parameters]


def _fused_with(module, opcode_count):
    """The fused computations holding ``opcode_count`` dots."""
    return [c for c in module.computations
            if c.name != module.entry_name and sum(i.opcode == "dot" for i in c.instructions)
            == opcode_count]


def test_the_qkv_bias_becomes_the_projection_epilogue():
    module = parse_hlo(BIAS)
    result = fuse_module(module)
    (moved,) = [d for d in result.decisions if "the epilogue of" in d.reason]
    assert moved.fused and moved.producer == "d" and moved.consumers == ("qkv",)
    assert "attention kernel" in moved.reason
    assert count_kernels(result.module) == 2
    (projection,) = _fused_with(result.module, 1)
    assert projection.root.opcode == "add"
    (attention,) = _fused_with(result.module, 2)
    # The attention loads Q, K and V through slices alone: no arithmetic before its dots.
    assert {i.opcode for i in attention.instructions} >= {"slice", "dot"}
    assert not [i for i in attention.instructions if i.opcode == "add"]
    args = _args(module)
    np.testing.assert_array_equal(evaluate(result.module, *args)[0], evaluate(module, *args)[0])


def test_a_widening_chain_stays_a_prologue():
    """Moved, the convert would make the projection write f32: twice the bytes."""
    result = fuse_module(parse_hlo(WIDENED))
    assert not [d for d in result.decisions if "the epilogue of" in d.reason]
    (attention,) = _fused_with(result.module, 2)
    assert any(i.opcode == "convert" and i.shape.dtype == "f32" for i in attention.instructions)


def test_a_result_read_by_another_kernel_stays():
    """The projection's result is also the module's output: the reader's chain stays where it
    was (the dot kernel writes one value)."""
    text = BIAS.replace("ROOT o = f32[1,256,32]", "o = f32[1,256,32]").replace(
        "\n}\n", "\n  ROOT t = (f32[1,256,32], bf16[1,256,96]) tuple(o, d)\n}\n")
    result = fuse_module(parse_hlo(text))
    assert not [d for d in result.decisions if "the epilogue of" in d.reason]


@pytest.mark.parametrize("text", [BIAS, WIDENED], ids=["bias", "widened"])
def test_compiled_module_matches_the_evaluator(text):
    import torch

    from triton_backend import compile_hlo

    module = parse_hlo(text)
    compiled = compile_hlo(module)
    assert sorted(f.kind for f in compiled.fusions.values()).count("attention") == 1
    args = _args(module, seed=1)
    (got,) = compiled(*(torch.from_numpy(a.astype(np.float32)).to(torch.bfloat16) for a in args))
    want = evaluate(module, *args)[0]
    np.testing.assert_allclose(got.float().numpy(), want, rtol=2e-2, atol=2e-2)
