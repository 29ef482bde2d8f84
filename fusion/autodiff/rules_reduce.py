"""VJP rules of ``reduce`` and ``reduce-window``; the reducer is recognised by behaviour
(``combiner_kind``): add, multiply, maximum or minimum.

* reduce-add: the cotangent broadcast back; maximum/minimum: shared evenly among the
  elements equal to the result (JAX's ``_reduce_chooser_jvp_rule``); multiply: the product
  of the other elements, as exclusive prefix and suffix products, so zeros need no division.
* reduce-window add: JAX's transpose (a padded, dilated cotangent summed over the same
  window); maximum/minimum: for each position in the window, a strided slice of the padded
  operand, the cotangent going to the first position equal to the result, as XLA's
  ``select-and-scatter`` with ``GE`` does (which the Triton path has no kernel for);
  multiply (a cumulative product): the product of the window's other elements, from the
  window's product of non-zero elements and its count of zeros.
* select-and-scatter with an add (a max pool's gradient): linear in its source, whose
  cotangent is gathered from each window's selected position (a second derivative).

>>> sorted(REDUCE_VJP_RULES)
['reduce', 'reduce-window', 'select-and-scatter']
"""
from __future__ import annotations

import math
from itertools import product
from typing import Sequence

from fusion.ir.attributes import Window, WindowDim
from fusion.autodiff.combiner_kind import CombinerKind, combiner_kind
from fusion.autodiff.cotangents import Cotangent
from fusion.autodiff.graph_builder import GraphBuilder
from fusion.autodiff.reverse_pass import Rule, VjpContext
from fusion.errors import UnsupportedOpError
from fusion.ir.hlo_module import HloInstruction
from fusion.analysis.reduction_kind import kept_and_reduced

Cts = Sequence[Cotangent]

# A max/min window is differentiated position by position; beyond this many positions the
# backward graph would be too large.
MAX_WINDOW_POSITIONS = 256


def _unsupported(instr: HloInstruction, message: str) -> UnsupportedOpError:
    return UnsupportedOpError(f"no VJP for {instr.opcode} %{instr.name}: {message}",
                              **instr._located())


def _kind(ctx: VjpContext, instr: HloInstruction) -> CombinerKind:
    kind = combiner_kind(ctx.module, instr.attr("to_apply"))
    if kind not in (CombinerKind.ADD, CombinerKind.MUL, CombinerKind.MAX, CombinerKind.MIN):
        raise _unsupported(instr, f"its to_apply {instr.attr('to_apply')} is not recognised as "
                           "add, multiply, maximum or minimum")
    return kind


def _product_of_others(b: GraphBuilder, x: str, kept: tuple[int, ...],
                       reduced: tuple[int, ...]) -> str:
    """For each element of ``x``, the product of the other elements of its reduced group."""
    from_dims = b.array_shape(x).dims
    permutation = list(kept) + list(reduced)
    kept_dims = tuple(from_dims[d] for d in kept)
    length = math.prod(from_dims[d] for d in reduced)
    rows = b.reshape(b.transpose(x, permutation), kept_dims + (length,))
    one = b.scalar(1, b.array_shape(x).dtype)
    reducer = b.table.scalar_reducer("multiply", b.array_shape(x).dtype)

    def window(low: int, high: int) -> str:
        dims = [WindowDim(1) for _ in kept_dims] + [WindowDim(length, 1, low, high)]
        return b.emit("reduce-window", (rows, one), (("window", Window(tuple(dims))),
                                                     ("to_apply", reducer)))

    rank = len(kept_dims) + 1
    starts, limits = [0] * rank, list(kept_dims) + [length]
    prefix = b.slice(window(length, 0), starts, limits)
    suffix = b.slice(window(0, length), starts[:-1] + [1], limits[:-1] + [length + 1])
    others = b.reshape(b.multiply(prefix, suffix), tuple(from_dims[d] for d in permutation))
    return b.transpose(others, [permutation.index(d) for d in range(len(from_dims))])


def _reduce_grads(ctx: VjpContext, kind: CombinerKind, instr: HloInstruction, k: int,
                  out: str, ct: str) -> tuple[str, str]:
    """The cotangents of input ``k`` and init ``k`` of a reduce whose result ``k`` is
    ``out`` (cotangent ``ct``), reduced by ``kind``."""
    b = ctx.b
    count = len(instr.operands) // 2
    x, init = ctx.operand(instr, k), ctx.operand(instr, count + k)
    x_shape = ctx.operand_shape(instr, k)
    kept, reduced = kept_and_reduced(x_shape.rank, instr.attr("dimensions"))
    dims = x_shape.dims
    ct_b = b.broadcast(ct, dims, kept)
    if kind is CombinerKind.ADD:
        return ct_b, b.sum_all(ct)
    if kind is CombinerKind.MUL:
        others = _product_of_others(b, x, kept, reduced)
        init_b = b.broadcast(init, dims, ())
        grad_x = b.multiply(ct_b, b.multiply(others, init_b))
        product_x = b.reduce(x, b.scalar(1, x_shape.dtype), reduced, "multiply")
        return grad_x, b.sum_all(b.multiply(ct, product_x))
    # maximum / minimum: shared among the elements equal to the result; the init gets the
    # cotangent where no element is (every element below it).
    hits = b.convert(b.compare(x, b.broadcast(out, dims, kept), "EQ"), x_shape.dtype)
    counts = b.reduce_sum(hits, reduced)
    none = b.compare(counts, b.full_like(0, counts), "EQ")
    safe_counts = b.select(none, b.full_like(1, counts), counts)
    grad_x = b.multiply(b.broadcast(b.divide(ct, safe_counts), dims, kept), hits)
    return grad_x, b.sum_all(b.select(none, ct, b.full_like(0, ct)))


def vjp_reduce(ctx: VjpContext, instr: HloInstruction, ct: Cotangent) -> Cts:
    count = len(instr.operands) // 2
    cts = ct if isinstance(ct, tuple) else (ct,)
    grads: list[Cotangent] = [None] * len(instr.operands)
    for k, c in enumerate(cts):
        if c is None:
            continue
        # A variadic reduce (an argmax's value) is differentiated result by result, each
        # as the function of its own input the reducer computes.
        kind = combiner_kind(ctx.module, instr.attr("to_apply"), k)
        if kind not in (CombinerKind.ADD, CombinerKind.MUL, CombinerKind.MAX, CombinerKind.MIN):
            raise _unsupported(instr, f"its to_apply {instr.attr('to_apply')} is not recognised "
                               f"as add, multiply, maximum or minimum of result {k}")
        out = ctx.out(instr) if count == 1 else ctx.b.get_tuple_element(ctx.out(instr), k)
        grads[k], grads[count + k] = _reduce_grads(ctx, kind, instr, k, out, c)
    return tuple(grads)


def _window_sum_transpose(ctx: VjpContext, instr: HloInstruction, ct: str) -> str:
    """JAX's ``_reduce_window_sum_transpose_rule``."""
    b = ctx.b
    window = instr.attr("window").dims
    in_dims = ctx.operand_shape(instr, 0).dims
    out_dims = instr.array_shape.dims
    config = []
    for d, w in enumerate(window):
        window_extent = (w.size - 1) * w.window_dilation + 1
        out_extent = (out_dims[d] - 1) * w.stride + 1
        before = window_extent - w.padding_low - 1
        after = in_dims[d] + window_extent - 1 - out_extent - before
        config.append((before, after, w.stride - 1))
    zero = b.scalar(0, b.array_shape(ct).dtype)
    padded = b.pad(ct, zero, config)
    summing = Window(tuple(WindowDim(w.size, 1, 0, 0, w.window_dilation) for w in window))
    reducer = b.table.scalar_reducer("add", b.array_shape(ct).dtype)
    return b.emit("reduce-window", (padded, zero), (("window", summing), ("to_apply", reducer)))


def _window_positions(window, out_dims):
    """For each position in the window, in XLA's order: the strided slice of the padded
    operand holding that position of every window (starts, limits, strides)."""
    strides = [w.stride for w in window]
    for offset in product(*(range(w.size) for w in window)):
        starts = [k * w.window_dilation for k, w in zip(offset, window)]
        limits = [s + (n - 1) * w.stride + 1 for s, n, w in zip(starts, out_dims, window)]
        yield starts, limits, strides


def _window_choice_transpose(ctx: VjpContext, instr: HloInstruction, ct: str) -> str:
    """The cotangent of each window to the first element equal to the window's result."""
    b = ctx.b
    window = instr.attr("window").dims
    x, init, out = ctx.operand(instr, 0), ctx.operand(instr, 1), ctx.out(instr)
    x_shape = ctx.operand_shape(instr, 0)
    out_dims = instr.array_shape.dims
    rank = len(out_dims)
    if math.prod(w.size for w in window) > MAX_WINDOW_POSITIONS:
        raise _unsupported(instr, f"a max/min window of more than {MAX_WINDOW_POSITIONS} "
                           "positions")
    padded = b.pad(x, init, [(w.padding_low, w.padding_high, w.base_dilation - 1)
                             for w in window])
    padded_dims = b.array_shape(padded).dims
    zero = b.full_like(0, ct)
    taken = b.full(False, b.array_shape(ct).with_dtype("pred").with_layout(None))
    grad_padded = None
    for starts, limits, strides in _window_positions(window, out_dims):
        candidate = b.slice(padded, starts, limits, strides)
        hit = b.emit("and", (b.compare(candidate, out, "EQ"), b.unary("not", taken)))
        taken = b.emit("or", (taken, hit))
        config = [(s, padded_dims[d] - l, window[d].stride - 1)
                  for d, (s, l) in enumerate(zip(starts, limits))]
        share = b.pad(b.select(hit, ct, zero), b.scalar(0, x_shape.dtype), config)
        grad_padded = share if grad_padded is None else b.add(grad_padded, share)
    assert grad_padded is not None and rank == x_shape.rank
    unpadded = b.pad(grad_padded, b.scalar(0, x_shape.dtype),
                     [(-w.padding_low, -w.padding_high, 0) for w in window])
    return b.slice(unpadded, [0] * rank, x_shape.dims, [w.base_dilation for w in window])


def vjp_reduce_window(ctx: VjpContext, instr: HloInstruction, ct: Cotangent) -> Cts:
    if len(instr.operands) != 2:
        raise _unsupported(instr, "a variadic reduce-window")
    window = instr.attr("window").dims
    if any(w.window_reversal for w in window):
        raise _unsupported(instr, "a reversed window")
    if ctx.is_active(instr.operands[1]):
        raise _unsupported(instr, "its init value depends on a differentiated parameter")
    kind = _kind(ctx, instr)
    if kind is CombinerKind.ADD:
        if any(w.base_dilation != 1 for w in window):
            raise _unsupported(instr, "a summing window with base dilation")
        return (_window_sum_transpose(ctx, instr, ct), None)
    if kind is CombinerKind.MUL:
        if any(w.base_dilation != 1 for w in window):
            raise _unsupported(instr, "a multiplying window with base dilation")
        return (_window_product_transpose(ctx, instr, ct), None)
    return (_window_choice_transpose(ctx, instr, ct), None)


def _window_product_transpose(ctx: VjpContext, instr: HloInstruction, ct: str) -> str:
    """A product window (a cumulative product): each element gets, from each window holding
    it, the cotangent times the product of the window's other elements.  With ``P`` the
    window's product of its non-zero elements and ``Z`` its count of zeros, that is ``P / x``
    for ``x != 0`` in a window without zeros, ``P`` for the window's only zero, and 0
    otherwise: two window sums transposed, no division by zero."""
    b = ctx.b
    x, init = ctx.operand(instr, 0), ctx.operand(instr, 1)
    dtype = b.array_shape(x).dtype
    is_zero = b.compare(x, b.full_like(0, x), "EQ")
    nonzero = b.select(is_zero, b.full_like(1, x), x)
    window = ("window", instr.attr("window"))
    products = b.emit("reduce-window", (nonzero, init), (
        window, ("to_apply", b.table.scalar_reducer("multiply", dtype))))
    zeros = b.emit("reduce-window", (b.convert(is_zero, dtype), b.scalar(0, dtype)), (
        window, ("to_apply", b.table.scalar_reducer("add", dtype))))

    def share(count: int) -> str:
        chosen = b.compare(zeros, b.full_like(count, zeros), "EQ")
        return _window_sum_transpose(ctx, instr, b.multiply(
            ct, b.select(chosen, products, b.full_like(0, products))))

    return b.select(is_zero, share(1), b.divide(share(0), nonzero))


def vjp_select_and_scatter(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    """A summing select-and-scatter (a max pool's gradient) is linear in its source: each
    source element's cotangent is the output's at the position its window selected, found
    by running the selection window position by window position as the op does (padding
    never selected); the operand only chooses (no gradient), the init gets the sum."""
    b = ctx.b
    if combiner_kind(ctx.module, instr.attr("scatter")) is not CombinerKind.ADD:
        raise _unsupported(instr, f"its scatter {instr.attr('scatter')} is not an add")
    window = instr.attr("window").dims
    if math.prod(w.size for w in window) > MAX_WINDOW_POSITIONS:
        raise _unsupported(instr, f"a window of more than {MAX_WINDOW_POSITIONS} positions")
    operand, init = ctx.operand(instr, 0), ctx.operand(instr, 2)
    source = ctx.operand_shape(instr, 1).with_layout(None)
    config = [(w.padding_low, w.padding_high, 0) for w in window]
    padded = b.pad(operand, init, config)
    padded_ct = b.pad(ct, b.scalar(0, source.dtype), config)
    inside = b.pad(b.full(True, b.array_shape(operand).with_dtype("pred").with_layout(None)),
                   b.scalar(False, "pred"), config)
    have = b.full(False, source.with_dtype("pred"))
    chosen, picked = b.zeros(source), b.zeros(source)
    for starts, limits, strides in _window_positions(window, source.dims):
        value, valid, value_ct = (b.slice(v, starts, limits, strides)
                                  for v in (padded, inside, padded_ct))
        keep = b.emit("map", (chosen, value), (("dimensions", tuple(range(source.rank))),
                                                ("to_apply", instr.attr("select"))))
        take = b.emit("and", (valid, b.emit("or", (b.unary("not", have), b.unary("not", keep)))))
        chosen, picked = b.select(take, value, chosen), b.select(take, value_ct, picked)
        have = b.emit("or", (have, valid))
    grad_source = b.select(have, picked, b.zeros(source))
    grad_init = b.sum_all(ct) if ctx.is_active(instr.operands[2]) else None
    return (None, grad_source, grad_init)


REDUCE_VJP_RULES: dict[str, Rule] = {
    "reduce": vjp_reduce,
    "reduce-window": vjp_reduce_window,
    "select-and-scatter": vjp_select_and_scatter,
}
