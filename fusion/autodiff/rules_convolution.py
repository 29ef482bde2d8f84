"""The VJP of ``convolution``: JAX's ``_conv_general_dilated_transpose_lhs``/``_rhs``.  Each
gradient is a convolution again, with the roles of the dims swapped
(``fusion.analysis.conv_gradients``): the input's gradient convolves the cotangent with the
spatially reversed kernel (strides become base dilation), the kernel's convolves the input
with the cotangent (feature groups become batch groups).
"""
from __future__ import annotations

from typing import Sequence

from fusion.analysis.conv_gradients import (filter_gradient, groups_into_input_features,
                                            input_gradient)
from fusion.ir.attributes import Window, WindowDim
from fusion.autodiff.cotangents import Cotangent
from fusion.autodiff.graph_builder import GraphBuilder
from fusion.autodiff.reverse_pass import Rule, VjpContext
from fusion.ir.convolution import ConvDimensionNumbers, conv_dims
from fusion.errors import UnsupportedOpError
from fusion.ir.hlo_module import HloInstruction

Cts = Sequence[Cotangent]


def _convolve(b: GraphBuilder, lhs: str, rhs: str, dims: ConvDimensionNumbers,
              window: list[WindowDim], out_dtype: str, feature_groups: int = 1,
              batch_groups: int = 1) -> str:
    attributes: list = [("window", Window(tuple(window))), ("dim_labels", str(dims))]
    if feature_groups > 1:
        attributes.append(("feature_group_count", feature_groups))
    if batch_groups > 1:
        attributes.append(("batch_group_count", batch_groups))
    result = b.emit("convolution", (lhs, rhs), attributes)
    return b.convert(result, out_dtype)


def _groups_into_input_features(b: GraphBuilder, kernel: str, d: ConvDimensionNumbers,
                                groups: int) -> str:
    """The grouped kernel as the input gradient's convolution takes it
    (``conv_gradients.groups_into_input_features``)."""
    split, order, merged = groups_into_input_features(b.array_shape(kernel).dims, d, groups)
    return b.reshape(b.transpose(b.reshape(kernel, split), list(order)), merged)


def vjp_convolution(ctx: VjpContext, instr: HloInstruction, ct: str) -> Cts:
    b = ctx.b
    conv = conv_dims(instr)
    d, window = conv.dims, conv.window.dims
    if any(w.window_reversal for w in window):
        raise UnsupportedOpError(f"no VJP for convolution %{instr.name} with a reversed window",
                                 **instr._located())
    lhs, rhs = ctx.operand(instr, 0), ctx.operand(instr, 1)
    lhs_shape, rhs_shape = ctx.operand_shape(instr, 0), ctx.operand_shape(instr, 1)
    out_dims = instr.array_shape.dims
    fgc, bgc = conv.feature_group_count, conv.batch_group_count
    grad_lhs = grad_rhs = None
    if ctx.is_active(instr.operands[0]):
        if bgc > 1:
            raise UnsupportedOpError(f"no VJP for the input of convolution %{instr.name} with "
                                     "batch_group_count > 1", **instr._located())
        kernel = rhs if fgc == 1 else _groups_into_input_features(b, rhs, d, fgc)
        kernel = b.emit("reverse", (kernel,), (("dimensions", tuple(d.rhs_spatial)),))
        dims, transposed = input_gradient(d, window, lhs_shape.dims, out_dims)
        grad_lhs = _convolve(b, b.convert(ct, rhs_shape.dtype), kernel, dims, list(transposed),
                             lhs_shape.dtype, feature_groups=fgc)
    if ctx.is_active(instr.operands[1]):
        dims, transposed = filter_gradient(d, window, lhs_shape.dims, out_dims)
        grad_rhs = _convolve(b, lhs, b.convert(ct, lhs_shape.dtype), dims, list(transposed),
                             rhs_shape.dtype, feature_groups=bgc, batch_groups=fgc)
    return (grad_lhs, grad_rhs)


CONVOLUTION_VJP_RULES: dict[str, Rule] = {
    "convolution": vjp_convolution,
}
