"""Indexing of convolution (XLA's ``ComputeOutputToInputConvolutionOpIndexing``).

Output -> lhs: the output batch dim reads the lhs batch (plus ``group * output batch`` over a
range variable per batch group); each output spatial dim ``o`` reads, per window tap ``s``,
``(o * stride + s * rhs_dilate - pad_low) floordiv lhs_dilate``, constrained to land on an
input element (``mod lhs_dilate`` zero and inside the input: the rest is padding); the lhs
feature is a range variable over one group's input features, offset by the output feature's
group.  Output -> rhs: the kernel's spatial dims are the window taps, its input feature the
same range variable and its output feature the output feature.  Symbols are ordered as
XLA's: window taps, the input feature, then the batch group.  Operand -> output indexing is
undefined, as in XLA.

>>> from fusion.ir.attributes import Window, WindowDim
>>> from fusion.ir.hlo_module import HloInstruction
>>> from fusion.ir.shape import ArrayShape
>>> from tiling.indexing_analysis.operands import Operand
>>> conv = HloInstruction("c", "convolution", ArrayShape("f32", (1, 6, 8)), ("x", "w"), (
...     ("window", Window((WindowDim(3, 2, 1, 1),))), ("dim_labels", "b0f_0io->b0f")))
>>> ops = (Operand(ArrayShape("f32", (1, 12, 4))), Operand(ArrayShape("f32", (3, 4, 8))))
>>> lhs, rhs = o2i_convolution(conv, ops, 0)
>>> print(lhs)
(d0, d1, d2)[s0, s1] -> (d0, d1 * 2 + s0 - 1, s1), domain: d0 in [0, 0], d1 in [0, 5], d2 in [0, 7], s0 in [0, 2], s1 in [0, 3], d1 * 2 + s0 in [1, 12]
>>> print(rhs)
(d0, d1, d2)[s0, s1] -> (s0, s1, d2), domain: d0 in [0, 0], d1 in [0, 5], d2 in [0, 7], s0 in [0, 2], s1 in [0, 3]
"""
from __future__ import annotations

from typing import Sequence

from fusion.ir.convolution import conv_dims
from fusion.errors import FusionCompilerError
from tiling.maps.affine_expr import AffineExpr, d, s
from tiling.indexing_analysis.operands import Operand, array_dims, undefined_maps
from tiling.maps.indexing_map import IndexingMap
from tiling.maps.interval import Interval


def o2i_convolution(instr, operands: Sequence[Operand], output_index: int):
    try:
        conv = conv_dims(instr)
    except FusionCompilerError:
        return undefined_maps(len(operands))
    dn, window = conv.dims, conv.window
    out = array_dims(instr.shape)
    lhs_dims, rhs_dims = operands[0].dims, operands[1].dims
    rank = len(out)
    if len(lhs_dims) != rank or len(rhs_dims) != rank:
        return undefined_maps(len(operands))
    lhs: list[AffineExpr] = [None] * rank  # type: ignore[list-item]
    constraints: dict[AffineExpr, Interval] = {}
    for i, w in enumerate(window.dims):
        n = lhs_dims[dn.lhs_spatial[i]]
        padded = d(dn.out_spatial[i]) * w.stride + s(i) * w.window_dilation
        dilated = padded - w.padding_low
        if w.base_dilation == 1:
            lhs[dn.lhs_spatial[i]] = dilated
        else:
            lhs[dn.lhs_spatial[i]] = dilated // w.base_dilation
            constraints[dilated % w.base_dilation] = Interval(0, 0)
        # The padded position must fall on the (dilated) input, not on its padding.
        constraints[padded] = Interval(w.padding_low,
                                       w.padding_low + (n - 1) * w.base_dilation)
    taps = [w.size for w in window.dims]
    group_in = rhs_dims[dn.rhs_input]
    feature = s(len(taps))
    if conv.feature_group_count > 1:
        per_group = out[dn.out_feature] // conv.feature_group_count
        feature = (d(dn.out_feature) // per_group) * group_in + feature
    lhs[dn.lhs_feature] = feature
    lhs_ranges = [(0, t - 1) for t in taps] + [(0, group_in - 1)]
    if conv.batch_group_count > 1:
        lhs[dn.lhs_batch] = s(len(lhs_ranges)) * out[dn.out_batch] + d(dn.out_batch)
        lhs_ranges.append((0, conv.batch_group_count - 1))
    else:
        lhs[dn.lhs_batch] = d(dn.out_batch)
    dim_bounds = [(0, n - 1) for n in out]
    lhs_map = IndexingMap.create(tuple(lhs), dim_bounds, lhs_ranges, constraints=constraints)
    rhs: list[AffineExpr] = [None] * rank  # type: ignore[list-item]
    for i in range(len(taps)):
        rhs[dn.rhs_spatial[i]] = s(i)
    rhs[dn.rhs_input] = s(len(taps))
    rhs[dn.rhs_output] = d(dn.out_feature)
    rhs_map = IndexingMap.create(tuple(rhs), dim_bounds, [(0, t - 1) for t in taps]
                                 + [(0, group_in - 1)])
    return (lhs_map.simplify().remove_unused_symbols(),
            rhs_map.simplify().remove_unused_symbols())
