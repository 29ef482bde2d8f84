"""The ``convolution`` rule: a loop over window positions, each a small contraction.

The lhs is padded and dilated (``lhs_dilate`` inserts zeros, a negative padding crops), then
for each kernel position the strided slice of it the position reads is contracted with that
kernel tap over the input features.  Floats accumulate in f64 (complex in complex128) and
the interpreter rounds once to the declared type; integers accumulate in 64 bits and wrap to
the declared type, as XLA's integer convolutions do.  ``feature_group_count`` splits the
input and output features into groups; ``batch_group_count`` splits the lhs batch into
groups, output feature ``o`` reading group ``o // (output features / batch_group_count)``.

>>> x = np.arange(5, dtype=np.float32).reshape(1, 5, 1)       # b0f
>>> w = np.array([1, 10], dtype=np.float32).reshape(2, 1, 1)  # 0io
>>> from fusion.ir.convolution import parse_dim_labels
>>> from fusion.ir.attributes import Window, WindowDim
>>> convolve(x, w, parse_dim_labels("b0f_0io->b0f"), Window((WindowDim(2),)), 1, 1,
...          np.dtype(np.float32))[0, :, 0].tolist()
[10.0, 21.0, 32.0, 43.0]
"""
from __future__ import annotations

import itertools
from typing import Any, Callable

import numpy as np

from fusion.ir.attributes import Window
from fusion.ir.convolution import ConvDimensionNumbers, conv_dims, window_output_size
from fusion.errors import FusionCompilerError
from fusion.evaluator.failures import op_error
from fusion.evaluator.numerics import is_float_dtype, numpy_dtype


def _accumulation_dtype(result: np.dtype) -> np.dtype:
    if np.dtype(result).kind == "c":
        return np.dtype(np.complex128)
    if is_float_dtype(result):
        return np.dtype(np.float64)
    if np.dtype(result).itemsize == 8:
        return np.dtype(result)
    return np.dtype(np.int64)


def _pad_and_dilate(x: np.ndarray, axis: int, w, acc: np.dtype) -> np.ndarray:
    """``x`` along ``axis`` with ``w.base_dilation - 1`` zeros between elements and the
    window's low/high padding (negative: cropped)."""
    n = x.shape[axis]
    dilated = (n - 1) * w.base_dilation + 1 if n else 0
    full = max(dilated + w.padding_low + w.padding_high, 0)
    pos = np.arange(full) - w.padding_low
    valid = (pos >= 0) & (pos < dilated) & (pos % w.base_dilation == 0)
    source = np.clip(pos // w.base_dilation, 0, max(n - 1, 0))
    if n == 0:
        shape = list(x.shape)
        shape[axis] = full
        return np.zeros(shape, acc)
    taken = np.take(x, source, axis=axis)
    mask_shape = [1] * x.ndim
    mask_shape[axis] = full
    return np.where(valid.reshape(mask_shape), taken, np.zeros((), acc))


def convolve(lhs: np.ndarray, rhs: np.ndarray, dn: ConvDimensionNumbers, window: Window,
             feature_groups: int, batch_groups: int, result_dtype: np.dtype) -> np.ndarray:
    """XLA's convolution of ``lhs`` with ``rhs``, in the accumulation type of ``result_dtype``
    (the caller rounds); dims in the output's label order."""
    acc = _accumulation_dtype(result_dtype)
    ns = dn.num_spatial
    # Canonical orders: lhs (B, C, S...), rhs (O, I, K...), result (B, O, S...).
    x = np.transpose(lhs, (dn.lhs_batch, dn.lhs_feature, *dn.lhs_spatial)).astype(acc)
    k = np.transpose(rhs, (dn.rhs_output, dn.rhs_input, *dn.rhs_spatial)).astype(acc)
    for i, w in enumerate(window.dims):
        x = _pad_and_dilate(x, 2 + i, w, acc)
    batch, channels = x.shape[0], x.shape[1]
    out_features, group_in = k.shape[0], k.shape[1]
    out_batch = batch // batch_groups
    out_spatial = [window_output_size(lhs.shape[dn.lhs_spatial[i]], w)
                   for i, w in enumerate(window.dims)]
    groups = feature_groups * batch_groups
    og = out_features // groups
    result = np.zeros((out_batch, out_features, *out_spatial), acc)
    if min(out_spatial, default=1) == 0 or out_batch == 0 or out_features == 0:
        return np.transpose(result, np.argsort((dn.out_batch, dn.out_feature, *dn.out_spatial)))
    # Per group g: lhs (Bout, Ig, S...), kernel (Og, Ig, K...).
    if batch_groups > 1:
        xg = x.reshape(batch_groups, out_batch, channels, *x.shape[2:])
    else:
        xg = x.reshape(out_batch, feature_groups, group_in, *x.shape[2:]).swapaxes(0, 1)
    kg = k.reshape(groups, og, group_in, *k.shape[2:])
    sizes = [w.size for w in window.dims]
    out = result.reshape(out_batch, groups, og, *out_spatial)
    for tap in itertools.product(*(range(s) for s in sizes)):
        starts = [t * w.window_dilation for t, w in zip(tap, window.dims)]
        index = tuple(slice(s, s + (o - 1) * w.stride + 1, w.stride)
                      for s, o, w in zip(starts, out_spatial, window.dims))
        kernel_tap = tuple(s - 1 - t if w.window_reversal else t
                           for s, t, w in zip(sizes, tap, window.dims))
        taps = kg[(slice(None), slice(None), slice(None), *kernel_tap)]   # (G, Og, Ig)
        patch = xg[(slice(None), slice(None), slice(None), *index)]       # (G, Bout, Ig, So...)
        out += np.einsum("gbc...,goc->bgo...", patch, taps)
    return np.transpose(out.reshape(result.shape),
                        np.argsort((dn.out_batch, dn.out_feature, *dn.out_spatial)))


def eval_convolution(ev: Any, instr: Any, args: list) -> np.ndarray:
    lhs, rhs = args
    try:
        conv = conv_dims(instr)
    except FusionCompilerError as err:
        raise op_error(instr, err.message) from None
    result_dtype = numpy_dtype(instr.array_shape)
    out = convolve(lhs, rhs, conv.dims, conv.window, conv.feature_group_count,
                   conv.batch_group_count, result_dtype)
    if result_dtype == np.bool_:
        return out != 0
    if not is_float_dtype(result_dtype) and result_dtype.kind != "c":
        return out.astype(result_dtype)  # integers wrap, as XLA's do
    return out


CONVOLUTION_RULES: dict[str, Callable[..., Any]] = {
    "convolution": eval_convolution,
}
