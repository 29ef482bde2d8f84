"""Dot fusions as ``tl.dot`` kernels in the interpreter, against the reference evaluator."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import fusion
from fusion.errors import UnsupportedOpError
from tests.triton_backend.dot_fusion_helpers import (
    assert_close, entry_as_fusion, fused_module, random_inputs, reference, to_numpy, to_torch)
from triton_backend.templates.dot.driver import compile_dot_fusion, dot_problem, is_dot_fusion
from triton_backend.driver.single_op_fusion import wrap_lone_ops


def run_and_check(module, k, *, tile_sizes=None, seed=0):
    arrays = random_inputs(module, seed)
    compiled = compile_dot_fusion(module, "r", tile_sizes=tile_sizes)
    got = compiled(*[to_torch(a) for a in arrays])
    want = reference(module, arrays)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert_close(to_numpy(g), w, k)
    return compiled


def plain_dot(dtype, out, lhs="20,28", rhs="28,36", dims="lhs_contracting_dims={1}, "
              "rhs_contracting_dims={0}", out_dims="20,36", **kw):
    body = (f"  a = {dtype}[{lhs}] parameter(0)\n  b = {dtype}[{rhs}] parameter(1)\n"
            f"  ROOT d = {out}[{out_dims}] dot(a, b), {dims}")
    return fused_module(body, [("a", f"{dtype}[{lhs}]"), ("b", f"{dtype}[{rhs}]")],
                        f"{out}[{out_dims}]", **kw)


@pytest.mark.parametrize("dtype,out", [("f32", "f32"), ("bf16", "bf16"), ("bf16", "f32"),
                                       ("f16", "f16"), ("f64", "f64"), ("s8", "s32")])
def test_every_dtype_with_unaligned_shapes(dtype, out):
    # 20x36x28: no dim is a multiple of 16; the K tile of 16 leaves a partial last step.
    compiled = run_and_check(plain_dot(dtype, out), 28, tile_sizes=(16, 32, 16))
    assert compiled.kind == "dot" and compiled.tile_sizes == (16, 32, 16)
    assert compiled.grid == (2 * 2, 1)
    assert "tl.dot(" in compiled.source


def test_int8_dot_is_exact_at_extremes():
    module = plain_dot("s8", "s32", lhs="16,64", rhs="64,16", out_dims="16,16")
    a = np.full((16, 64), -128, np.int8)
    b = np.full((64, 16), -128, np.int8)
    got = compile_dot_fusion(module, "r")(to_torch(a), to_torch(b))[0].numpy()
    assert (got == 64 * 128 * 128).all()


def test_transposed_operands_and_default_tiling():
    # lhs is K x M and rhs is N x K: addresses come from the dimension numbers.
    module = plain_dot("f32", "f32", lhs="28,20", rhs="36,28",
                       dims="lhs_contracting_dims={0}, rhs_contracting_dims={1}")
    compiled = run_and_check(module, 28)
    assert compiled.tile_sizes == (32, 64, 32)


def test_batch_dims_anywhere_and_two_contracting_dims():
    # lhs [k0=3, b=2, m=5, k1=6], rhs [n=7, k1=6, b=2, k0=3] -> out [b, m, n]
    module = plain_dot("f32", "f32", lhs="3,2,5,6", rhs="7,6,2,3", out_dims="2,5,7",
                       dims="lhs_batch_dims={1}, lhs_contracting_dims={0,3}, "
                            "rhs_batch_dims={2}, rhs_contracting_dims={3,1}")
    compiled = run_and_check(module, 18, tile_sizes=(16, 16, 16))
    assert compiled.grid == (1, 2)
    assert dot_problem(module, "r").k == 18


def test_batch_past_grid_y_limit_is_folded_into_grid_x(monkeypatch):
    # A real fold needs > 65535 batches; lowering the limit runs the same kernel code on 3.
    from triton_backend.templates.dot import tiling as dot_tiling
    monkeypatch.setattr(dot_tiling, "MAX_GRID_YZ", 2)
    module = plain_dot("f32", "f32", lhs="3,20,28", rhs="3,28,36", out_dims="3,20,36",
                       dims="lhs_batch_dims={0}, lhs_contracting_dims={2}, "
                            "rhs_batch_dims={0}, rhs_contracting_dims={1}")
    compiled = run_and_check(module, 28, tile_sizes=(16, 32, 16))
    assert compiled.grid == (2 * 2 * 3, 1)
    assert "tl.program_id(1)" not in compiled.source


def test_multiple_free_dims_and_non_default_layouts():
    body = ("  a = f32[2,3,4,5]{0,1,2,3} parameter(0)\n  b = f32[5,6]{0,1} parameter(1)\n"
            "  ROOT d = f32[2,3,4,6]{2,3,1,0} dot(a, b), lhs_contracting_dims={3}, rhs_contracting_dims={0}")
    module = fused_module(body, [("a", "f32[2,3,4,5]{0,1,2,3}"), ("b", "f32[5,6]{0,1}")],
                          "f32[2,3,4,6]{2,3,1,0}", kind="kLoop", backend_config=None)
    run_and_check(module, 5)


def test_bias_gelu_epilogue_from_jax_is_one_kernel():
    x, w, b = (jnp.zeros((20, 28), jnp.float32), jnp.zeros((28, 36), jnp.float32),
               jnp.zeros((36,), jnp.float32))
    text = jax.jit(lambda x, w, b: jax.nn.gelu(x @ w + b)).lower(x, w, b).as_text(dialect="hlo")
    module = entry_as_fusion(fusion.parse_hlo(text))
    compiled = run_and_check(module, 28, tile_sizes=(16, 16, 16))
    assert compiled.source.count("tl.store(") == 1 and "tanh" in compiled.source


def test_prologue_dequantize_transpose_and_residual_epilogue():
    body = """  q = s8[36,28] parameter(0)
  scale = f32[36] parameter(1)
  x = bf16[20,28] parameter(2)
  res = bf16[20,36] parameter(3)
  qf = f32[36,28] convert(q)
  sb = f32[36,28] broadcast(scale), dimensions={0}
  w = f32[36,28] multiply(qf, sb)
  wt = f32[28,36] transpose(w), dimensions={1,0}
  wb = bf16[28,36] convert(wt)
  d = bf16[20,36] dot(x, wb), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT o = bf16[20,36] add(d, res)"""
    module = fused_module(body, [("q", "s8[36,28]"), ("scale", "f32[36]"), ("x", "bf16[20,28]"),
                                 ("res", "bf16[20,36]")], "bf16[20,36]")
    arrays = random_inputs(module, 3)
    arrays[1] = np.abs(arrays[1]) * np.float32(0.01)
    got = compile_dot_fusion(module, "r", tile_sizes=(16, 16, 16))(*[to_torch(a) for a in arrays])
    assert_close(to_numpy(got[0]), reference(module, arrays)[0], 28)


def test_multi_output_epilogue():
    body = """  a = f16[16,32] parameter(0)
  b = f16[32,24] parameter(1)
  d = f32[16,24] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  c = f16[16,24] convert(d)
  ROOT t = (f32[16,24], f16[16,24]) tuple(d, c)"""
    module = fused_module(body, [("a", "f16[16,32]"), ("b", "f16[32,24]")],
                          "(f32[16,24], f16[16,24])", kind="kOutput", backend_config=None)
    run_and_check(module, 32)


def test_attention_dots_via_the_dot_path():
    q = jnp.zeros((2, 3, 16, 8), jnp.float32)

    def attention(q, k, v):
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / jnp.sqrt(8.0)
        return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v)

    module = fusion.parse_hlo(jax.jit(attention).lower(q, q, q).as_text(dialect="hlo"))
    dots = [i.name for i in module.entry if i.opcode == "dot"]
    wrapped = wrap_lone_ops(module, {module.entry_name: tuple(dots)})
    dots = [i.name for i in wrapped.entry if i.opcode == "fusion"]   # wrapped_<dot>, in order
    assert len(dots) == 2 and all(is_dot_fusion(wrapped, name) for name in dots)
    rng = np.random.default_rng(5)
    qv, kv, vv = (rng.standard_normal((2, 3, 16, 8)).astype(np.float32) for _ in range(3))
    scores = compile_dot_fusion(wrapped, dots[0])(to_torch(qv), to_torch(kv))[0].numpy()
    s = scores / np.float32(np.sqrt(8.0))
    p = np.exp(s - s.max(-1, keepdims=True))
    p = (p / p.sum(-1, keepdims=True)).astype(np.float32)
    out = compile_dot_fusion(wrapped, dots[1])(to_torch(p), to_torch(vv))[0].numpy()
    want = fusion.evaluate(module, qv, kv, vv)[0]
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(scores, np.einsum("bhqd,bhkd->bhqk", qv, kv), rtol=1e-5, atol=1e-5)


def test_predicate_and_clear_errors():
    module = plain_dot("f32", "s32")
    assert is_dot_fusion(module, "r") and not is_dot_fusion(module, "nope")
    with pytest.raises(UnsupportedOpError, match="f32 x f32 -> s32 is not supported"):
        compile_dot_fusion(module, "r")
    with pytest.raises(UnsupportedOpError, match="block_m=8 is not a power of two"):
        compile_dot_fusion(plain_dot("f32", "f32"), "r", tile_sizes=(8, 16, 16))
    with pytest.raises(UnsupportedOpError, match="shared memory"):
        compile_dot_fusion(plain_dot("f32", "f32"), "r",
                           tile_sizes={"block_m": 256, "block_n": 256, "block_k": 128, "num_stages": 4})
    body = ("  a = f32[4,8] parameter(0)\n  b = f32[8,4] parameter(1)\n"
            "  d = f32[4,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
            "  t = f32[4,4] transpose(d), dimensions={1,0}\n"
            "  ROOT s = f32[4,4] add(t, d)")  # the dot at two indices: no layout tail
    module = fused_module(body, [("a", "f32[4,8]"), ("b", "f32[8,4]")], "f32[4,4]")
    with pytest.raises(UnsupportedOpError, match="only elementwise epilogues"):
        compile_dot_fusion(module, "r")
