"""Attention's K/V prologues judged by time (``tiling.fusion_pass.attention``,
``split_attention_prologues``): the attention template streams all of K through every query
block's program, so an expensive prologue on K (a chain of transcendentals) would be computed
once per query block; it becomes a kernel of its own writing K, and the attention kernel reads
it.  A cheap one (a bias add) stays fused.  Either way the compiled module matches the
reference evaluator (under the Triton interpreter)."""
from __future__ import annotations

import numpy as np
import pytest


from fusion.evaluator.entry import evaluate
from fusion.text.parser import parse_hlo
from tiling.fusion_pass.priority_fusion import fuse_module
from tiling.fusion_pass.traffic_model import count_kernels

ATTENTION = """HloModule m
mx { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b) }
add { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b) }
ENTRY e {
  q = f32[1,@T,32] parameter(0)
  k = f32[1,@T,32] parameter(1)
  v = f32[1,@T,32] parameter(2)
  bias = f32[32] parameter(3)
@PROLOGUE
  s = f32[1,@T,@T] dot(q, kp), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={2}
  ninf = f32[] constant(-inf)
  m = f32[1,@T] reduce(s, ninf), dimensions={2}, to_apply=mx
  mb = f32[1,@T,@T] broadcast(m), dimensions={0,1}
  x = f32[1,@T,@T] subtract(s, mb)
  e = f32[1,@T,@T] exponential(x)
  zero = f32[] constant(0)
  l = f32[1,@T] reduce(e, zero), dimensions={2}, to_apply=add
  lb = f32[1,@T,@T] broadcast(l), dimensions={0,1}
  p = f32[1,@T,@T] divide(e, lb)
  ROOT o = f32[1,@T,32] dot(p, v), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}
}
"""

_CHAIN = ("sine", "cosine", "exponential", "tanh") * 3


def _expensive(chain=_CHAIN) -> str:
    """K through ``chain``'s transcendentals (twelve by default), then the bias (about 100
    instructions per element, computed once per query block: 2048 queries are 32 blocks)."""
    lines, prev = [], "k"
    for i, op in enumerate(chain):
        lines.append(f"  k{i} = f32[1,@T,32] {op}({prev})")
        prev = f"k{i}"
    lines += ["  bb = f32[1,@T,32] broadcast(bias), dimensions={2}",
              f"  kp = f32[1,@T,32] add({prev}, bb)"]
    return "\n".join(lines)


CHEAP = ("  bb = f32[1,@T,32] broadcast(bias), dimensions={2}\n"
         "  kp = f32[1,@T,32] add(k, bb)")


def _module(prologue: str, tokens: int = 2048) -> str:
    """The attention over ``tokens`` queries and keys with the K prologue ``prologue``."""
    return ATTENTION.replace("@PROLOGUE", prologue).replace("@T", str(tokens))




@pytest.mark.parametrize("expensive", [True, False])
def test_k_prologue_split_out_by_recompute_time(expensive):
    text = _module(_expensive() if expensive else CHEAP)
    module = parse_hlo(text)
    result = fuse_module(module)
    splits = [d for d in result.decisions if d.kind == "attention" and "costs time" in d.reason]
    if expensive:
        (split,) = splits
        assert not split.fused and split.producer == "kp"
        assert "computed 32 times per element of kp by the attention's programs" in split.reason
        assert split.reason.endswith("a kernel of its own")
        assert count_kernels(result.module) == 2
        # The attention kernel holds no transcendental of the prologue.
        (attention,) = [c for c in result.module.computations
                        if sum(i.opcode == "dot" for i in c.instructions) == 2]
        assert not {"sine", "cosine", "tanh"} & {i.opcode for i in attention.instructions}
    else:
        assert splits == []
        assert count_kernels(result.module) == 1
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(p.shape.dims).astype(np.float32)
            for p in module.entry.parameters]
    np.testing.assert_allclose(evaluate(result.module, *args)[0], evaluate(module, *args)[0],
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("expensive", [True, False])
def test_compiled_module_matches_the_evaluator(expensive):
    """Compiled and run under the interpreter, at 512 tokens (a sixteenth of the interpreter's
    work at 2048; 8 query blocks, so the expensive prologue takes eight times the
    transcendentals to still cost more recomputed than as a kernel of its own).  The
    tolerance is a sum of 512 f32 terms' (the strict ``run --check`` one fails a near-zero
    output element either way, split or not)."""
    import torch

    from triton_backend import compile_hlo

    module = parse_hlo(_module(_expensive(_CHAIN * 8) if expensive else CHEAP, tokens=512))
    compiled = compile_hlo(module)
    assert sorted(f.kind for f in compiled.fusions.values()).count("attention") == 1
    assert len(compiled.fusions) == (2 if expensive else 1)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(p.shape.dims).astype(np.float32)
            for p in module.entry.parameters]
    (got,) = compiled(*(torch.from_numpy(a) for a in args))
    np.testing.assert_allclose(got.numpy(), evaluate(module, *args)[0], rtol=1e-4, atol=1e-5)
