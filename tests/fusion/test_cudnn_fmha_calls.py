"""cuDNN fused attention custom-calls (``__cudnn$fmha*``): decoded
(``fusion.analysis.cudnn_fmha_calls``), evaluated (``evaluator/cudnn_fmha_ops``) and written as
HLO ops (``transforms/fmha_expansion``), checked against JAX's own attention
(``jax.nn.dot_product_attention(implementation="xla")``, the form JAX keeps equal to cuDNN's)
and its gradients.  The dumps in ``tests/data/hlo_gpu`` are JAX's cuDNN lowering, as printed
(``generate_cudnn_fmha.py``); compiled in ``tests/triton_backend/test_gpu_library_custom_calls.py``.
"""
from __future__ import annotations

import functools
import json
from dataclasses import replace
from pathlib import Path

import jax
import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from fusion.analysis.cudnn_fmha_calls import cudnn_fmha_call, reads_its_forward
from fusion.autodiff.vjp_module import vjp
from fusion.errors import EvaluationError, UnsupportedOpError
from fusion.evaluator import evaluate
from fusion.ir.hlo_module import HloInstruction
from fusion.ir.shape import ArrayShape
from fusion.shapes.verifier import verify_module
from fusion.text.parser import parse_hlo
from fusion.transforms.gpu_call_expansion import expand_gpu_library_calls

DUMPS = Path(__file__).parents[1] / "data" / "hlo_gpu"
B, T, N, KV, H = 2, 32, 4, 2, 16
TYPES = {"bf16": ml_dtypes.bfloat16, "f16": np.float16}


def dump(name: str) -> str:
    return (DUMPS / f"{name}.hlo").read_text()


def random(shape, dtype="bf16", seed=0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32).astype(
        TYPES[dtype])


def as_f32(x) -> np.ndarray:
    return np.asarray(x).astype(np.float32)


#: dot_product_attention's options that are Python values, not arrays (static under jit).
STATIC = ("scale", "is_causal", "local_window_size", "return_residual")


def xla_attention(dtype=ml_dtypes.bfloat16, **static):
    """``jax.nn.dot_product_attention(implementation="xla")`` with these Python options, under
    ``jax.jit`` (one XLA compile, where calling it op by op compiles every primitive).  Not for
    f16: JAX asks for the F16_F16_F32 dot algorithm, which the CPU refuses when lowering, and
    only called op by op does JAX catch that and fall back to the default precision."""
    attention = functools.partial(jax.nn.dot_product_attention, implementation="xla", **static)
    return attention if np.dtype(dtype) == np.float16 else jax.jit(attention)


def jax_attention(q, k, v, bias=None, **kw) -> np.ndarray:
    static = {key: kw.pop(key) for key in STATIC if key in kw}
    return as_f32(xla_attention(q.dtype, **static)(q, k, v, bias, **kw))


#: (options, operands, cotangent) -> JAX's gradients: the training dump and the ``vjp`` of the
#: forward dump are checked against the same ones, which JAX computes (compiles) once.
_GRADIENTS: dict = {}


def jax_attention_gradients(operands, cotangent, **static) -> list:
    """``jax.vjp`` of JAX's attention (jitted) at ``operands`` (Q, K, V and a bias, if any),
    pulling back ``cotangent`` (of the output's type); memoized."""
    key = (tuple(sorted(static.items())),
           tuple((a.dtype, a.shape, a.tobytes()) for a in (*operands, cotangent)))
    if key not in _GRADIENTS:
        def pulled_back(operands, cotangent):
            _, pullback = jax.vjp(xla_attention(**static), *operands)
            return pullback(cotangent)

        _GRADIENTS[key] = [np.asarray(g) for g in jax.jit(pulled_back)(operands, cotangent)]
    return _GRADIENTS[key]


def close(got, want, ulps=1) -> None:
    """Within ``ulps`` bf16 steps of the largest value (the results are rounded to 16 bits)."""
    want = as_f32(want)
    scale = np.abs(want).max() if want.size else 0.0  # the workspace is empty
    np.testing.assert_allclose(as_f32(got), want, atol=ulps * 2.0 ** -7 * scale)


def qkv(dtype="bf16", heads=N, kv_heads=KV):
    return (random((B, T, heads, H), dtype, 1), random((B, T, kv_heads, H), dtype, 2),
            random((B, T, kv_heads, H), dtype, 3))


def test_a_causal_gqa_dump_is_jax_attention():
    q, k, v = qkv()
    got = evaluate(parse_hlo(dump("cudnn_fmha_causal_gqa")), q, k, v)
    close(got[0], jax_attention(q, k, v, scale=0.25, is_causal=True))


def test_a_padded_dump_masks_by_sequence_lengths_and_zeroes_the_padded_queries():
    q, k, v = qkv()
    q_len, kv_len = np.int32([20, 32]), np.int32([25, 9])
    got = as_f32(evaluate(parse_hlo(dump("cudnn_fmha_padded_causal")), q, k, v, q_len, kv_len)[0])
    close(got, jax_attention(q, k, v, scale=0.25, is_causal=True, query_seq_lengths=q_len,
                             key_value_seq_lengths=kv_len))
    assert not got[0, 20:].any()


def test_a_sliding_window_dump_keeps_the_window_of_keys():
    q, k, v = (random((B, T, N, H), "f16", s) for s in (1, 2, 3))
    got = evaluate(parse_hlo(dump("cudnn_fmha_sliding_window_f16")), q, k, v)
    close(got[0], jax_attention(q, k, v, is_causal=True, local_window_size=(7, 0)))


@pytest.mark.parametrize("name", ["cudnn_fmha_train_bias", "cudnn_fmha_train_causal_gqa"])
def test_a_training_dump_gives_jax_s_gradients(name):
    q, k, v = qkv()
    bias = (random((1, N, T, T), seed=4),) if "bias" in name else ()
    cotangent = random((B, T, N, H), seed=5)  # bf16 values; the dump takes them as f32
    want = jax_attention_gradients((q, k, v, *bias), cotangent, scale=0.25, is_causal=not bias)
    got = evaluate(parse_hlo(dump(name)), q, k, v, *bias, cotangent.astype(np.float32))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        close(g, w, ulps=2)


@pytest.mark.parametrize("name", ["cudnn_fmha_causal_gqa", "cudnn_fmha_padded_causal",
                                  "cudnn_fmha_sliding_window_f16", "cudnn_fmha_train_bias",
                                  "cudnn_fmha_train_causal_gqa"])
def test_the_expansion_computes_the_formula(name):
    module = parse_hlo(dump(name))
    expanded = expand_gpu_library_calls(module)
    verify_module(expanded)
    assert not any(i.opcode == "custom-call" for c in expanded.computations for i in c)
    args = _inputs(dump(name), seed=11)
    for want, got in zip(_leaves(evaluate(module, *args)), _leaves(evaluate(expanded, *args))):
        close(got, want)  # the same formula; f32 sums in another order may round once apart


def test_the_gradient_of_a_forward_dump_is_jax_s():
    """``vjp`` differentiates the call through its expansion (no backward call given)."""
    q, k, v = qkv()
    cotangent = random((B, T, N, H), seed=5)
    grads = evaluate(vjp(parse_hlo(dump("cudnn_fmha_causal_gqa"))), q, k, v, cotangent)
    for g, w in zip(grads, jax_attention_gradients((q, k, v), cotangent, scale=0.25,
                                                   is_causal=True)):
        close(g, w, ulps=2)


# --- forward calls written as JAX writes them, in the cases the dumps above do not show ---

def fmha_module(*, layout="BNTH", dtype="bf16", heads=N, kv_heads=KV, mask="NO_MASK",
                window=0, bias=None, training=False, scale=0.5, extra: dict | None = None,
                target=None) -> str:
    """A forward ``__cudnn$fmha*`` call on Q, K, V (``BTNH`` or ``BNTH``), as JAX lowers it."""
    if layout == "BNTH":
        q, kv, batch, v_sequence = (B, heads, T, H), (B, kv_heads, T, H), [0, 1], 2
    else:
        q, kv, batch, v_sequence = (B, T, heads, H), (B, T, kv_heads, H), [0, 2], 1

    def numbers(lhs_batch, rhs_batch, rhs_contracting):
        return {"lhs_contracting_dimensions": ["3"],
                "rhs_contracting_dimensions": [str(rhs_contracting)],
                "lhs_batch_dimensions": [str(d) for d in lhs_batch],
                "rhs_batch_dimensions": [str(d) for d in rhs_batch]}

    config = {"fmha_scale": scale, "mask_type": mask, "dropout_rate": 0.0, "seed": 42,
              "sliding_window_length": window, "max_seg_per_batch": 1,
              "is_paged_attention": False,
              "bmm1_dot_dimension_numbers": numbers(batch, batch, 3),
              "bmm2_dot_dimension_numbers": numbers([0, 1], batch, v_sequence)}
    config.update(extra or {})
    shape = lambda dims: f"{dtype}[{','.join(map(str, dims))}]"  # noqa: E731
    params = [f"q = {shape(q)} parameter(0)", f"k = {shape(kv)} parameter(1)",
              f"v = {shape(kv)} parameter(2)"]
    operands = ["q", "k", "v"]
    if bias is not None:
        params.append(f"b = {shape(bias)} parameter(3)")
        operands.append("b")
    if mask.startswith("PADDING"):
        params += [f"ql = s32[{B}] parameter({len(params)})",
                   f"kl = s32[{B}] parameter({len(params) + 1})"]
        operands += ["ql", "kl"]
    out = shape((B, heads, T, H))
    results = [out] + ([f"f32[{B},{heads},{T}]"] if training else []) + ["u8[0]{0}"]
    target = target or ("__cudnn$fmhaScaleBiasSoftmax" if bias else "__cudnn$fmhaSoftmax")
    body = "\n  ".join(params + [
        f"c = ({', '.join(results)}) custom-call({', '.join(operands)}), "
        f'custom_call_target="{target}", backend_config='
        f'{json.dumps({"operation_queue_id": "0", "cudnn_fmha_backend_config": config})}',
        f"ROOT o = {out} get-tuple-element(c), index=0"])
    return f"HloModule m\n\nENTRY e {{\n  {body}\n}}\n"


def _bnth(x):
    return np.transpose(x, (0, 2, 1, 3))


def _inputs(text: str, seed: int = 0) -> list[np.ndarray]:
    """Random operands of ``text``'s parameters (sequence lengths: ``T - 7`` and 5)."""
    def operand(shape, seed):
        if shape.dtype == "s32":
            return np.int32([T - 7, 5])
        if shape.dtype == "f32":  # a training step's cotangent
            return random(shape.dims, "bf16", seed).astype(np.float32)
        return random(shape.dims, shape.dtype, seed)

    return [operand(p.shape, seed + i) for i, p in enumerate(parse_hlo(text).entry.parameters)]


@pytest.mark.parametrize("case", [
    dict(layout="BNTH", mask="CAUSAL"),
    dict(layout="BNTH", kv_heads=1, bias=(B, 1, T, T)),  # multi-query, a per-batch bias
    dict(layout="BTNH", heads=2, kv_heads=2, mask="PADDING", dtype="f16"),
])
def test_a_forward_call_is_jax_attention(case):
    text = fmha_module(**case)
    args = _inputs(text)
    q, k, v = args[:3]
    if case["layout"] == "BNTH":
        q, k, v = _bnth(q), _bnth(k), _bnth(v)
    kw = dict(scale=0.5, is_causal=case.get("mask") == "CAUSAL")
    if case.get("bias"):
        kw["bias"] = args[3]
    if case.get("mask") == "PADDING":
        kw.update(query_seq_lengths=args[3], key_value_seq_lengths=args[4])
    got = evaluate(parse_hlo(text), *args)[0]
    close(_bnth(got), jax_attention(q, k, v, **kw))  # every result is [B, N, T, H]


def test_the_training_forward_returns_jax_s_logsumexp():
    text = fmha_module(training=True, mask="CAUSAL")
    q, k, v = _inputs(text)
    _, stats, _ = _call_results(text, q, k, v)
    _, residual = xla_attention(scale=0.5, is_causal=True, return_residual=True)(
        _bnth(q), _bnth(k), _bnth(v))
    # JAX's residual: logsumexp per [B, T, N], rounded to the operands' type.
    close(stats, np.transpose(as_f32(residual), (0, 2, 1)))


def _whole_call(text: str) -> str:
    """``text`` with the call ``c`` itself as the ROOT (every result, the workspace too)."""
    return text.replace("ROOT o = ", "o = ").replace("  c = ", "  ROOT c = ")


def _call_results(text: str, *args) -> tuple:
    return evaluate(parse_hlo(_whole_call(text)), *args)


@settings(max_examples=12, deadline=None)
@given(layout=st.sampled_from(["BNTH", "BTNH"]), kv_heads=st.sampled_from([1, 2, 4]),
       mask=st.sampled_from(["NO_MASK", "CAUSAL", "PADDING", "PADDING_CAUSAL"]),
       window=st.sampled_from([0, 5]), bias=st.sampled_from([None, (B, N, T, T), (1, N, T, T),
                                                             (B, 1, T, T)]),
       training=st.booleans(), dtype=st.sampled_from(["bf16", "f16"]))
def test_the_expansion_of_any_forward_call_computes_the_formula(layout, kv_heads, mask, window,
                                                               bias, training, dtype):
    text = fmha_module(layout=layout, kv_heads=kv_heads, mask=mask, window=window, bias=bias,
                       training=training, dtype=dtype)
    module = parse_hlo(_whole_call(text))
    expanded = expand_gpu_library_calls(module)
    verify_module(expanded)
    args = _inputs(text, seed=7)
    for want, got in zip(evaluate(module, *args), evaluate(expanded, *args)):
        close(got, want)


@pytest.mark.parametrize("case, message", [
    (dict(extra={"dropout_rate": 0.1}), "dropout"),
    (dict(mask="ALIBI"), "mask_type ALIBI"),
    (dict(extra={"is_paged_attention": True}), "paged"),
    (dict(extra={"max_seg_per_batch": 2}), "packed segments"),
    (dict(target="__cudnn$fmhaSoftmaxF8"), "fp8"),
    (dict(target="__cudnn$fmhaScaleBiasSoftmax"), "takes 3 operands, not the 4"),
    (dict(extra={"bmm1_dot_dimension_numbers": {"lhs_batch_dimensions": ["0"]}}), "bmm1"),
    (dict(kv_heads=3), "do not fit"),
    (dict(bias=(B, N, T, 5)), r"expected bf16\[2, 4, 32, 32\] \(or 1 per dim\)"),
])
def test_what_is_not_computed_is_refused_located(case, message):
    text = fmha_module(**case)
    with pytest.raises(UnsupportedOpError, match=message) as err:
        expand_gpu_library_calls(parse_hlo(text))
    assert err.value.line is not None
    with pytest.raises(EvaluationError, match=message):
        evaluate(parse_hlo(text), *_inputs(text))


def _leaves(value) -> list:
    return list(value) if isinstance(value, (tuple, list)) else [value]


def test_a_backward_given_other_statistics_reads_them():
    """Statistics that are not its forward's (here a parameter) are read as given, not
    computed again: the expansion then agrees with the formula on any statistics."""
    module = parse_hlo(dump("cudnn_fmha_train_causal_gqa"))
    entry = module.entry
    backward = next(i for i in entry if i.attr("custom_call_target", "").endswith("Backward"))
    call = cudnn_fmha_call(backward)
    assert reads_its_forward(call, entry)
    stats = HloInstruction("stats", "parameter", ArrayShape("f32", (B, N, T)), (),
                           (("parameter_number", len(entry.parameters)),))
    operands = tuple("stats" if o == call.stats else o for o in backward.operands)
    instructions = (stats,) + tuple(i.replace(operands=operands) if i is backward else i
                                    for i in entry)
    given = replace(module, attributes=(), computations=tuple(  # a new signature
        replace(c, instructions=instructions) if c is entry else c for c in module.computations))
    assert not reads_its_forward(cudnn_fmha_call(given.entry.instruction(backward.name)),
                                 given.entry)
    # logsumexp of 32 scores of about unit size: 2 to 6; these probabilities sum to anything
    args = _inputs(dump("cudnn_fmha_train_causal_gqa")) + [
        np.random.default_rng(9).uniform(2, 6, (B, N, T)).astype(np.float32)]
    expanded = expand_gpu_library_calls(given)
    verify_module(expanded)
    for want, got in zip(evaluate(given, *args), evaluate(expanded, *args)):
        close(got, want)
