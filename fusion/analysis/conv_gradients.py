"""The convolutions that compute a convolution's gradients (JAX's
``_conv_general_dilated_transpose_lhs``/``_rhs``): the input's gradient convolves the output's
cotangent with the spatially reversed kernel (strides become base dilation), the kernel's
convolves the input with the cotangent.  Shared by ``vjp`` (``autodiff/rules_convolution``)
and the cuDNN backward convolutions of an XLA:GPU dump (``cudnn_conv_calls``), which carry
the forward convolution's window and dim_labels.

>>> from fusion.ir.attributes import WindowDim
>>> spec = ConvDimensionNumbers(0, 3, (1, 2), 2, 3, (0, 1), 0, 3, (1, 2))
>>> str(lhs_transposed(spec)), str(rhs_transposed(spec))
('b01f_01oi->b01f', 'f01b_i01o->01bf')
>>> dims, window = input_gradient(spec, (WindowDim(3, 2, 1, 1, 1, 1, False),) * 2,
...                               (1, 8, 8, 4), (1, 4, 4, 16))
>>> str(dims), window[0].size, window[0].base_dilation, (window[0].padding_low, window[0].padding_high)
('b01f_01oi->b01f', 3, 2, (1, 2))
"""
from __future__ import annotations

from collections.abc import Sequence

from fusion.ir.attributes import WindowDim
from fusion.ir.convolution import ConvDimensionNumbers


def lhs_transposed(d: ConvDimensionNumbers) -> ConvDimensionNumbers:
    """cotangent (as lhs) x reversed kernel (input/output features swapped) -> input."""
    return ConvDimensionNumbers(d.out_batch, d.out_feature, d.out_spatial,
                                d.rhs_output, d.rhs_input, d.rhs_spatial,
                                d.lhs_batch, d.lhs_feature, d.lhs_spatial)


def rhs_transposed(d: ConvDimensionNumbers) -> ConvDimensionNumbers:
    """input (batch and features swapped) x cotangent (as kernel) -> kernel."""
    return ConvDimensionNumbers(d.lhs_feature, d.lhs_batch, d.lhs_spatial,
                                d.out_batch, d.out_feature, d.out_spatial,
                                d.rhs_input, d.rhs_output, d.rhs_spatial)


def _dilated(size: int, dilation: int) -> int:
    return 0 if size == 0 else (size - 1) * dilation + 1


def input_gradient(d: ConvDimensionNumbers, window: Sequence[WindowDim],
                   input_dims: Sequence[int], output_dims: Sequence[int]
                   ) -> tuple[ConvDimensionNumbers, tuple[WindowDim, ...]]:
    """The dimension numbers and window of ``conv(cotangent, reverse(kernel))``, the
    gradient of the forward convolution (``d``, ``window``) of an input of ``input_dims``
    giving ``output_dims``, with respect to its input."""
    transposed = []
    for k, w in enumerate(window):
        in_size = _dilated(input_dims[d.lhs_spatial[k]], w.base_dilation)
        extent = _dilated(w.size, w.window_dilation)
        out_size = _dilated(output_dims[d.out_spatial[k]], w.stride)
        before = extent - w.padding_low - 1
        after = in_size + extent - 1 - out_size - before
        transposed.append(WindowDim(w.size, w.base_dilation, before, after,
                                    w.window_dilation, w.stride))
    return lhs_transposed(d), tuple(transposed)


def filter_gradient(d: ConvDimensionNumbers, window: Sequence[WindowDim],
                    input_dims: Sequence[int], output_dims: Sequence[int]
                    ) -> tuple[ConvDimensionNumbers, tuple[WindowDim, ...]]:
    """The dimension numbers and window of ``conv(input, cotangent)``, the gradient of the
    same forward convolution with respect to its kernel."""
    transposed = []
    for k, w in enumerate(window):
        in_size = _dilated(input_dims[d.lhs_spatial[k]], w.base_dilation)
        extent = _dilated(w.size, w.window_dilation)
        out_size = _dilated(output_dims[d.out_spatial[k]], w.stride)
        high = (out_size - in_size) + (extent - w.padding_low - 1)
        transposed.append(WindowDim(output_dims[d.out_spatial[k]], w.window_dilation,
                                    w.padding_low, high, w.stride, w.base_dilation))
    return rhs_transposed(d), tuple(transposed)


def groups_into_input_features(kernel_dims: Sequence[int], d: ConvDimensionNumbers,
                               groups: int) -> tuple[tuple[int, ...], tuple[int, ...],
                                                     tuple[int, ...]]:
    """JAX's ``_reshape_axis_out_of(o, G)`` then ``_reshape_axis_into(o, i)`` on a grouped
    kernel of ``kernel_dims``: the output features split into ``G`` groups, the group moved
    (major) into the input features, for the input gradient's convolution.  Returns the
    split dims, the transpose order of the split array and the merged dims.

    >>> d = ConvDimensionNumbers(0, 3, (1, 2), 2, 3, (0, 1), 0, 3, (1, 2))
    >>> groups_into_input_features((3, 3, 2, 8), d, 2)
    ((3, 3, 2, 2, 4), (0, 1, 3, 2, 4), (3, 3, 4, 4))
    """
    dims = list(kernel_dims)
    o, i = d.rhs_output, d.rhs_input
    split = dims[:o] + [groups, dims[o] // groups] + dims[o + 1:]
    # In the split array the group is dim o; the input features are at i (+1 when after o).
    i_split = i + 1 if i > o else i
    order = [k for k in range(len(split)) if k != o]
    order.insert(order.index(i_split), o)
    merged = [split[k] for k in order]
    at = order.index(o)
    merged[at:at + 2] = [merged[at] * merged[at + 1]]
    return tuple(split), tuple(order), tuple(merged)


__all__ = ["filter_gradient", "groups_into_input_features", "input_gradient", "lhs_transposed",
           "rhs_transposed"]
