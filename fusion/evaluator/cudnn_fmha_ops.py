"""Reference rule of the cuDNN fused attention custom-calls (``fusion.analysis.cudnn_fmha_calls``).

The forward ``O = softmax(mask(scale * Q K^T + bias)) V`` (and its logsumexp statistics), and
the backward's exact gradients, in NumPy f32: each operand taken to ``[B, N, T|S, H]`` by its
dims order, K and V repeated over the query heads sharing them, the probabilities and ``dS``
rounded to the operands' type before the dots that read them (as cuDNN does), results
rounded once.  Written from the formula, not from the HLO expansion the compiler runs
(``transforms.fmha_expansion``), so the two check each other; JAX's own attention checks both
(``tests/fusion/test_cudnn_fmha_calls.py``).

>>> from fusion.analysis.cudnn_fmha_calls import MASKED_SCORE
>>> s = np.float32([[[[0.0, 1.0], [2.0, 3.0]]]])
>>> masked = masked_scores(s, causal=True, window=0, q_len=None, kv_len=None)
>>> (masked == np.float32(MASKED_SCORE))[0, 0].tolist()
[[False, True], [False, False]]
"""
from __future__ import annotations

from typing import Any

import numpy as np

from fusion.analysis.cudnn_fmha_calls import (FmhaCall, FmhaDims, MASKED_SCORE, cudnn_fmha_call,
                                              fmha_dims)
from fusion.errors import FusionCompilerError
from fusion.evaluator.failures import op_error
from fusion.evaluator.library_epilogues import call_results
from fusion.evaluator.numerics import numpy_dtype

F32 = np.float32


def eval_cudnn_fmha_call(ev: Any, instr: Any, args: list) -> Any:
    """The outputs of the fused attention custom-call ``instr`` on ``args``."""
    shapes = dict(zip(instr.operands, ev.operand_shapes(instr)))
    try:
        call = cudnn_fmha_call(instr)
        dims = fmha_dims(call, instr, shapes.__getitem__)
    except FusionCompilerError as err:
        raise op_error(instr, err.message) from None
    value = dict(zip(instr.operands, (np.asarray(a) for a in args)))
    outputs = (_backward if call.backward else _forward)(call, dims, value)
    typed = [o.astype(numpy_dtype(shape)) for o, shape in zip(outputs, call.results)]
    return call_results(instr, call, typed)


def masked_scores(s: np.ndarray, *, causal: bool, window: int, q_len: np.ndarray | None,
                  kv_len: np.ndarray | None) -> np.ndarray:
    """``s`` (``[B, N, T, S]``) with every score the mask hides set to ``MASKED_SCORE``."""
    t, k = np.arange(s.shape[-2])[:, None], np.arange(s.shape[-1])[None, :]
    visible = np.ones(s.shape, bool)
    if causal:
        visible &= k <= t
    if window:
        visible &= (k <= t) & (k > t - window)
    if q_len is not None:
        visible &= t[None, None] < q_len.reshape(-1, 1, 1, 1)
        visible &= k[None, None] < kv_len.reshape(-1, 1, 1, 1)
    return np.where(visible, s, F32(MASKED_SCORE))


def _operands(call: FmhaCall, d: FmhaDims, value: dict) -> tuple[np.ndarray, ...]:
    """Q, K, V as f32 ``[B, N, T|S, H]``, K and V repeated over each group of query heads."""
    q = np.transpose(value[call.query], call.query_order).astype(F32)
    k, v = (np.repeat(np.transpose(value[name], order).astype(F32), d.group, axis=1)
            for name, order in ((call.key, call.key_order), (call.value, call.value_order)))
    return q, k, v


def _scores(call: FmhaCall, value: dict, q: np.ndarray, k: np.ndarray) -> np.ndarray:
    s = np.matmul(q, np.swapaxes(k, -1, -2)) * F32(call.scale)
    if call.bias is not None:
        s = s + value[call.bias].astype(F32)
    lengths = [value[n] if n is not None else None for n in (call.q_seqlen, call.kv_seqlen)]
    return masked_scores(s, causal=call.causal, window=call.window, q_len=lengths[0],
                         kv_len=lengths[1]).astype(F32)


def _query_rows(call: FmhaCall, value: dict, shape: tuple[int, ...]) -> np.ndarray:
    """1 on the queries the padding keeps, 0 on the others (``[B, 1, T, 1]``)."""
    if call.q_seqlen is None:
        return np.ones((1, 1, shape[2], 1), F32)
    return (np.arange(shape[2])[None, :] < value[call.q_seqlen].reshape(-1, 1)
            ).astype(F32)[:, None, :, None]


def _forward(call: FmhaCall, d: FmhaDims, value: dict) -> list[np.ndarray]:
    q, k, v = _operands(call, d, value)
    s = _scores(call, value, q, k)
    top = s.max(axis=-1, keepdims=True)
    e = np.exp(s - top)
    total = e.sum(axis=-1, keepdims=True)
    p = (e / total).astype(value[call.value].dtype).astype(F32)
    o = np.matmul(p, v) * _query_rows(call, value, s.shape)
    stats = (top + np.log(total))[..., 0]
    return [o, stats][:len(call.results)]


def _backward(call: FmhaCall, d: FmhaDims, value: dict) -> list[np.ndarray]:
    q, k, v = _operands(call, d, value)
    dtype = value[call.query].dtype
    grad_o, out = (np.transpose(value[n], call.grad_order).astype(F32)
                   for n in (call.d_output, call.output))
    s = _scores(call, value, q, k)
    p = np.exp(s - value[call.stats].astype(F32)[..., None])
    grad_o = grad_o * _query_rows(call, value, s.shape)  # O is 0 there: nothing flows back
    row = (grad_o * out).sum(axis=-1, keepdims=True)
    grad_s = p * (np.matmul(grad_o, np.swapaxes(v, -1, -2)) - row)
    grad_s16 = grad_s.astype(dtype).astype(F32)
    grad_q = np.matmul(grad_s16, k) * F32(call.scale)
    grad_k = np.matmul(np.swapaxes(grad_s16, -1, -2), q) * F32(call.scale)
    grad_v = np.matmul(np.swapaxes(p.astype(dtype).astype(F32), -1, -2), grad_o)

    def per_kv_head(x: np.ndarray) -> np.ndarray:  # the query heads sharing a K/V head
        return x.reshape(d.batch, d.kv_heads, d.group, *x.shape[2:]).sum(axis=2)

    outputs = [grad_q, per_kv_head(grad_k), per_kv_head(grad_v)]
    if call.returns_bias_grad:
        bias = value[call.bias].shape
        outputs.append(grad_s.sum(axis=tuple(i for i in range(4) if bias[i] == 1),
                                  keepdims=True))
    return outputs


__all__ = ["eval_cudnn_fmha_call", "masked_scores"]
