"""A dot (or convolution) fusion whose root only rearranges the result (a transpose or
reshape at the top: its ``layout_tail``) stores the tile at the rearranged indices instead of
running a kernel of its own that reads the result back.  Truths: the reference evaluator, and
XLA (JAX) for a training step's attention output and an NCHW convolution output."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import fusion
from tests.triton_backend.dot_fusion_helpers import fused_module
from tests.triton_backend.test_dot_fusion import run_and_check
from tiling.fusion_pass.priority_fusion import fuse_module
from triton_backend import compile_hlo

BATCHED = ("  a = f32[2,3,20,28] parameter(0)\n  b = f32[2,3,28,12] parameter(1)\n"
           "  d = f32[2,3,20,12] dot(a, b), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, "
           "rhs_batch_dims={0,1}, rhs_contracting_dims={2}\n")
PARAMS = [("a", "f32[2,3,20,28]"), ("b", "f32[2,3,28,12]")]
MOVES = {"parameter", "transpose", "reshape", "bitcast", "copy"}

TAILS = {
    # attention's head merge: [batch, heads, tokens, dim] -> [batch, tokens, heads * dim]
    "transpose_reshape": ("  e = f32[2,3,20,12] multiply(d, d)\n"
                          "  t = f32[2,20,3,12] transpose(e), dimensions={0,2,1,3}\n"
                          "  ROOT r = f32[2,20,36] reshape(t)", "f32[2,20,36]"),
    "transpose_minor": ("  ROOT t = f32[12,3,20,2] transpose(d), dimensions={3,1,2,0}",
                        "f32[12,3,20,2]"),
    "reshape_split": ("  ROOT r = f32[6,4,5,12] reshape(d)", "f32[6,4,5,12]"),
    "physical_layout": ("  ROOT t = f32[2,20,3,12]{3,1,2,0} transpose(d), dimensions={0,2,1,3}",
                        "f32[2,20,3,12]{3,1,2,0}"),
}


@pytest.mark.parametrize("name", sorted(TAILS))
def test_a_rearranged_root_is_stored_through(name):
    tail, root_shape = TAILS[name]
    module = fused_module(BATCHED + tail, PARAMS, root_shape)
    compiled = run_and_check(module, 28, tile_sizes=(16, 16, 16))
    assert compiled.kind == "dot"


def test_a_training_step_s_attention_output_has_no_kernel_of_its_own():
    # P @ V then the head merge, as a transformer's forward writes it when it keeps P for the
    # backward: one dot kernel storing [batch, tokens, heads * dim].
    def f(p, v, w):
        o = jnp.einsum("bhqk,bhkd->bhqd", p, v)
        merged = jnp.transpose(o, (0, 2, 1, 3)).reshape(2, 16, 32)  # kept for the backward
        return merged @ w, merged
    shapes = (jax.ShapeDtypeStruct((2, 4, 16, 16), jnp.float32),
              jax.ShapeDtypeStruct((2, 4, 16, 8), jnp.float32),
              jax.ShapeDtypeStruct((32, 32), jnp.float32))
    text = jax.jit(f).lower(*shapes).as_text(dialect="hlo")
    fused = fuse_module(fusion.parse_hlo(text)).module
    only_moving = [i.name for i in fused.entry.instructions if i.opcode == "fusion" and {
        x.opcode for x in fused.computation(i.attr("calls")).instructions} <= MOVES]
    assert only_moving == []
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s.shape).astype(np.float32) for s in shapes]
    got = compile_hlo(text, cache=False)(*[torch.from_numpy(a) for a in args])
    for g, w in zip(got, jax.jit(f)(*args)):
        np.testing.assert_allclose(g.numpy(), np.asarray(w), rtol=1e-4, atol=1e-4)


def test_a_convolution_stores_its_nchw_output_through_the_tail():
    # An NHWC convolution whose caller wants NCHW: the convolution kernel writes it so.
    def f(x, w):
        y = jax.lax.conv_general_dilated(x, w, (1, 1), "SAME",
                                         dimension_numbers=("NHWC", "HWIO", "NHWC"))
        return jnp.transpose(jax.nn.relu(y), (0, 3, 1, 2))
    shapes = (jax.ShapeDtypeStruct((2, 8, 8, 4), jnp.float32),
              jax.ShapeDtypeStruct((3, 3, 4, 8), jnp.float32))
    text = jax.jit(f).lower(*shapes).as_text(dialect="hlo")
    fused = fuse_module(fusion.parse_hlo(text)).module
    [kernel] = [i for i in fused.entry.instructions if i.opcode == "fusion"]
    ops = {x.opcode for x in fused.computation(kernel.attr("calls")).instructions}
    assert {"convolution", "transpose"} <= ops
    rng = np.random.default_rng(1)
    args = [rng.standard_normal(s.shape).astype(np.float32) for s in shapes]
    got = compile_hlo(text, cache=False)(*[torch.from_numpy(a) for a in args])[0]
    np.testing.assert_allclose(got.numpy(), np.asarray(jax.jit(f)(*args)), rtol=1e-4,
                               atol=1e-4)
