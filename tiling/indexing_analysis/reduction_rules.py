"""Indexing of reduce (variadic: N inputs then N inits) and reduce-window.

Every output of a variadic reduce reads every input through the same map (the reducer
combines them), and every init through ``(d..) -> ()``.  Reduce-window is the composition
of a window map without padding (``d * stride + s * window_dilation``) with the pad map of
its padding and base dilation (the seed's ReduceWindow section).

>>> from fusion.ir.hlo_module import HloInstruction
>>> from fusion.ir.shape import ArrayShape
>>> from tiling.indexing_analysis.operands import Operand
>>> r = HloInstruction("r", "reduce", ArrayShape("f32", (4, 8)), ("x", "i"),
...                    (("dimensions", (0, 3)),))
>>> ops = (Operand(ArrayShape("f32", (2, 4, 8, 16))), Operand(ArrayShape("f32", ())))
>>> print(o2i_reduce(r, ops, 0)[0])
(d0, d1)[s0, s1] -> (s0, d0, d1, s1), domain: d0 in [0, 3], d1 in [0, 7], s0 in [0, 1], s1 in [0, 15]
"""
from __future__ import annotations

from typing import Sequence

from fusion.analysis.reduction_kind import kept_and_reduced
from tiling.maps.affine_expr import d, s
from tiling.indexing_analysis.operands import (
    Operand,
    array_dims,
    broadcast_scalar_map,
    num_outputs,
    scalar_map,
    undefined_maps,
)
from tiling.maps.indexing_map import IndexingMap, compose
from tiling.maps.interval import Interval


# --- reduce ---------------------------------------------------------------------------------
def o2i_reduce(instr, operands: Sequence[Operand], output_index: int):
    out = array_dims(instr.shape, output_index)
    n_inputs = len(operands) // 2
    in_dims = operands[0].dims
    kept, _ = kept_and_reduced(len(in_dims), instr.attr("dimensions"))
    # Range variables follow the operand's dim order, not the order ``dimensions`` lists.
    ranges = [k for k in range(len(in_dims)) if k not in kept]
    results = [d(kept.index(k)) if k in kept else s(ranges.index(k)) for k in range(len(in_dims))]
    range_sizes = [in_dims[k] for k in ranges]
    input_map = IndexingMap.from_sizes(tuple(results), out, range_sizes)
    return (input_map,) * n_inputs + (scalar_map(out),) * n_inputs


def i2o_reduce(instr, operands: Sequence[Operand], operand_index: int):
    n_inputs = len(operands) // 2
    count = num_outputs(instr.shape)
    out = array_dims(instr.shape, 0)
    if operand_index >= n_inputs:
        return (broadcast_scalar_map(out),) * count
    in_dims = operands[operand_index].dims
    kept, _ = kept_and_reduced(len(in_dims), instr.attr("dimensions"))
    results = tuple(d(k) for k in kept)
    return (IndexingMap.from_sizes(results, in_dims),) * count


# --- reduce-window --------------------------------------------------------------------------
def _pad_map(padded_dims, lows, highs, interiors) -> IndexingMap:
    """Output -> input of a pad producing ``padded_dims`` (XLA's
    ComputeOutputToInputPadOpIndexingImpl)."""
    results, bounds, constraints = [], [], {}
    for i, (n, low, high, interior) in enumerate(zip(padded_dims, lows, highs, interiors)):
        bounds.append(Interval(max(0, low), min(n - 1, n - 1 - high)))
        if interior == 0:
            results.append(d(i) - low)
        else:
            results.append((d(i) - low) // (interior + 1))
            constraints[(d(i) - low) % (interior + 1)] = Interval(0, 0)
    return IndexingMap.create(tuple(results), bounds, constraints=constraints)


def o2i_reduce_window(instr, operands: Sequence[Operand], output_index: int):
    out = array_dims(instr.shape, output_index)
    n_inputs = len(operands) // 2
    window = instr.attr("window", None)
    in_dims = operands[0].dims
    if window is None or len(window.dims) != len(in_dims):
        return undefined_maps(len(operands))
    results, range_sizes = [], []
    padded, lows, highs, interiors, needs_pad = [], [], [], [], False
    for i, (n, w) in enumerate(zip(in_dims, window.dims)):
        if w.window_reversal:
            return undefined_maps(len(operands))
        e = d(i) * w.stride
        if w.size > 1:  # a size-1 window adds no range variable (XLA removes it as unused)
            e = e + s(len(range_sizes)) * w.window_dilation
            range_sizes.append(w.size)
        results.append(e)
        padded.append(n + w.padding_low + w.padding_high + (n - 1) * (w.base_dilation - 1))
        lows.append(w.padding_low)
        highs.append(w.padding_high)
        interiors.append(w.base_dilation - 1)
        needs_pad |= bool(w.padding_low or w.padding_high or w.base_dilation != 1)
    window_map = IndexingMap.from_sizes(tuple(results), out, range_sizes)
    if needs_pad:
        input_map = compose(_pad_map(padded, lows, highs, interiors), window_map)
        input_map = input_map.remove_unused_symbols()
    else:
        input_map = window_map
    return (input_map,) * n_inputs + (scalar_map(out),) * n_inputs
