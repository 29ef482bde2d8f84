"""VJP rules of the data-movement ops: each is linear, so its VJP is its transpose (a
broadcast's is a sum, a slice's a pad, a pad's a slice, ...), as JAX's transpose rules write.

>>> sorted(DATA_VJP_RULES)[:3]
['bitcast', 'broadcast', 'concatenate']
"""
from __future__ import annotations

from typing import Sequence

from fusion.autodiff.cotangents import Cotangent, accumulate
from fusion.autodiff.reverse_pass import Rule, VjpContext
from fusion.ir.hlo_module import HloInstruction

Cts = Sequence[Cotangent]


def vjp_bitcast(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    # A bitcast reinterprets the buffer: its transpose is the bitcast back, read from a
    # cotangent laid out as the bitcast's result is.
    b = ctx.b
    out_shape = instr.array_shape
    if b.array_shape(ct).effective_layout != out_shape.effective_layout:
        ct = b.emit("copy", (ct,), shape=out_shape)
    return (b.emit("bitcast", (ct,), shape=ctx.operand_shape(instr, 0)),)


def vjp_broadcast(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    b = ctx.b
    dimensions = tuple(instr.attr("dimensions"))
    out_rank = instr.array_shape.rank
    summed = b.reduce_sum(ct, [d for d in range(out_rank) if d not in dimensions])
    # The kept dims come out in increasing order; operand dim i is result dim dimensions[i].
    order = sorted(range(len(dimensions)), key=lambda i: dimensions[i])
    inverse = [order.index(i) for i in range(len(dimensions))]
    summed = b.transpose(summed, inverse)
    return (b.reshape(summed, ctx.operand_shape(instr, 0).dims),)


def vjp_concatenate(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    b = ctx.b
    (dim,) = instr.attr("dimensions")
    dims = instr.array_shape.dims
    out, offset = [], 0
    for k in range(len(instr.operands)):
        size = ctx.operand_shape(instr, k).dims[dim]
        starts = [offset if d == dim else 0 for d in range(len(dims))]
        limits = [offset + size if d == dim else n for d, n in enumerate(dims)]
        out.append(b.slice(ct, starts, limits))
        offset += size
    return tuple(out)


def _no_gradient(ctx: VjpContext, instr: HloInstruction, ct: Cotangent) -> Cts:
    return (None,) * len(instr.operands)


def vjp_dynamic_slice(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    # dynamic-update-slice clamps its start exactly as dynamic-slice does.
    b = ctx.b
    zeros = b.zeros(ctx.operand_shape(instr, 0).with_layout(None))
    starts = [ctx.operand(instr, k) for k in range(1, len(instr.operands))]
    grad = b.emit("dynamic-update-slice", (zeros, ct, *starts))
    return (grad,) + (None,) * len(starts)


def vjp_dynamic_update_slice(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    b = ctx.b
    update_shape = ctx.operand_shape(instr, 1)
    starts = [ctx.operand(instr, k) for k in range(2, len(instr.operands))]
    zeros = b.zeros(update_shape.with_layout(None))
    grad_operand = b.emit("dynamic-update-slice", (ct, zeros, *starts))
    grad_update = b.emit("dynamic-slice", (ct, *starts),
                         (("dynamic_slice_sizes", update_shape.dims),))
    return (grad_operand, grad_update) + (None,) * len(starts)


def vjp_get_tuple_element(ctx: VjpContext, instr: HloInstruction, ct: Cotangent) -> Cts:
    count = len(ctx.shape(instr.operands[0]).elements)
    index = instr.attr("index")
    return (tuple(ct if k == index else None for k in range(count)),)


def vjp_copy_done(ctx: VjpContext, instr: HloInstruction, ct: Cotangent) -> Cts:
    # The destination (element 0 of the copy-start's tuple) carries the cotangent back.
    return ((ct, None, None),)


def vjp_copy_start(ctx: VjpContext, instr: HloInstruction, ct: Cotangent) -> Cts:
    assert isinstance(ct, tuple)
    return (accumulate(ctx.b, ct[0], ct[1]),)


def vjp_opt_barrier(ctx: VjpContext, instr: HloInstruction, ct: Cotangent) -> Cts:
    # The barrier's value is its operand, so its cotangent is the operand's.  The backward
    # gets no barrier of its own: one only keeps XLA from merging work, never changes a value.
    return (ct,)


def vjp_pad(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    # JAX's _pad_transpose: unpad (negative padding), then keep every (interior+1)-th element;
    # the padding value receives what the operand did not.
    b = ctx.b
    config = instr.attr("padding").dims
    zero = b.scalar(0, b.array_shape(ct).dtype)
    unpadded = b.pad(ct, zero, [(-d.low, -d.high, 0) for d in config])
    dims = b.array_shape(unpadded).dims
    grad = b.slice(unpadded, [0] * len(dims), dims, [d.interior + 1 for d in config])
    grad_value = b.subtract(b.sum_all(ct), b.sum_all(grad))
    return (grad, grad_value)


def vjp_reshape(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    return (ctx.b.reshape(ct, ctx.operand_shape(instr, 0).dims),)


def vjp_reverse(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    return (ctx.b.emit("reverse", (ct,), (("dimensions", tuple(instr.attr("dimensions"))),)),)


def vjp_slice(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    b = ctx.b
    operand = ctx.operand_shape(instr, 0)
    if instr.array_shape.num_elements == 0:
        return (None,)
    config = []
    for d, (s, n) in enumerate(zip(instr.attr("slice"), instr.array_shape.dims)):
        last = s.start + (n - 1) * s.stride
        config.append((s.start, operand.dims[d] - 1 - last, s.stride - 1))
    return (b.pad(ct, b.scalar(0, operand.dtype), config),)


def vjp_transpose(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    permutation = tuple(instr.attr("dimensions"))
    inverse = [permutation.index(d) for d in range(len(permutation))]
    return (ctx.b.transpose(ct, inverse),)


def vjp_tuple(ctx: VjpContext, instr: HloInstruction, ct: Cotangent) -> Cts:
    assert isinstance(ct, tuple)
    return ct


DATA_VJP_RULES: dict[str, Rule] = {
    "bitcast": vjp_bitcast,
    "broadcast": vjp_broadcast,
    "concatenate": vjp_concatenate,
    "constant": _no_gradient,
    "copy-done": vjp_copy_done,
    "copy-start": vjp_copy_start,
    "dynamic-slice": vjp_dynamic_slice,
    "dynamic-update-slice": vjp_dynamic_update_slice,
    "get-tuple-element": vjp_get_tuple_element,
    "iota": _no_gradient,
    "opt-barrier": vjp_opt_barrier,
    "pad": vjp_pad,
    "reshape": vjp_reshape,
    "reverse": vjp_reverse,
    "slice": vjp_slice,
    "transpose": vjp_transpose,
    "tuple": vjp_tuple,
}
