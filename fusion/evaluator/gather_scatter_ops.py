"""``gather`` and ``scatter`` with general dimension numbers (batching dims included).

Gather clamps each slice's start so that the whole slice is in bounds, as XLA does.  Scatter
drops an update window whose start puts any part of it out of bounds, and applies
``to_apply`` sequentially in update order (only the order per target element matters, see
``ordered_updates``).

>>> operand = np.arange(12).reshape(4, 3)
>>> _gather_array(operand, np.array([[3], [9]]), offset_dims=(1,), collapsed=(0,),
...               start_index_map=(0,), index_vector_dim=1, slice_sizes=(1, 3)).tolist()
[[9, 10, 11], [9, 10, 11]]
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from fusion.evaluator.failures import op_error
from fusion.evaluator.ordered_updates import apply_in_order


def _index_rows(indices: np.ndarray, index_vector_dim: int) -> tuple[np.ndarray, list[int]]:
    """Index vectors as rows ``[batch..., K]`` (int64) and the original dim of each batch dim."""
    if index_vector_dim == indices.ndim:
        rows = indices[..., None]
    else:
        rows = np.moveaxis(indices, index_vector_dim, -1)
    batch_source = [d for d in range(rows.ndim) if d != index_vector_dim]
    if rows.dtype == np.uint64:
        # Huge unsigned indices only need to stay huge: they are clamped or dropped anyway.
        # (Narrower unsigned types fit int64 as they are; 2**62 cast to them would be 0.)
        rows = np.minimum(rows, np.uint64(2**62))
    return rows.astype(np.int64), batch_source


def _starts(
    rows: np.ndarray,
    batch_source: list[int],
    rank: int,
    index_map: tuple[int, ...],
    operand_batching: tuple[int, ...],
    indices_batching: tuple[int, ...],
) -> np.ndarray:
    """Per index row, the start of its window in every operand dim: shape ``[rows, rank]``."""
    batch_shape = rows.shape[:-1]
    flat = rows.reshape(math.prod(batch_shape), rows.shape[-1])
    starts = np.zeros((flat.shape[0], rank), np.int64)
    for k, d in enumerate(index_map):
        starts[:, d] = flat[:, k]
    if operand_batching:
        coords = np.unravel_index(np.arange(flat.shape[0]), batch_shape)
        for operand_dim, indices_dim in zip(operand_batching, indices_batching):
            starts[:, operand_dim] = coords[batch_source.index(indices_dim)]
    return starts


def _gather_array(
    operand: np.ndarray,
    indices: np.ndarray,
    *,
    offset_dims: tuple[int, ...],
    collapsed: tuple[int, ...],
    start_index_map: tuple[int, ...],
    index_vector_dim: int,
    slice_sizes: tuple[int, ...],
    operand_batching: tuple[int, ...] = (),
    indices_batching: tuple[int, ...] = (),
) -> np.ndarray:
    rank = operand.ndim
    rows, batch_source = _index_rows(indices, index_vector_dim)
    batch_shape = rows.shape[:-1]
    starts = _starts(rows, batch_source, rank, start_index_map, operand_batching, indices_batching)
    count = starts.shape[0]
    upper = np.array([operand.shape[d] - slice_sizes[d] for d in range(rank)], np.int64)
    starts = np.clip(starts, 0, np.maximum(upper, 0))
    index_arrays = []
    for d in range(rank):
        offsets_shape = [1] * (rank + 1)
        offsets_shape[d + 1] = slice_sizes[d]
        index_arrays.append(
            starts[:, d].reshape([count] + [1] * rank)
            + np.arange(slice_sizes[d]).reshape(offsets_shape)
        )
    sliced = operand[tuple(index_arrays)] if rank else np.broadcast_to(operand, (count,))
    kept = [d for d in range(rank) if d not in collapsed and d not in operand_batching]
    sliced = sliced.reshape(list(batch_shape) + [slice_sizes[d] for d in kept])
    permutation = []
    next_batch = 0
    for j in range(len(batch_shape) + len(kept)):
        if j in offset_dims:
            permutation.append(len(batch_shape) + sorted(offset_dims).index(j))
        else:
            permutation.append(next_batch)
            next_batch += 1
    return np.transpose(sliced, permutation)


def eval_gather(ev: Any, instr: Any, args: list) -> np.ndarray:
    operand, indices = args
    slice_sizes = tuple(instr.attr("slice_sizes"))
    if len(slice_sizes) != operand.ndim:
        raise op_error(instr, f"slice_sizes has {len(slice_sizes)} dims, operand rank {operand.ndim}")
    if any(s > n for s, n in zip(slice_sizes, operand.shape)):
        raise op_error(instr, f"slice_sizes {list(slice_sizes)} exceed operand dims")
    return _gather_array(
        operand,
        indices,
        offset_dims=tuple(instr.attr("offset_dims", ())),
        collapsed=tuple(instr.attr("collapsed_slice_dims", ())),
        start_index_map=tuple(instr.attr("start_index_map")),
        index_vector_dim=instr.attr("index_vector_dim"),
        slice_sizes=slice_sizes,
        operand_batching=tuple(instr.attr("operand_batching_dims", ())),
        indices_batching=tuple(instr.attr("start_indices_batching_dims", ())),
    )


def eval_scatter(ev: Any, instr: Any, args: list) -> Any:
    if len(args) % 2 == 0:
        raise op_error(instr, f"{len(args)} operands: expected N operands, indices, N updates")
    count = (len(args) - 1) // 2
    operands, indices, updates = args[:count], args[count], args[count + 1 :]
    rank = operands[0].ndim
    window_dims = tuple(instr.attr("update_window_dims", ()))
    inserted = tuple(instr.attr("inserted_window_dims", ()))
    operand_batching = tuple(instr.attr("input_batching_dims", ()))
    rows, batch_source = _index_rows(indices, instr.attr("index_vector_dim"))
    starts = _starts(
        rows, batch_source, rank, tuple(instr.attr("scatter_dims_to_operand_dims")),
        operand_batching, tuple(instr.attr("scatter_indices_batching_dims", ())),
    )
    scatter_dims = [d for d in range(updates[0].ndim) if d not in window_dims]
    arranged = [np.transpose(u, scatter_dims + list(window_dims)) for u in updates]
    window_shape = arranged[0].shape[len(scatter_dims) :]
    window_operand_dims = [d for d in range(rank) if d not in inserted and d not in operand_batching]
    if len(window_operand_dims) != len(window_shape):
        raise op_error(instr, "update_window_dims do not match the operand's window dims")
    window_size = [1] * rank
    for i, d in enumerate(window_operand_dims):
        window_size[d] = window_shape[i]
    shape = np.array(operands[0].shape, np.int64)
    in_bounds = np.all((starts >= 0) & (starts <= shape - np.array(window_size)), axis=1)
    window_count = math.prod(window_shape)
    # An explicit count: with no window dims (one element per index row) -1 is ambiguous.
    offsets = np.indices(window_shape).reshape(len(window_shape), window_count)
    coords = [starts[:, d][:, None] for d in range(rank)]
    for i, d in enumerate(window_operand_dims):
        coords[d] = coords[d] + offsets[i][None, :]
    coords = [np.broadcast_to(c, (starts.shape[0], window_count)) for c in coords]
    mask = np.broadcast_to(in_bounds[:, None], (starts.shape[0], window_count))
    safe = [np.where(mask, c, 0) for c in coords]
    targets = np.ravel_multi_index(safe, operands[0].shape) if rank else np.zeros(mask.shape, np.int64)
    outs = [np.array(o, copy=True).reshape(-1) for o in operands]
    values = [u.reshape(starts.shape[0], window_count)[mask] for u in arranged]
    name = instr.attr("to_apply")
    combine = lambda arrays: ev.call_scalar(name, arrays, caller=instr)  # noqa: E731
    apply_in_order(combine, outs, targets[mask], values)
    results = [o.reshape(operands[0].shape) for o in outs]
    return results[0] if count == 1 else tuple(results)


GATHER_SCATTER_RULES: dict[str, Callable[..., Any]] = {
    "gather": eval_gather,
    "scatter": eval_scatter,
}
