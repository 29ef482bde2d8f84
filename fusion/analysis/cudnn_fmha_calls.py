"""cuDNN fused attention custom-calls: what a ``__cudnn$fmha*`` call computes.

``jax.nn.dot_product_attention(..., implementation="cudnn")`` (and JAX's
``cudnn.fused_attention_stablehlo``) lowers attention to one custom-call to cuDNN's flash
attention, so a GPU dump of a model using it holds ``__cudnn$fmhaSoftmax`` (with a bias:
``__cudnn$fmhaScaleBiasSoftmax``) and, when trained, the ``...Backward`` call.  Its
``cudnn_fmha_backend_config`` says what it computes, per batch ``b`` and query head ``n``
(reading kv head ``n // (heads / kv_heads)``: grouped- and multi-query attention)::

    S = fmha_scale * Q K^T + bias          (f32; the bias broadcast over its size-1 dims)
    S = S where visible else -0.7 * f32max (mask_type, sliding_window_length, sequence lengths)
    P = softmax(S)                         (f32, over the keys)
    O = P V                                (P rounded to V's type, f32 accumulation)

with the mask ``CAUSAL`` (key <= query), ``PADDING`` (query < q_seqlen[b] and key <
kv_seqlen[b], the two ``s32[B]`` operands after the bias), ``PADDING_CAUSAL`` both, and a
sliding window of ``L`` keeping the keys ``query - L < key <= query``.  ``O`` is zero on the
padded queries.  The training form also returns the softmax statistics ``logsumexp(S)``
(``f32[B, N, T]``), which the backward call reads with ``dO`` and ``O`` to give ``dQ``,
``dK``, ``dV`` (and ``dbias``): the exact gradients of the forward, ``dS`` rounded to the
operands' type before its two dots, as cuDNN does.  The dims of each operand are named by
the config's dot dimension numbers (``bmm1``: ``Q K^T``, ``bmm2``: ``P V``, the backward's
four gradient GEMMs), so a ``BTNH`` and a ``BNTH`` layout read alike; every result is
``[B, N, T|S, H]``.  Dropout (cuDNN's own random stream), the ALIBI mask, paged K/V, packed
segments and fp8 are refused, located.  This module decodes; ``evaluator/cudnn_fmha_ops``
computes, ``transforms/fmha_expansion`` writes the HLO ops the compiler fuses into its
attention kernels.

>>> from fusion.text.parser import parse_hlo
>>> dims = {"lhs_contracting_dimensions": ["3"], "rhs_contracting_dimensions": ["3"],
...         "lhs_batch_dimensions": ["0", "2"], "rhs_batch_dimensions": ["0", "2"]}
>>> pv = {"lhs_contracting_dimensions": ["3"], "rhs_contracting_dimensions": ["1"],
...       "lhs_batch_dimensions": ["0", "1"], "rhs_batch_dimensions": ["0", "2"]}
>>> import json
>>> config = json.dumps({"cudnn_fmha_backend_config": {"fmha_scale": 0.25,
...     "mask_type": "CAUSAL", "bmm1_dot_dimension_numbers": dims,
...     "bmm2_dot_dimension_numbers": pv}})
>>> m = parse_hlo(f'''HloModule m
... ENTRY e {{
...   q = bf16[1,8,4,16] parameter(0)
...   k = bf16[1,8,2,16] parameter(1)
...   v = bf16[1,8,2,16] parameter(2)
...   c = (bf16[1,4,8,16], u8[0]) custom-call(q, k, v),
...     custom_call_target="__cudnn$fmhaSoftmax", backend_config={config}
...   ROOT g = bf16[1,4,8,16] get-tuple-element(c), index=0
... }}''')
>>> call = cudnn_fmha_call(m.entry.instruction("c"))
>>> call.scale, call.causal, call.query_order, call.value_order
(0.25, True, (0, 2, 1, 3), (0, 2, 1, 3))
>>> fmha_dims(call, m.entry.instruction("c"), lambda n: m.entry.instruction(n).shape)
FmhaDims(batch=1, heads=4, kv_heads=2, queries=8, keys=8, head_dim=16, value_dim=16)
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fusion.analysis.custom_call_configs import backend_config_of, config_number, custom_call_error
from fusion.errors import UnsupportedOpError
from fusion.ir.hlo_module import HloComputation, HloInstruction
from fusion.ir.shape import ArrayShape, Shape, TupleShape
from fusion.text.backend_config import as_list

#: cuDNN fused attention target -> (backward, has a bias); the dropout forms are known and
#: computed when their ``dropout_rate`` is 0.
FMHA_TARGETS: dict[str, tuple[bool, bool]] = {
    "__cudnn$fmhaScaleBiasSoftmax": (False, True),
    "__cudnn$fmhaScaleBiasSoftmaxBackward": (True, True),
    "__cudnn$fmhaScaleBiasSoftmaxDropout": (False, True),
    "__cudnn$fmhaScaleBiasSoftmaxDropoutBackward": (True, True),
    "__cudnn$fmhaSoftmax": (False, False),
    "__cudnn$fmhaSoftmaxBackward": (True, False),
    "__cudnn$fmhaSoftmaxDropout": (False, False),
    "__cudnn$fmhaSoftmaxDropoutBackward": (True, False),
}
#: The fp8 forms: recognised, refused (their scaling factors are not decoded).
FP8_TARGETS = ("__cudnn$fmhaSoftmaxF8", "__cudnn$fmhaSoftmaxBackwardF8")
#: ``mask_type`` -> (causal, padding); XLA's ``CudnnfMHABackendConfig.MaskType`` numbers too.
MASK_TYPES = {"CAUSAL": (True, False), "NO_MASK": (False, False), "PADDING": (False, True),
              "PADDING_CAUSAL": (True, True)}
_MASK_NUMBERS = {"0": "NO_MASK", "1": "PADDING", "2": "CAUSAL", "3": "PADDING_CAUSAL",
                 "4": "ALIBI"}
#: The operand types cuDNN's flash attention takes.
FMHA_TYPES = ("bf16", "f16")
#: What a masked score becomes: JAX's ``_get_large_negative`` for f32 scores, finite so that
#: a row with every key masked (a padded query) stays a number.
MASKED_SCORE = -0.7 * 3.4028234663852886e38

#: A dims order: the operand's dims as (batch, heads, sequence, head or value dim).
DimsOrder = tuple[int, int, int, int]


@dataclass(frozen=True)
class FmhaCall:
    """One cuDNN fused attention custom-call, decoded (module docstring).

    Operand names: ``query``, ``key``, ``value``, ``bias``, ``q_seqlen``/``kv_seqlen`` (the
    padding mask's), and for the backward ``stats`` (the forward's logsumexp), ``d_output``
    and ``output`` (the forward's O, in ``d_output``'s layout).  ``*_order``: each operand's
    dims as (batch, heads, sequence, head dim).  ``window``: the sliding window's length (0:
    none).  ``results``: the arrays the call returns before its workspace."""

    target: str
    backward: bool
    query: str
    key: str
    value: str
    bias: str | None
    q_seqlen: str | None
    kv_seqlen: str | None
    stats: str | None
    d_output: str | None
    output: str | None
    query_order: DimsOrder
    key_order: DimsOrder
    value_order: DimsOrder
    grad_order: DimsOrder | None
    scale: float
    causal: bool
    window: int
    results: tuple[ArrayShape, ...]
    workspace: bool
    tuple_result: bool = True

    @property
    def padding(self) -> bool:
        """Whether sequence lengths mask the queries and keys."""
        return self.q_seqlen is not None

    @property
    def returns_stats(self) -> bool:
        """A training forward: the softmax statistics are its second result."""
        return not self.backward and len(self.results) == 2

    @property
    def returns_bias_grad(self) -> bool:
        """A backward returning ``dbias`` (its fourth result)."""
        return self.backward and len(self.results) == 4


@dataclass(frozen=True)
class FmhaDims:
    """The extents of one attention call: ``heads`` query heads share ``kv_heads`` K/V heads."""

    batch: int
    heads: int
    kv_heads: int
    queries: int
    keys: int
    head_dim: int
    value_dim: int

    @property
    def group(self) -> int:
        """Query heads per K/V head."""
        return self.heads // self.kv_heads


def is_cudnn_fmha_call(instr: HloInstruction) -> bool:
    """A custom-call to a cuDNN fused attention target (computed, or refused by name)."""
    target = instr.attr("custom_call_target", None) if instr.opcode == "custom-call" else None
    return target in FMHA_TARGETS or target in FP8_TARGETS


def cudnn_fmha_call(instr: HloInstruction) -> FmhaCall:
    """What the fused attention custom-call ``instr`` computes; ``UnsupportedOpError``
    (located, naming the target and the field) for what this project does not compute."""
    target = instr.attr("custom_call_target")
    if target in FP8_TARGETS:
        raise custom_call_error(instr, "fp8 fused attention is not supported")
    backward, has_bias = FMHA_TARGETS[target]
    config = backend_config_of(instr, "cudnn_fmha_backend_config")
    if config_number(config, "dropout_rate", 0, instr) != 0:
        raise custom_call_error(instr, "dropout draws from cuDNN's own random stream, which "
                                  "this project cannot reproduce; dropout_rate must be 0")
    if str(config.get("is_paged_attention", False)).lower() == "true":
        raise custom_call_error(instr, "paged attention (page tables) is not supported")
    if config_number(config, "max_seg_per_batch", 1, instr) > 1:
        raise custom_call_error(instr, "packed segments (max_seg_per_batch > 1) are not "
                                  "supported")
    mask = str(config.get("mask_type", "NO_MASK"))
    mask = _MASK_NUMBERS.get(mask, mask)
    if mask not in MASK_TYPES:
        raise custom_call_error(instr, f"mask_type {mask} is not supported (known: "
                                  f"{', '.join(MASK_TYPES)})")
    causal, padding = MASK_TYPES[mask]
    window = int(config_number(config, "sliding_window_length", 0, instr))
    if window < 0:
        raise custom_call_error(instr, f"sliding_window_length={window} is negative")
    ops = list(instr.operands)
    expected = (5 if backward else 3) + has_bias + backward + 2 * padding
    if len(ops) != expected:
        raise custom_call_error(instr, f"takes {len(ops)} operands, not the {expected} of "
                                  f"{_operand_list(backward, has_bias, padding)}")
    q, k, v = ops[:3]
    stats = d_output = output = None
    rest = ops[3:]
    if backward:
        stats, d_output, rest = rest[0], rest[1], rest[2:]
    bias = rest.pop(0) if has_bias else None
    if backward:
        output = rest.pop(0)
    q_len, kv_len = (rest[0], rest[1]) if padding else (None, None)
    results, workspace = _results(instr, backward)
    if backward:
        orders = (_order(instr, config, "bmm1_grad_gemm1", "rhs", "contracting"),
                  _order(instr, config, "bmm1_grad_gemm2", "rhs", "contracting"),
                  _order(instr, config, "bmm2_grad_gemm2", "rhs", "free"),
                  _order(instr, config, "bmm2_grad_gemm1", "rhs", "contracting"))
    else:
        orders = (_order(instr, config, "bmm1", "lhs", "free"),
                  _order(instr, config, "bmm1", "rhs", "free"),
                  _order(instr, config, "bmm2", "rhs", "contracting"), None)
    if backward and len(results) == 4 and not has_bias:
        raise custom_call_error(instr, "returns a bias gradient but takes no bias")
    return FmhaCall(target, backward, q, k, v, bias, q_len, kv_len, stats, d_output, output,
                    *orders, config_number(config, "fmha_scale", 1, instr), causal, window,
                    results, workspace)


def fmha_dims(call: FmhaCall, instr: HloInstruction, shape_of: Callable[[str], Shape]
              ) -> FmhaDims:
    """The extents of ``call`` (the custom-call ``instr``), its operands' shapes given by
    ``shape_of``; ``UnsupportedOpError`` (located) for shapes that do not fit together."""
    def ordered(name: str, order: DimsOrder, what: str) -> tuple[int, ...]:
        shape = shape_of(name)
        if not isinstance(shape, ArrayShape) or shape.rank != 4 or shape.dtype not in FMHA_TYPES:
            raise custom_call_error(instr, f"{what} {name} is {shape}, not a rank-4 "
                                      f"{' or '.join(FMHA_TYPES)} array")
        return tuple(shape.dims[d] for d in order)

    b, n, t, h = ordered(call.query, call.query_order, "the query")
    kb, kn, s, kh = ordered(call.key, call.key_order, "the key")
    vb, vn, vs, hv = ordered(call.value, call.value_order, "the value")
    if not (b == kb == vb and kn == vn and s == vs and h == kh) or n % kn:
        raise custom_call_error(instr, f"query [B,N,T,H]={[b, n, t, h]}, key {[kb, kn, s, kh]} "
                                  f"and value {[vb, vn, vs, hv]} do not fit (one batch, K and "
                                  "V alike, the query heads a multiple of theirs)")
    dims = FmhaDims(b, n, kn, t, s, h, hv)
    expected = _expected_operands(call, dims, shape_of)
    for name, (dtype, extents, broadcasts) in expected.items():
        shape = shape_of(name)
        if not isinstance(shape, ArrayShape) or shape.dtype not in dtype or \
                not _fits(shape.dims, extents, broadcasts):
            raise custom_call_error(instr, f"operand {name} is {shape}, expected {dtype[0]}"
                                      f"{list(extents)}{' (or 1 per dim)' if broadcasts else ''}")
    for got, (dtype, want) in zip(call.results, _expected_results(call, dims, shape_of)):
        if got.dtype != dtype or got.dims != want:
            raise custom_call_error(instr, f"result {got} should be {dtype}{list(want)}")
    return dims


def reads_its_forward(call: FmhaCall, comp: HloComputation) -> bool:
    """Whether the backward ``call`` (in ``comp``) reads the statistics and the output of a
    forward call on its own Q, K, V, bias and lengths with its own scale and mask: then
    ``stats = logsumexp(S)`` and ``O = P V`` by construction, and a backward may compute
    them again from the scores (``rowsum(dO * O) = rowsum(P * dP)``) instead of reading them.

    The output may be read through the transpose taking the forward's ``[B, N, T, H]`` to
    the backward's layout, as JAX writes it."""
    stats = comp.instruction(call.stats)
    if stats.opcode != "get-tuple-element" or stats.attr("index") != 1:
        return False
    forward_instr = comp.instruction(stats.operands[0])
    if not is_cudnn_fmha_call(forward_instr):
        return False
    try:
        forward = cudnn_fmha_call(forward_instr)
    except UnsupportedOpError:
        return False
    same = ("query", "key", "value", "bias", "q_seqlen", "kv_seqlen", "query_order",
            "key_order", "value_order", "scale", "causal", "window")
    if forward.backward or any(getattr(forward, f) != getattr(call, f) for f in same):
        return False
    output = comp.instruction(call.output)
    order = tuple(range(4))
    if output.opcode == "transpose":
        order = tuple(output.attr("dimensions"))
        output = comp.instruction(output.operands[0])
    return (output.opcode == "get-tuple-element" and output.attr("index") == 0
            and output.operands[0] == forward_instr.name
            and all(order[call.grad_order[j]] == j for j in range(4)))


def _expected_operands(call: FmhaCall, d: FmhaDims, shape_of: Callable[[str], Shape]
                       ) -> dict[str, tuple[tuple[str, ...], tuple[int, ...], bool]]:
    """Operand -> (allowed types, extents, whether a dim may be 1 instead: a bias's)."""
    qtype = (shape_of(call.query).dtype,)
    out: dict[str, tuple[tuple[str, ...], tuple[int, ...], bool]] = {}
    if call.bias is not None:
        out[call.bias] = (qtype, (d.batch, d.heads, d.queries, d.keys), True)
    for name in (call.q_seqlen, call.kv_seqlen):
        if name is not None:
            out[name] = (("s32",), (d.batch,), False)
    if call.backward:
        out[call.stats] = (("f32",), (d.batch, d.heads, d.queries), False)
        grad = (d.batch, d.heads, d.queries, d.value_dim)
        layout = tuple(grad[call.grad_order.index(i)] for i in range(4))
        out[call.d_output] = out[call.output] = (qtype, layout, False)
    return out


def _fits(dims: tuple[int, ...], extents: tuple[int, ...], broadcasts: bool) -> bool:
    return len(dims) == len(extents) and all(
        got == want or (broadcasts and got == 1) for got, want in zip(dims, extents))


def _expected_results(call: FmhaCall, d: FmhaDims, shape_of: Callable[[str], Shape]
                      ) -> list[tuple[str, tuple[int, ...]]]:
    dtype = shape_of(call.query).dtype
    if not call.backward:
        return [(dtype, (d.batch, d.heads, d.queries, d.value_dim)),
                ("f32", (d.batch, d.heads, d.queries))]
    results = [(dtype, (d.batch, d.heads, d.queries, d.head_dim)),
               (dtype, (d.batch, d.kv_heads, d.keys, d.head_dim)),
               (dtype, (d.batch, d.kv_heads, d.keys, d.value_dim))]
    if call.bias is not None:
        results.append((dtype, shape_of(call.bias).dims))
    return results


def _order(instr: HloInstruction, config: dict, gemm: str, side: str, sequence: str
           ) -> DimsOrder:
    """The dims of ``gemm``'s ``side`` operand as (batch, heads, sequence, other): its two
    batch dims, then its ``sequence`` dim (the ``free`` one or the ``contracting`` one)."""
    key = f"{gemm}_dot_dimension_numbers"
    numbers = config.get(key)
    if not isinstance(numbers, dict):
        raise custom_call_error(instr, f"its backend_config has no {key}")
    try:
        batch = tuple(int(x) for x in as_list(numbers.get(f"{side}_batch_dimensions")))
        contracting = tuple(int(x) for x in as_list(numbers.get(f"{side}_contracting_dimensions")))
    except (TypeError, ValueError):
        raise custom_call_error(instr, f"{key} is not lists of dims") from None
    free = tuple(x for x in range(4) if x not in batch + contracting)
    if len(batch) != 2 or len(contracting) != 1 or len(free) != 1 \
            or sorted(batch + contracting + free) != [0, 1, 2, 3]:
        raise custom_call_error(instr, f"{key}: the {side} operand's batch {list(batch)} and "
                                  f"contracting {list(contracting)} dims are not two batch "
                                  "dims and one contracting dim of a rank-4 array")
    seq, other = (free, contracting) if sequence == "free" else (contracting, free)
    return (batch[0], batch[1], seq[0], other[0])


def _results(instr: HloInstruction, backward: bool) -> tuple[tuple[ArrayShape, ...], bool]:
    shape = instr.shape
    parts = list(shape.elements) if isinstance(shape, TupleShape) else []
    if not parts or not all(isinstance(p, ArrayShape) for p in parts):
        raise custom_call_error(instr, f"result {shape} is not a tuple of arrays")
    workspace = parts[-1].dtype in ("u8", "s8") and parts[-1].rank == 1
    arrays = tuple(parts[:-1] if workspace else parts)
    allowed = (3, 4) if backward else (1, 2)
    if len(arrays) not in allowed:
        what = "(dQ, dK, dV[, dbias][, workspace])" if backward else \
            "(O[, softmax statistics][, workspace])"
        raise custom_call_error(instr, f"result {shape} is not {what}")
    return arrays, workspace


def _operand_list(backward: bool, bias: bool, padding: bool) -> str:
    names = ["Q", "K", "V"] + (["softmax statistics", "dO"] if backward else [])
    names += ["bias"] * bias + ["O"] * backward + ["q_seqlen", "kv_seqlen"] * padding
    return f"({', '.join(names)})"


__all__ = ["FMHA_TARGETS", "FMHA_TYPES", "FP8_TARGETS", "FmhaCall", "FmhaDims", "MASKED_SCORE",
           "MASK_TYPES", "cudnn_fmha_call", "fmha_dims", "is_cudnn_fmha_call",
           "reads_its_forward"]
