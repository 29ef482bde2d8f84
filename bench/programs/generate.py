"""Write the fusion-quality bench programs: unfused HLO from JAX, plus XLA:CPU's kernel counts.

Each program is ``jax.jit(f).lower(*args).as_text(dialect="hlo")`` (the module as JAX hands
it to XLA, before any fusion) written to ``bench/programs/NAME.hlo``.  For each, the kernel
count of XLA:CPU's optimized module (``jax.jit(f).lower(*args).compile().as_text()``: its
fusions plus the non-trivial ops it left unfused, counted by :func:`count_xla_kernels`) goes
to ``bench/programs/xla_cpu_kernels.json``.  The committed ``.hlo`` files are what
``bench/fusion_quality.py`` reads, so the bench itself never needs JAX; rerun this script
(it needs ``jax``) only to change the programs:

    python bench/programs/generate.py [--only NAME ...] [--out DIR]

The ``vjp_*`` programs (``VJP_PROGRAMS``) are the backward modules ``fusion.autodiff.vjp``
derives from a forward program (the attention backward, ``tiling.fusion_pass.
attention_backward``); their XLA:CPU count is that of JAX's own backward of the same function
(``jax.vjp``), the same gradients.

``--training-step`` writes only ``training/transformer_train_step.hlo`` (a two-layer
transformer's SGD step, forward and backward: ``write_training_step``), the real-model input
of ``bench/compile_scaling.py``.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from functools import partial
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: Ops of XLA's optimized HLO that launch nothing (views, plumbing, control flow itself).
TRIVIAL_OPCODES = frozenset({
    "parameter", "constant", "tuple", "get-tuple-element", "bitcast", "after-all",
    "partition-id", "replica-id", "call", "while", "conditional", "opt-barrier",
    "add-dependency", "domain",
})

_INSTRUCTION = re.compile(
    r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*(?:\([^=]*?\)|[\w\[\]{},:()\s]*?)\s+([a-z][\w\-]*)\(")


def count_xla_kernels(optimized_hlo: str) -> int:
    """Kernels of XLA's optimized module: fusions and non-trivial unfused ops, counted in the
    ENTRY computation and in the computations control flow runs (``while`` bodies and
    conditions, ``conditional`` branches, ``call`` targets), not inside fused computations.

    >>> count_xla_kernels('''HloModule m
    ... %fused_computation (p: f32[4]) -> f32[4] {
    ...   %p = f32[4]{0} parameter(0)
    ...   ROOT %n = f32[4]{0} negate(f32[4]{0} %p)
    ... }
    ... ENTRY %main (x: f32[4]) -> (f32[4], f32[4]) {
    ...   %x = f32[4]{0} parameter(0)
    ...   %f = f32[4]{0} fusion(f32[4]{0} %x), kind=kLoop, calls=%fused_computation
    ...   %c = f32[4]{0} copy(f32[4]{0} %f)
    ...   ROOT %t = (f32[4]{0}, f32[4]{0}) tuple(f32[4]{0} %f, f32[4]{0} %c)
    ... }''')
    2
    """
    bodies: dict[str, list[str]] = {}
    entry = None
    current = None
    for line in optimized_hlo.splitlines():
        stripped = line.strip()
        if stripped.endswith("{") and " = " not in stripped and not stripped.startswith("HloModule"):
            header = re.match(r"^(ENTRY\s+)?%?([\w.\-]+)", stripped)
            current = header.group(2)
            bodies[current] = []
            if header.group(1):
                entry = current
            continue
        if stripped == "}":
            current = None
            continue
        if current is not None and "=" in stripped:
            bodies[current].append(stripped)
    if entry is None:
        raise ValueError("no ENTRY computation in the optimized HLO")

    count = 0
    seen: set[str] = set()

    def visit(name: str) -> None:
        nonlocal count
        if name in seen or name not in bodies:
            return
        seen.add(name)
        for text in bodies[name]:
            m = _INSTRUCTION.match(text)
            if m is None:
                continue
            opcode = m.group(1)
            if opcode in ("while", "conditional", "call"):
                for callee in re.findall(
                        r"(?:body|condition|to_apply|true_computation|false_computation)=%?([\w.\-]+)",
                        text):
                    visit(callee)
                branches = re.search(r"branch_computations=\{([^}]*)\}", text)
                for callee in (branches.group(1).split(",") if branches else ()):
                    visit(callee.strip().lstrip("%"))
                continue
            if opcode not in TRIVIAL_OPCODES:
                count += 1

    visit(entry)
    return count


# --- the programs ---------------------------------------------------------------------------

def programs():
    """``name -> (function, example arguments)`` for every bench program."""
    import jax
    import jax.numpy as jnp

    f32, bf16 = jnp.float32, jnp.bfloat16

    def arg(shape, dtype):
        return jax.ShapeDtypeStruct(shape, dtype)

    def softmax(x):
        xf = x.astype(f32)
        m = jnp.max(xf, axis=-1, keepdims=True)
        e = jnp.exp(xf - m)
        return (e / jnp.sum(e, axis=-1, keepdims=True)).astype(x.dtype)

    def log_softmax(x):
        xf = x.astype(f32)
        m = jnp.max(xf, axis=-1, keepdims=True)
        s = xf - m
        return (s - jnp.log(jnp.sum(jnp.exp(s), axis=-1, keepdims=True))).astype(x.dtype)

    def layernorm(x, w, b):
        xf = x.astype(f32)
        mean = jnp.mean(xf, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(xf - mean), axis=-1, keepdims=True)
        y = (xf - mean) * jax.lax.rsqrt(var + 1e-5)
        return (y * w.astype(f32) + b.astype(f32)).astype(x.dtype)

    def rmsnorm(x, w):
        xf = x.astype(f32)
        ms = jnp.mean(jnp.square(xf), axis=-1, keepdims=True)
        return (xf * jax.lax.rsqrt(ms + 1e-6) * w.astype(f32)).astype(x.dtype)

    def cross_entropy(logits, labels):
        lf = logits.astype(f32)
        m = jnp.max(lf, axis=-1, keepdims=True)
        lse = jnp.log(jnp.sum(jnp.exp(lf - m), axis=-1)) + m[:, 0]
        picked = jnp.take_along_axis(lf, labels[:, None], axis=-1)[:, 0]
        return jnp.mean(lse - picked)

    def cross_entropy_one_hot(logits, labels):
        # The same loss with the label picked by a one-hot mask (iota == label) instead of a
        # gather: a reduction diamond plus a masked row sum, as optax's dense-label form.
        lf = logits.astype(f32)
        m = jnp.max(lf, axis=-1, keepdims=True)
        lse = jnp.log(jnp.sum(jnp.exp(lf - m), axis=-1)) + m[:, 0]
        one_hot = jax.nn.one_hot(labels, lf.shape[-1], dtype=f32)
        return jnp.mean(lse - jnp.sum(lf * one_hot, axis=-1))

    def bias_grad(dy):  # a bias's gradient: the output gradient's column sums
        return jnp.sum(dy.astype(jnp.float32), axis=0)

    def global_norm(g):  # gradient clipping's norm: a whole tensor to one number
        return jnp.sqrt(jnp.sum(jnp.square(g)))

    def cumsum(x):
        return jnp.cumsum(x, axis=-1)

    def top_p_mask(logits, p=0.9):  # nucleus sampling over logits sorted high to low
        probs = jax.nn.softmax(logits.astype(f32), axis=-1)
        before = jnp.cumsum(probs, axis=-1) - probs  # the probability of the tokens before
        return jnp.where(before < p, logits, -jnp.inf)

    def gelu(x):
        return jax.nn.gelu(x, approximate=True)

    def swiglu(g, u):
        return (jax.nn.silu(g.astype(f32)) * u.astype(f32)).astype(g.dtype)

    def matmul_bias_gelu(a, w, b):
        y = jnp.dot(a, w, preferred_element_type=f32) + b.astype(f32)
        return jax.nn.gelu(y, approximate=True).astype(a.dtype)

    def attention(q, k, v):
        d = q.shape[-1]
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k, preferred_element_type=f32) / (d ** 0.5)
        n = q.shape[2]
        mask = jnp.tril(jnp.ones((n, n), dtype=bool))
        s = jnp.where(mask, s, -1e30)
        p = jax.nn.softmax(s, axis=-1)
        return jnp.einsum("bhqk,bhkd->bhqd", p.astype(v.dtype), v,
                          preferred_element_type=f32).astype(q.dtype)

    def attention_masked(q, k, v, visible=None):
        """Softmax attention over ``[batch, heads, tokens, head]``; K and V may have fewer
        heads (grouped-query: each kv head shared by ``heads // kv_heads`` query heads, as
        Flax and MaxText write it: q reshaped to ``[batch, kv_heads, group, tokens, head]``,
        K and V never repeated); ``visible(q_index, k_index)``: the mask (None: none)."""
        b, h, n, d = q.shape
        kvh = k.shape[1]
        group = "" if kvh == h else "g"
        if group:
            q = q.reshape(b, kvh, h // kvh, n, d)
        s = jnp.einsum(f"bh{group}qd,bhkd->bh{group}qk", q, k,
                       preferred_element_type=f32) / (d ** 0.5)
        if visible is not None:
            s = jnp.where(visible(jnp.arange(n)[:, None], jnp.arange(n)[None, :]), s, -1e30)
        p = jax.nn.softmax(s, axis=-1)
        o = jnp.einsum(f"bh{group}qk,bhkd->bh{group}qd", p.astype(v.dtype), v,
                       preferred_element_type=f32)
        return o.reshape(b, h, n, d).astype(q.dtype)

    def causal(qi, ki):
        return ki <= qi

    def sliding_window(qi, ki, window=512):
        # Mistral's: each token sees itself and the window - 1 tokens before it.
        return (ki <= qi) & (ki > qi - window)

    def gpt2_block(x, ln1_w, ln1_b, w_qkv, b_qkv, w_o, b_o, ln2_w, ln2_b, w_fc, b_fc, w_proj,
                   b_proj):
        batch, seq, d_model = x.shape
        heads = 12
        h = layernorm(x, ln1_w, ln1_b)
        qkv = h @ w_qkv + b_qkv
        q, k, v = jnp.split(qkv, 3, axis=-1)

        def split_heads(t):
            return t.reshape(batch, seq, heads, d_model // heads).transpose(0, 2, 1, 3)

        a = attention(split_heads(q), split_heads(k), split_heads(v))
        a = a.transpose(0, 2, 1, 3).reshape(batch, seq, d_model)
        x = x + a @ w_o + b_o
        h = layernorm(x, ln2_w, ln2_b)
        h = jax.nn.gelu(h @ w_fc + b_fc, approximate=True)
        return x + h @ w_proj + b_proj

    def matmul(a, b):
        return jnp.dot(a, b, preferred_element_type=f32).astype(a.dtype)

    def llama_block(x, attn_norm, w_q, w_k, w_v, w_o, mlp_norm, w_gate, w_up, w_down):
        """A Llama pre-norm block: RMSNorm, RoPE on q and k, causal grouped-query attention,
        output projection, residual, RMSNorm, SwiGLU MLP, residual (Llama 2/3 as written in
        jax.numpy; no bias anywhere)."""
        batch, seq, d_model = x.shape
        head_dim = 128
        heads, kv_heads = w_q.shape[1] // head_dim, w_k.shape[1] // head_dim

        def rope(t):
            # Rotate-half RoPE (Llama's HF form), theta 10000, at positions 0..seq-1.
            inv_freq = 1.0 / (10000.0 ** (jnp.arange(0, head_dim, 2, dtype=f32) / head_dim))
            angles = jnp.arange(seq, dtype=f32)[:, None] * inv_freq[None, :]
            angles = jnp.concatenate([angles, angles], axis=-1)
            tf = t.astype(f32)
            half = head_dim // 2
            rotated = jnp.concatenate([-tf[..., half:], tf[..., :half]], axis=-1)
            return (tf * jnp.cos(angles) + rotated * jnp.sin(angles)).astype(t.dtype)

        def split_heads(t, n):
            return t.reshape(batch, seq, n, head_dim).transpose(0, 2, 1, 3)

        h = rmsnorm(x, attn_norm)
        q = rope(split_heads(h @ w_q, heads))
        k = rope(split_heads(h @ w_k, kv_heads))
        v = split_heads(h @ w_v, kv_heads)
        a = attention_masked(q, k, v, visible=causal)
        x = x + a.transpose(0, 2, 1, 3).reshape(batch, seq, heads * head_dim) @ w_o
        h = rmsnorm(x, mlp_norm)
        return x + swiglu(h @ w_gate, h @ w_up) @ w_down

    def llama_args(batch, seq, d, heads, kv_heads, hidden, dtype, head_dim=128):
        return (arg((batch, seq, d), dtype), arg((d,), dtype), arg((d, heads * head_dim), dtype),
                arg((d, kv_heads * head_dim), dtype), arg((d, kv_heads * head_dim), dtype),
                arg((heads * head_dim, d), dtype), arg((d,), dtype), arg((d, hidden), dtype),
                arg((d, hidden), dtype), arg((hidden, d), dtype))

    def gpt2_args(batch, seq, d, dtype):
        return (arg((batch, seq, d), dtype), arg((d,), dtype), arg((d,), dtype),
                arg((d, 3 * d), dtype), arg((3 * d,), dtype), arg((d, d), dtype), arg((d,), dtype),
                arg((d,), dtype), arg((d,), dtype), arg((d, 4 * d), dtype), arg((4 * d,), dtype),
                arg((4 * d, d), dtype), arg((d,), dtype))

    out = {}
    for dtype, tag in ((f32, "f32"), (bf16, "bf16")):
        for rows, cols in ((4096, 1024), (1024, 8192)):
            shape = f"{rows}x{cols}"
            out[f"softmax_{tag}_{shape}"] = (softmax, (arg((rows, cols), dtype),))
            out[f"layernorm_{tag}_{shape}"] = (
                layernorm, (arg((rows, cols), dtype), arg((cols,), dtype), arg((cols,), dtype)))
        out[f"log_softmax_{tag}_4096x4096"] = (log_softmax, (arg((4096, 4096), dtype),))
        out[f"rmsnorm_{tag}_4096x4096"] = (rmsnorm, (arg((4096, 4096), dtype), arg((4096,), dtype)))
    out["rmsnorm_f32_2048x1024"] = (rmsnorm, (arg((2048, 1024), f32), arg((1024,), f32)))
    out["rmsnorm_bf16_1024x8192"] = (rmsnorm, (arg((1024, 8192), bf16), arg((8192,), bf16)))
    out["cross_entropy_f32_4096x8192"] = (
        cross_entropy, (arg((4096, 8192), f32), arg((4096,), jnp.int32)))
    out["cross_entropy_bf16_4096x8192"] = (
        cross_entropy, (arg((4096, 8192), bf16), arg((4096,), jnp.int32)))
    out["cross_entropy_one_hot_f32_4096x8192"] = (
        cross_entropy_one_hot, (arg((4096, 8192), f32), arg((4096,), jnp.int32)))
    out["cross_entropy_one_hot_bf16_4096x8192"] = (
        cross_entropy_one_hot, (arg((4096, 8192), bf16), arg((4096,), jnp.int32)))
    out["bias_grad_bf16_8192x768"] = (bias_grad, (arg((8192, 768), bf16),))
    out["global_norm_f32_4096x8192"] = (global_norm, (arg((4096, 8192), f32),))
    out["cumsum_f32_4096x4096"] = (cumsum, (arg((4096, 4096), f32),))
    out["top_p_mask_bf16_64x32000"] = (top_p_mask, (arg((64, 32000), bf16),))
    out["gelu_bf16_6x512x4096"] = (gelu, (arg((6, 512, 4096), bf16),))
    out["gelu_f32_4096x4096"] = (gelu, (arg((4096, 4096), f32),))
    out["swiglu_bf16_4096x4096"] = (swiglu, (arg((4096, 4096), bf16), arg((4096, 4096), bf16)))
    out["swiglu_f32_4096x4096"] = (swiglu, (arg((4096, 4096), f32), arg((4096, 4096), f32)))
    out["matmul_bias_gelu_bf16_1024"] = (
        matmul_bias_gelu, (arg((1024, 1024), bf16), arg((1024, 1024), bf16), arg((1024,), bf16)))
    out["attention_causal_f32_4x8x512x64"] = (
        attention, tuple(arg((4, 8, 512, 64), f32) for _ in range(3)))
    out["attention_causal_bf16_4x8x512x64"] = (
        attention, tuple(arg((4, 8, 512, 64), bf16) for _ in range(3)))
    mha = tuple(arg((4, 16, 2048, 128), bf16) for _ in range(3))
    out["attention_bf16_4x16x2048x128"] = (attention_masked, mha)
    out["attention_causal_bf16_4x16x2048x128"] = (partial(attention_masked, visible=causal), mha)
    out["attention_gqa_sliding_window_bf16_4x16x2048x128_kv4_w512"] = (
        partial(attention_masked, visible=sliding_window),
        (arg((4, 16, 2048, 128), bf16), arg((4, 4, 2048, 128), bf16), arg((4, 4, 2048, 128), bf16)))
    # JAX's own attention, [batch, tokens, heads, head] in and out, and its gradient.
    def jax_attention(q, k, v):
        return jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation="xla")

    def jax_attention_grad(q, k, v, w):
        def loss(q, k, v):
            return jnp.sum(jax_attention(q, k, v).astype(f32) * w.astype(f32))
        return jax.grad(loss, argnums=(0, 1, 2))(q, k, v)

    btnh = (arg((4, 2048, 16, 128), bf16), arg((4, 2048, 4, 128), bf16),
            arg((4, 2048, 4, 128), bf16))
    out["jax_attention_causal_gqa_bf16_4x2048x16x128_kv4"] = (jax_attention, btnh)
    out["jax_attention_grad_causal_gqa_bf16_4x2048x16x128_kv4"] = (
        jax_attention_grad, btnh + (arg((4, 2048, 16, 128), bf16),))
    out["gpt2_block_f32_b1_s512_d768"] = (gpt2_block, gpt2_args(1, 512, 768, f32))
    out["gpt2_block_bf16_b4_s512_d768"] = (gpt2_block, gpt2_args(4, 512, 768, bf16))
    for m, k, n in ((4096, 4096, 4096), (2048, 768, 2304), (2048, 3072, 768)):
        out[f"matmul_bf16_{m}x{k}x{n}"] = (matmul, (arg((m, k), bf16), arg((k, n), bf16)))
    out["llama_block_bf16_b1_s512_d1024_h8_kv2"] = (
        llama_block, llama_args(1, 512, 1024, 8, 2, 2816, bf16))

    # A mixture of experts' up projection: 2048 tokens sorted by expert, 8 experts.
    def moe(x, w, sizes):
        y = jax.lax.ragged_dot(x, w, sizes, preferred_element_type=f32)
        return jax.nn.silu(y).astype(x.dtype)

    out["moe_bf16_t2048_d1024_f2816_e8"] = (
        moe, (arg((2048, 1024), bf16), arg((8, 1024, 2816), bf16), arg((8,), jnp.int32)))
    return out


#: Programs written as JAX lowers them for a GPU (``jax.export``, no GPU needed): on a CPU,
#: JAX writes ``ragged_dot`` as a dense dot of masked operands instead of a ``ragged-dot``.
GPU_LOWERED = frozenset({"moe_bf16_t2048_d1024_f2816_e8"})


def gpu_hlo_text(fn, fn_args) -> str:
    """The unfused HLO text of ``fn`` as JAX lowers it for CUDA."""
    import jax
    from jax import export
    from jax._src.lib import _jax

    mlir = export.export(jax.jit(fn), platforms=["cuda"])(*fn_args).mlir_module()
    return _jax.mlir.mlir_module_to_xla_computation(mlir, use_tuple_args=False,
                                                    return_tuple=False).as_hlo_text()


#: Backward programs: name -> the forward program ``fusion.autodiff.vjp`` differentiates.
VJP_PROGRAMS = {
    "vjp_attention_causal_bf16_4x8x512x64": "attention_causal_bf16_4x8x512x64",
    "vjp_attention_causal_f32_4x8x512x64": "attention_causal_f32_4x8x512x64",
    # grouped-query: dK and dV per kv head sum its group's query heads
    "vjp_attention_gqa_sliding_window_bf16_4x16x2048x128_kv4_w512":
        "attention_gqa_sliding_window_bf16_4x16x2048x128_kv4_w512",
}


def write_vjp_program(name: str, out: Path, forward) -> int:
    """Write ``out/NAME.hlo``, the vjp module of the forward program ``VJP_PROGRAMS[name]``;
    returns XLA:CPU's kernel count of JAX's backward of the same function (needs jax)."""
    import jax

    sys.path.insert(0, str(HERE.parents[1]))
    from fusion.autodiff.vjp_module import vjp
    from fusion.text.parser import parse_hlo
    from fusion.text.printer import print_hlo

    source = VJP_PROGRAMS[name]
    module = parse_hlo((out / f"{source}.hlo").read_text())
    (out / f"{name}.hlo").write_text(print_hlo(vjp(module)) + "\n")
    fn, fn_args = forward[source]

    def backward(*args):
        primals, cotangent = args[:-1], args[-1]
        return jax.vjp(fn, *primals)[1](cotangent)

    cotangent = jax.eval_shape(fn, *fn_args)
    return count_xla_kernels(jax.jit(backward).lower(*fn_args, cotangent).compile().as_text())


#: Where :func:`write_training_step` puts the training-step program: a subfolder, so the
#: fusion-quality and kernel-compile benches (which read ``programs/*.hlo``) skip it.
TRAINING_DIR = HERE / "training"


def write_training_step(out: Path = TRAINING_DIR, *, layers: int = 2, batch: int = 2,
                        seq: int = 64, d_model: int = 128, heads: int = 4) -> Path:
    """Write ``transformer_train_step.hlo``: one SGD step (forward, backward, update) of a
    ``layers``-layer pre-norm transformer as JAX lowers it, unfused; thousands of
    instructions, the input of ``bench/compile_scaling.py``'s real-model row.  Needs jax."""
    import jax
    import jax.numpy as jnp

    def layernorm(x, w, b):
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
        return (x - mean) * jax.lax.rsqrt(var + 1e-5) * w + b

    def block(x, p):
        h = layernorm(x, p["ln1_w"], p["ln1_b"])
        q, k, v = jnp.split(h @ p["w_qkv"], 3, axis=-1)

        def split(t):
            return t.reshape(batch, seq, heads, d_model // heads).transpose(0, 2, 1, 3)

        s = jnp.einsum("bhqd,bhkd->bhqk", split(q), split(k)) / (d_model // heads) ** 0.5
        s = jnp.where(jnp.tril(jnp.ones((seq, seq), dtype=bool)), s, -1e30)
        a = jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), split(v))
        x = x + a.transpose(0, 2, 1, 3).reshape(batch, seq, d_model) @ p["w_o"]
        h = layernorm(x, p["ln2_w"], p["ln2_b"])
        return x + jax.nn.gelu(h @ p["w_fc"], approximate=True) @ p["w_proj"]

    def loss(params, x, y):
        for p in params:
            x = block(x, p)
        return jnp.mean(jnp.square(x - y))

    def step(params, x, y):
        value, grads = jax.value_and_grad(loss)(params, x, y)
        return value, jax.tree_util.tree_map(lambda w, g: w - 1e-3 * g, params, grads)

    def arg(*shape):
        return jax.ShapeDtypeStruct(shape, jnp.float32)

    d = d_model
    layer = {"ln1_w": arg(d), "ln1_b": arg(d), "w_qkv": arg(d, 3 * d), "w_o": arg(d, d),
             "ln2_w": arg(d), "ln2_b": arg(d), "w_fc": arg(d, 4 * d), "w_proj": arg(4 * d, d)}
    params = [dict(layer) for _ in range(layers)]
    lowered = jax.jit(step).lower(params, arg(batch, seq, d), arg(batch, seq, d))
    out.mkdir(parents=True, exist_ok=True)
    path = out / "transformer_train_step.hlo"
    path.write_text(lowered.as_text(dialect="hlo"))
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="only these programs")
    parser.add_argument("--out", type=Path, default=HERE)
    parser.add_argument("--training-step", action="store_true",
                        help="write only programs/training/transformer_train_step.hlo")
    args = parser.parse_args(argv)
    if args.training_step:
        print(write_training_step())
        return 0
    import jax

    args.out.mkdir(parents=True, exist_ok=True)
    counts_path = args.out / "xla_cpu_kernels.json"
    counts = json.loads(counts_path.read_text()) if counts_path.exists() else {}
    forward = programs()
    for name, (fn, fn_args) in forward.items():
        if args.only and name not in args.only:
            continue
        lowered = jax.jit(fn).lower(*fn_args)
        text = gpu_hlo_text(fn, fn_args) if name in GPU_LOWERED else lowered.as_text(dialect="hlo")
        (args.out / f"{name}.hlo").write_text(text)
        counts[name] = count_xla_kernels(lowered.compile().as_text())
        print(f"{name}: XLA:CPU {counts[name]} kernel(s)")
    for name in VJP_PROGRAMS:
        if args.only and name not in args.only:
            continue
        counts[name] = write_vjp_program(name, args.out, forward)
        print(f"{name}: XLA:CPU {counts[name]} kernel(s)")
    counts_path.write_text(json.dumps(
        {"_about": "kernels of XLA:CPU's optimized HLO (fusions + non-trivial unfused ops), "
                   f"jax {jax.__version__}; written by bench/programs/generate.py",
         **{k: v for k, v in sorted(counts.items()) if k != "_about"}}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
