"""A cuDNN fused attention custom-call written as the HLO ops it computes.

The ops are attention as JAX writes it (``jax.nn.dot_product_attention``'s XLA form), so the
fusion pass recognises them as it recognises JAX's (``tiling.fusion_pass.attention_pattern``,
``attention_backward``): Q taken to ``[B, kv_heads, group, T, H]`` and K, V to
``[B, kv_heads, S, H]`` (by each operand's dims order; the group of query heads sharing a K/V
head is a free dim of the dots, so K and V are never repeated), the scores an f32 ``dot``,
scaled, biased, masked by a ``select`` on iota comparisons (causal, sliding window, sequence
lengths), then ``exp(s - max) / sum`` in f32 and a second ``dot`` with the probabilities in
V's type.  The backward computes the probabilities from the forward's statistics
(``exp(s - logsumexp)``), or, when those are its forward's, from the scores again as JAX's own
attention backward does (``fmha_outputs``), then the softmax backward's row sums and the four
gradient dots, ``dK`` and ``dV`` contracting the group with the queries.  Semantics:
``fusion.analysis.cudnn_fmha_calls``; ``transforms.gpu_call_expansion`` calls this for each call.

>>> from fusion.text.parser import parse_hlo
>>> from fusion.transforms.gpu_call_expansion import expand_gpu_library_calls
>>> import json
>>> qk = {"lhs_contracting_dimensions": ["3"], "rhs_contracting_dimensions": ["3"],
...       "lhs_batch_dimensions": ["0", "1"], "rhs_batch_dimensions": ["0", "1"]}
>>> pv = dict(qk, rhs_contracting_dimensions=["2"])
>>> config = json.dumps({"cudnn_fmha_backend_config": {"fmha_scale": 0.5,
...     "mask_type": "CAUSAL", "bmm1_dot_dimension_numbers": qk,
...     "bmm2_dot_dimension_numbers": pv}})
>>> m = parse_hlo(f'''HloModule m
... ENTRY e {{
...   q = bf16[1,2,8,16] parameter(0)
...   c = (bf16[1,2,8,16], u8[0]) custom-call(q, q, q),
...     custom_call_target="__cudnn$fmhaSoftmax", backend_config={config}
...   ROOT g = bf16[1,2,8,16] get-tuple-element(c), index=0
... }}''')
>>> ops = [i.opcode for i in expand_gpu_library_calls(m).entry]
>>> ops.count("dot"), ops.count("reduce"), ops.count("select"), ops[-1]
(2, 2, 1, 'reshape')
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fusion.analysis.cudnn_fmha_calls import MASKED_SCORE, FmhaCall, FmhaDims, reads_its_forward
from fusion.ir.attributes import Literal
from fusion.ir.hlo_module import HloComputation, binary_computation
from fusion.ir.layout import default_layout
from fusion.ir.shape import ArrayShape, Shape

#: The reductions attention needs: opcode -> the init value.
REDUCERS = {"add": 0.0, "maximum": float("-inf")}


def reducer_computations(fresh: Callable[[str], str]) -> dict[str, HloComputation]:
    """``(a, b) -> op(a, b)`` f32 computations for :data:`REDUCERS`, named by ``fresh``."""
    return {opcode: binary_computation(fresh(f"fmha_{opcode}"), opcode, "f32")
            for opcode in REDUCERS}


class FmhaOps:
    """Writes one call's ops through ``ops`` (``gpu_call_expansion``'s builder: ``add``,
    ``splat``), keeping each value's shape."""

    def __init__(self, ops: Any, call: FmhaCall, dims: FmhaDims,
                 shape_of: Callable[[str], Shape], reducers: dict[str, str],
                 recompute: bool = False) -> None:
        self.ops, self.call, self.d = ops, call, dims
        self.shapes: dict[str, ArrayShape] = {}
        self.shape_of = shape_of
        self.reducers = reducers
        self.recompute = recompute  # a backward computing its forward's statistics again

    def shape(self, name: str) -> ArrayShape:
        return self.shapes[name] if name in self.shapes else self.shape_of(name)

    def op(self, opcode: str, dtype: str, dims: tuple[int, ...], *operands: str,
           **attrs: Any) -> str:
        shape = ArrayShape(dtype, tuple(dims))
        name = self.ops.add(opcode, shape, operands, tuple(attrs.items()))
        self.shapes[name] = shape
        return name

    def like(self, opcode: str, x: str, *operands: str, **attrs: Any) -> str:
        s = self.shape(x)
        return self.op(opcode, "pred" if opcode == "compare" else s.dtype, s.dims, x,
                       *operands, **attrs)

    def const(self, value: float, dtype: str, dims: tuple[int, ...]) -> str:
        name = self.ops.splat(value, ArrayShape(dtype, dims))
        self.shapes[name] = ArrayShape(dtype, dims)
        return name

    def convert(self, x: str, dtype: str) -> str:
        s = self.shape(x)
        return x if s.dtype == dtype else self.op("convert", dtype, s.dims, x)

    def transpose(self, x: str, order: tuple[int, ...]) -> str:
        if tuple(order) == tuple(range(len(order))):
            return x
        s = self.shape(x)
        return self.op("transpose", s.dtype, tuple(s.dims[i] for i in order), x,
                       dimensions=tuple(order))

    def reshape(self, x: str, dims: tuple[int, ...]) -> str:
        s = self.shape(x)
        return x if s.dims == tuple(dims) else self.op("reshape", s.dtype, dims, x)

    def spread(self, x: str, dims: tuple[int, ...], to: tuple[int, ...]) -> str:
        return self.op("broadcast", self.shape(x).dtype, to, x, dimensions=tuple(dims))

    def reduce(self, x: str, opcode: str, dim: int) -> str:
        s = self.shape(x)
        init = self.op("constant", "f32", (), literal=Literal((), (REDUCERS[opcode],)))
        return self.op("reduce", "f32", s.dims[:dim] + s.dims[dim + 1:], x, init,
                       dimensions=(dim,), to_apply=self.reducers[opcode])

    def dot(self, lhs: str, rhs: str, contracting: tuple[tuple[int, ...], tuple[int, ...]]
            ) -> str:
        """An f32 dot batched over (batch, kv head)."""
        a, b = self.shape(lhs).dims, self.shape(rhs).dims
        lc, rc = contracting
        free = [a[i] for i in range(2, len(a)) if i not in lc] + \
            [b[i] for i in range(2, len(b)) if i not in rc]
        return self.op("dot", "f32", a[:2] + tuple(free), lhs, rhs, lhs_batch_dims=(0, 1),
                       lhs_contracting_dims=lc, rhs_batch_dims=(0, 1), rhs_contracting_dims=rc)

    # -- attention ---------------------------------------------------------------------

    def grouped(self, name: str, order: tuple[int, ...]) -> str:
        """A query-shaped operand as ``[B, kv_heads, group, T, H]``."""
        d = self.d
        x = self.transpose(name, order)
        return self.reshape(x, (d.batch, d.kv_heads, d.group) + self.shape(x).dims[2:])

    def scores(self, q5: str, k4: str) -> str:
        """The masked f32 scores ``[B, kv_heads, group, T, S]``."""
        call = self.call
        s = self.dot(q5, k4, ((4,), (3,)))
        dims = self.shape(s).dims
        if call.scale != 1:
            s = self.like("multiply", s, self.const(call.scale, "f32", dims))
        if call.bias is not None:
            s = self.like("add", s, self.bias(dims))
        visible = self.visible(dims)
        if visible is None:
            return s
        return self.op("select", "f32", dims, visible, s, self.const(MASKED_SCORE, "f32", dims))

    def bias(self, to: tuple[int, ...]) -> str:
        """The bias broadcast to the scores: its heads split into (kv head, group)."""
        d, bias = self.d, self.call.bias
        b, n, t, s = self.shape(bias).dims
        five = (b, d.kv_heads if n > 1 else 1, d.group if n > 1 else 1, t, s)
        kept = tuple(i for i in range(5) if five[i] == to[i])
        x = self.reshape(self.convert(bias, "f32"), tuple(five[i] for i in kept))
        return self.spread(x, kept, to)

    def query_rows(self, dims: tuple[int, ...]) -> str:
        """Whether each query of a ``[B, kv_heads, group, T, ...]`` value is within its
        sequence length."""
        lengths = self.spread(self.call.q_seqlen, (0,), dims)
        return self.op("compare", "pred", dims, self.op("iota", "s32", dims, iota_dimension=3),
                       lengths, direction="LT")

    def visible(self, dims: tuple[int, ...]) -> str | None:
        """Which scores the mask keeps, or None when it keeps all."""
        call = self.call
        query = self.op("iota", "s32", dims, iota_dimension=3)
        key = self.op("iota", "s32", dims, iota_dimension=4)
        parts = []
        if call.causal or call.window:
            parts.append(self.like("compare", key, query, direction="LE"))
        if call.window:
            reach = self.like("add", key, self.const(call.window, "s32", dims))
            parts.append(self.like("compare", reach, query, direction="GT"))
        if call.padding:
            parts.append(self.query_rows(dims))
            lengths = self.spread(call.kv_seqlen, (0,), dims)
            parts.append(self.like("compare", key, lengths, direction="LT"))
        if not parts:
            return None
        mask = parts[0]
        for part in parts[1:]:
            mask = self.like("and", mask, part)
        return mask

    def rows(self, x: str, opcode: str) -> tuple[str, str]:
        """A reduction of the scores ``x`` over the keys, and it broadcast back."""
        r = self.reduce(x, opcode, 4)
        return r, self.spread(r, (0, 1, 2, 3), self.shape(x).dims)

    def forward(self) -> list[str]:
        """O (and the statistics, for a training call)."""
        call = self.call
        q5 = self.grouped(call.query, call.query_order)
        k4, v4 = self.transpose(call.key, call.key_order), \
            self.transpose(call.value, call.value_order)
        s = self.scores(q5, k4)
        top, top_b = self.rows(s, "maximum")
        e = self.like("exponential", self.like("subtract", s, top_b))
        total, total_b = self.rows(e, "add")
        p = self.convert(self.like("divide", e, total_b), self.shape(call.value).dtype)
        o = self.dot(p, v4, ((4,), (2,)))
        if call.padding:
            dims = self.shape(o).dims
            o = self.op("select", "f32", dims, self.query_rows(dims), o,
                        self.const(0, "f32", dims))
        outputs = [self.result(o, 0)]
        if call.returns_stats:
            lse = self.like("add", top, self.like("log", total))
            outputs.append(self.result(lse, 1))
        return outputs

    def backward(self) -> list[str]:
        """dQ, dK, dV (and dbias)."""
        call, d = self.call, self.d
        dtype = self.shape(call.query).dtype
        q5 = self.grouped(call.query, call.query_order)
        k4, v4 = self.transpose(call.key, call.key_order), \
            self.transpose(call.value, call.value_order)
        grad_o = self.grouped(call.d_output, call.grad_order)
        if call.padding:  # O is 0 on the padded queries: nothing flows back from them
            dims = self.shape(grad_o).dims
            grad_o = self.op("select", dtype, dims, self.query_rows(dims), grad_o,
                             self.const(0, dtype, dims))
        s = self.scores(q5, k4)
        dims = self.shape(s).dims
        grad_p = self.dot(grad_o, v4, ((4,), (3,)))
        if self.recompute:  # the forward's statistics and rowsum(dO * O), from the scores
            _, top_b = self.rows(s, "maximum")
            e = self.like("exponential", self.like("subtract", s, top_b))
            _, total_b = self.rows(e, "add")
            p = self.like("divide", e, total_b)
            row = self.reduce(self.like("multiply", p, grad_p), "add", 4)
        else:
            stats = self.spread(self.reshape(call.stats, dims[:4]), (0, 1, 2, 3), dims)
            p = self.like("exponential", self.like("subtract", s, stats))
            out = self.grouped(call.output, call.grad_order)
            row = self.reduce(self.like("multiply", self.convert(grad_o, "f32"),
                                        self.convert(out, "f32")), "add", 4)
        grad_s = self.like("multiply", p, self.like("subtract", grad_p,
                                                    self.spread(row, (0, 1, 2, 3), dims)))
        grad_s16 = self.convert(grad_s, dtype)
        grad_q = self.scaled(self.dot(grad_s16, k4, ((4,), (2,))))
        grad_k = self.scaled(self.dot(grad_s16, q5, ((2, 3), (2, 3))))
        grad_v = self.dot(self.convert(p, dtype), grad_o, ((2, 3), (2, 3)))
        outputs = [self.result(grad_q, 0),
                   self.result(grad_k, 1), self.result(grad_v, 2)]
        if call.returns_bias_grad:
            full = self.reshape(grad_s, (d.batch, d.heads, d.queries, d.keys))
            bias = self.shape(call.bias).dims
            summed = tuple(i for i in range(4) if bias[i] == 1 and self.shape(full).dims[i] > 1)
            for i in reversed(summed):
                full = self.reduce(full, "add", i)
            outputs.append(self.result(full, 3))
        return outputs

    def scaled(self, x: str) -> str:
        if self.call.scale == 1:
            return x
        return self.like("multiply", x, self.const(self.call.scale, "f32", self.shape(x).dims))

    def result(self, x: str, index: int) -> str:
        """``x`` as the call's result ``index``: rounded to its type where it is computed
        (so the kernel computing it writes the narrow type), then given its dims and layout."""
        want = self.call.results[index]
        x = self.convert(x, want.dtype)
        if self.shape(x).dims != want.dims:
            return self.ops.add("reshape", want, (x,))
        if want.effective_layout != default_layout(want.rank):
            return self.ops.add("copy", want, (x,))
        return x


def fmha_outputs(ops: Any, call: FmhaCall, dims: FmhaDims, comp: HloComputation,
                 reducers: dict[str, str]) -> list[str]:
    """The ops of ``call`` (in ``comp``) written through ``ops``: the names of its results,
    in order.  A backward reading its forward's statistics and output computes them again
    from the scores (``cudnn_fmha_calls.reads_its_forward``), as the backward of JAX's own
    attention does: its kernels then need nothing the forward's attention kernel does not
    write, so the forward stays one kernel and the backward is the attention backward's
    three (``tiling.fusion_pass.attention_backward``)."""
    writer = FmhaOps(ops, call, dims, lambda name: comp.instruction(name).shape, reducers,
                     recompute=call.backward and reads_its_forward(call, comp))
    return writer.backward() if call.backward else writer.forward()


__all__ = ["REDUCERS", "FmhaOps", "fmha_outputs", "reducer_computations"]
