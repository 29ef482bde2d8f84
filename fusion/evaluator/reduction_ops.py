"""Reduction rules: ``reduce``, ``reduce-window``, ``select-and-scatter``.

XLA leaves the reduction order unspecified.  We fix one: a pairwise tree over the reduced
elements (adjacent pairs, so each partial result covers a contiguous run and the order of
non-commutative reducers is kept), then ``to_apply(init, total)``.  Every step applies the
``to_apply`` computation itself (vectorized over all partial results at once), so each
intermediate is rounded to the declared type exactly as the computation says: a bf16 sum is
a tree of bf16 additions, an f32 sum a tree of f32 additions.  No fast path can disagree,
because there is none; the tree makes the cost log2(n) computation calls.

8-bit float reductions instead combine in XLA:CPU's own order
(``fusion.analysis.xla_reduction_order``: sequential folds from the init value, windows of 32
for long reduces), since an fp8 sum changes with the order in most results.  A scan (a
cumulative sum's reduce-window) of any type folds as XLA:CPU does (``xla_order_scan``): each
window in order from the init value, and past 16 elements in a tree of 16-wide scans.  So it
has XLA's bits, and costs time and memory linear in its length, where the windows of a row
of ``n`` would stack ``n^2`` elements (a 64 x 32,000 cumsum: 65G).

>>> fold = lambda arrays: (arrays[0] + arrays[1],)
>>> [int(v) for v in tree_fold(fold, [np.array(0)], [np.arange(5)])]
[10]
"""
from __future__ import annotations

import itertools
from typing import Any, Callable, Sequence

import numpy as np

from fusion.evaluator.data_movement_ops import pad_array
from fusion.evaluator.failures import op_error
from fusion.evaluator.ordered_updates import apply_in_order
from fusion.analysis.reduction_kind import kept_and_reduced
from fusion.analysis.xla_reduction_order import SCAN_BASE, WINDOW, Scan, folds_in_xla_order, \
    scan_window, window_levels

Combine = Callable[[list[np.ndarray]], Sequence[np.ndarray]]


def tree_fold(combine: Combine, inits: list[np.ndarray], arrays: list[np.ndarray]) -> list:
    """Reduce the last axis of ``arrays`` pairwise with ``combine``, then fold in ``inits``."""
    length = arrays[0].shape[-1]
    while length > 1:
        half = length // 2
        lhs = [a[..., 0 : 2 * half : 2] for a in arrays]
        rhs = [a[..., 1 : 2 * half : 2] for a in arrays]
        combined = list(combine(lhs + rhs))
        if length % 2:
            combined = [np.concatenate([c, a[..., -1:]], axis=-1) for c, a in zip(combined, arrays)]
        arrays = combined
        length = (length + 1) // 2
    batch = arrays[0].shape[:-1]
    if length == 0:
        return [np.broadcast_to(i, batch) for i in inits]
    return [np.broadcast_to(r, batch) for r in combine(inits + [a[..., 0] for a in arrays])]


def sequential_fold(combine: Combine, inits: list[np.ndarray], arrays: list[np.ndarray]) -> list:
    """Fold the last axis of ``arrays`` into ``inits`` one element at a time, in order.

    >>> fold = lambda arrays: (arrays[0] * 2 + arrays[1],)
    >>> [int(v) for v in sequential_fold(fold, [np.array(1)], [np.arange(3)])]
    [12]
    """
    batch = arrays[0].shape[:-1]
    values = [np.broadcast_to(i, batch) for i in inits]
    for j in range(arrays[0].shape[-1]):
        values = [np.broadcast_to(v, batch) for v in combine(values + [a[..., j] for a in arrays])]
    return values


def xla_order_fold(combine: Combine, init: np.ndarray, x: np.ndarray, kept_rank: int) -> np.ndarray:
    """Reduce the dims of ``x`` after its first ``kept_rank`` as XLA:CPU orders the combines:
    windows of 32 on every reduced dim while one is longer, then one sequential fold."""
    levels, _ = window_levels(x.shape[kept_rank:])
    kept = list(x.shape[:kept_rank])
    for level in levels:
        outs = level.out_sizes
        config = [(0, 0, 0)] * kept_rank + [(lo, o * WINDOW - n - lo, 0) for lo, o, n in
                                            zip(level.pad_low, outs, level.sizes)]
        padded = pad_array(x, init, config).reshape(kept + [v for o in outs for v in (o, WINDOW)])
        r = len(outs)
        order = list(range(kept_rank)) + [kept_rank + 2 * i for i in range(r)] + \
            [kept_rank + 2 * i + 1 for i in range(r)]
        windows = padded.transpose(order).reshape(kept + list(outs) + [WINDOW ** r])
        (x,) = sequential_fold(combine, [init], [windows])
    (result,) = sequential_fold(combine, [init], [x.reshape(kept + [-1])])
    return result


def _sliding_fold(combine: Combine, init: np.ndarray, x: np.ndarray, size: int, low: int,
                  high: int) -> np.ndarray:
    """A stride-1 reduce-window of ``size`` over the last axis of ``x`` padded with ``init``
    (``low``, ``high``): each window folded sequentially from init, padding included."""
    config = [(0, 0, 0)] * (x.ndim - 1) + [(low, high, 0)]
    padded = pad_array(x, init, config)
    count = padded.shape[-1] - size + 1
    windows = np.stack([padded[..., k:k + count] for k in range(size)], axis=-1)
    (result,) = sequential_fold(combine, [init], [windows])
    return result


def xla_order_scan(combine: Combine, init: np.ndarray, x: np.ndarray, reverse: bool,
                   exclusive: bool) -> np.ndarray:
    """Scan the last axis of ``x`` as XLA:CPU's ``ReduceWindowRewriter`` orders the combines:
    one window per element up to ``SCAN_BASE`` elements, else columns of ``SCAN_BASE``
    scanned alone, their totals scanned exclusively (the same way), then
    ``combine(column_scan, prefix)``.

    >>> add = lambda arrays: (arrays[0] + arrays[1],)
    >>> [int(v) for v in xla_order_scan(add, np.array(0), np.arange(20), False, False)][-3:]
    [153, 171, 190]
    """
    n = x.shape[-1]
    if n <= SCAN_BASE:
        pad = n if exclusive else n - 1
        return _sliding_fold(combine, init, x, n, 0 if reverse else pad, pad if reverse else 0)
    columns = -(-n // SCAN_BASE)
    padded = pad_array(x, init, [(0, 0, 0)] * (x.ndim - 1) + [(0, columns * SCAN_BASE - n, 0)])
    tiles = padded.reshape(x.shape[:-1] + (columns, SCAN_BASE))
    edge = SCAN_BASE - 1
    scanned = _sliding_fold(combine, init, tiles, SCAN_BASE, 0 if reverse else edge,
                            edge if reverse else 0)
    totals = scanned[..., 0] if reverse else scanned[..., -1]
    prefix = xla_order_scan(combine, init, totals, reverse, exclusive=True)
    prefix = prefix[..., 1:] if reverse else prefix[..., :-1]
    (combined,) = combine([scanned, np.broadcast_to(prefix[..., None], scanned.shape)])
    result = np.broadcast_to(combined, scanned.shape).reshape(x.shape[:-1] + (-1,))[..., :n]
    if exclusive:  # the inclusive scan, shifted by one init value
        result = pad_array(result, init, [(0, 0, 0)] * (x.ndim - 1) +
                           [(0, 1, 0) if reverse else (1, 0, 0)])
    return result


def _ordered_scan(instr: Any, inputs: list) -> Scan | None:
    """The scan ``instr`` is (one input), which XLA:CPU folds in its order, else None."""
    if len(inputs) != 1 or not inputs[0].size:
        return None
    return scan_window(instr.attr("window").dims, inputs[0].shape)


def _combiner(ev: Any, instr: Any, key: str = "to_apply") -> Combine:
    name = instr.attr(key)
    return lambda arrays: ev.call_scalar(name, arrays, caller=instr)


def _split_operands(instr: Any, args: list) -> tuple[list, list]:
    if len(args) % 2:
        raise op_error(instr, f"{len(args)} operands: expected inputs then as many init values")
    count = len(args) // 2
    return list(args[:count]), list(args[count:])


def _result(values: list) -> Any:
    return values[0] if len(values) == 1 else tuple(values)


def eval_reduce(ev: Any, instr: Any, args: list) -> Any:
    inputs, inits = _split_operands(instr, args)
    rank = inputs[0].ndim
    kept, reduced = kept_and_reduced(rank, instr.attr("dimensions"))
    if any(not 0 <= d < rank for d in reduced):
        raise op_error(instr, f"dimensions={list(reduced)} out of range for rank {rank}")
    kept_dims = [inputs[0].shape[d] for d in kept]
    if len(inputs) == 1 and folds_in_xla_order(instr.shape.element_type) and inputs[0].size:
        x = np.transpose(inputs[0], kept + reduced)
        return xla_order_fold(_combiner(ev, instr), inits[0], x, len(kept))
    arranged = [np.transpose(x, kept + reduced).reshape(kept_dims + [-1]) if x.size else
                np.zeros(kept_dims + [int(np.prod([x.shape[d] for d in reduced]))], x.dtype)
                for x in inputs]
    return _result(tree_fold(_combiner(ev, instr), inits, arranged))


def _window_dims(instr: Any, rank: int) -> list:
    window = instr.attr("window")
    if len(window.dims) != rank:
        raise op_error(instr, f"window has {len(window.dims)} dims, operand rank {rank}")
    return list(window.dims)


def _window_output_dims(instr: Any, padded: tuple[int, ...], dims: list) -> list[int]:
    out = []
    for size, d in zip(padded, dims):
        extent = (d.size - 1) * d.window_dilation + 1
        out.append((size - extent) // d.stride + 1 if size >= extent else 0)
    return out


def eval_reduce_window(ev: Any, instr: Any, args: list) -> Any:
    inputs, inits = _split_operands(instr, args)
    dims = _window_dims(instr, inputs[0].ndim)
    scan = _ordered_scan(instr, inputs)
    if scan is not None:
        x = np.moveaxis(inputs[0], scan.dim, -1)
        result = xla_order_scan(_combiner(ev, instr), inits[0], x, scan.reverse, scan.exclusive)
        return np.moveaxis(result, -1, scan.dim)
    config = [(d.padding_low, d.padding_high, d.base_dilation - 1) for d in dims]
    padded = [pad_array(x, init, config) for x, init in zip(inputs, inits)]
    out_dims = _window_output_dims(instr, padded[0].shape, dims)
    stacked = []
    for x in padded:
        views = []
        for offset in itertools.product(*(range(d.size) for d in dims)):
            index = tuple(
                slice(k * d.window_dilation, k * d.window_dilation + (n - 1) * d.stride + 1, d.stride)
                if n else slice(0, 0)
                for k, d, n in zip(offset, dims, out_dims)
            )
            views.append(x[index])
        stacked.append(np.stack(views, axis=-1) if views else np.zeros(out_dims + [0], x.dtype))
    in_order = len(inputs) == 1 and folds_in_xla_order(instr.shape.element_type)
    return _result((sequential_fold if in_order else tree_fold)(_combiner(ev, instr), inits, stacked))


def eval_select_and_scatter(ev: Any, instr: Any, args: list) -> np.ndarray:
    operand, source, init = args
    dims = _window_dims(instr, operand.ndim)
    select = _combiner(ev, instr, "select")
    source_positions = np.indices(source.shape).reshape(source.ndim, -1)
    count = source_positions.shape[1]
    chosen = np.zeros(count, np.int64)
    chosen_value = np.zeros(count, operand.dtype)
    have = np.zeros(count, bool)
    flat_operand = operand.reshape(-1)
    for offset in itertools.product(*(range(d.size) for d in dims)):
        coords = [
            source_positions[i] * d.stride + k * d.window_dilation - d.padding_low
            for i, (k, d) in enumerate(zip(offset, dims))
        ]
        valid = np.ones(count, bool)
        for c, n in zip(coords, operand.shape):
            valid &= (c >= 0) & (c < n)
        flat = np.ravel_multi_index([np.clip(c, 0, max(n - 1, 0)) for c, n in
                                     zip(coords, operand.shape)], operand.shape) if count and operand.size else np.zeros(count, np.int64)
        value = flat_operand[flat] if operand.size else chosen_value
        take = valid & ~have
        if np.any(have & valid):
            keep = np.asarray(select([chosen_value, value])[0], bool)
            take |= valid & have & ~keep
        chosen = np.where(take, flat, chosen)
        chosen_value = np.where(take, value, chosen_value)
        have |= valid
    out = np.full(operand.size, np.asarray(init).reshape(()), operand.dtype)
    scatter = _combiner(ev, instr, "scatter")
    apply_in_order(scatter, [out], chosen[have], [source.reshape(-1)[have]])
    return out.reshape(operand.shape)


REDUCTION_RULES: dict[str, Callable[..., Any]] = {
    "reduce": eval_reduce,
    "reduce-window": eval_reduce_window,
    "select-and-scatter": eval_select_and_scatter,
}
