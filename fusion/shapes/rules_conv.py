"""Shape rule of convolution (XLA's ``ShapeInference::InferConvolveShape``).

The output has the lhs batch divided by ``batch_group_count``, the kernel's output features
and, per spatial dim, the positions of the (dilated) window over the padded, dilated input;
its element type is the declared one (``preferred_element_type``).

>>> from fusion.ir.attributes import Window, WindowDim
>>> from fusion.ir.hlo_module import HloInstruction
>>> c = HloInstruction("c", "convolution", ArrayShape("f32", (2, 4, 4, 8)), ("x", "w"), (
...     ("window", Window((WindowDim(3, 2, 1, 1), WindowDim(3, 2, 1, 1)))),
...     ("dim_labels", "b01f_01io->b01f")))
>>> str(shape_convolution(c, (ArrayShape("f32", (2, 8, 8, 4)), ArrayShape("f32", (3, 3, 4, 8))), None))
'f32[2,4,4,8]'
"""
from __future__ import annotations

from typing import Sequence

from fusion.ir.convolution import conv_dims, window_output_size
from fusion.ir.hlo_module import HloInstruction, HloModule
from fusion.ir.shape import ArrayShape, Shape
from fusion.shapes.checks import expect_array, expect_operand_count, fail


def shape_convolution(instr: HloInstruction, operands: Sequence[Shape],
                      module: HloModule | None) -> Shape:
    """Result dims in the output's label order; the element type is declared."""
    expect_operand_count(instr, operands, 2)
    lhs = expect_array(instr, operands[0], "the lhs")
    rhs = expect_array(instr, operands[1], "the rhs")
    out = expect_array(instr, instr.shape, "the result")
    conv = conv_dims(instr)
    dn, rank = conv.dims, conv.dims.num_spatial + 2
    if lhs.rank != rank or rhs.rank != rank:
        fail(instr, f"dim_labels {dn} name {rank} dims, but the lhs has rank {lhs.rank} and "
             f"the rhs rank {rhs.rank}")
    if (lhs.dtype == "pred") != (rhs.dtype == "pred"):
        fail(instr, f"convolution operands have incompatible types {lhs.dtype} and {rhs.dtype}")
    fgc, bgc = conv.feature_group_count, conv.batch_group_count
    in_features, batch = lhs.dims[dn.lhs_feature], lhs.dims[dn.lhs_batch]
    kernel_in, kernel_out = rhs.dims[dn.rhs_input], rhs.dims[dn.rhs_output]
    if in_features % fgc:
        fail(instr, f"the lhs feature dim ({in_features}) is not a multiple of "
             f"feature_group_count {fgc}")
    if in_features // fgc != kernel_in:
        fail(instr, f"the lhs has {in_features} features in {fgc} group(s), so the kernel's "
             f"input feature dim must be {in_features // fgc}, not {kernel_in}")
    if kernel_out % fgc or kernel_out % bgc:
        fail(instr, f"the kernel's output feature dim ({kernel_out}) is not a multiple of "
             f"feature_group_count {fgc} and batch_group_count {bgc}")
    if batch % bgc:
        fail(instr, f"the lhs batch dim ({batch}) is not a multiple of batch_group_count {bgc}")
    dims = [0] * rank
    dims[dn.out_batch] = batch // bgc
    dims[dn.out_feature] = kernel_out
    for i, w in enumerate(conv.window.dims):
        kernel_size = rhs.dims[dn.rhs_spatial[i]]
        if w.size != kernel_size:
            fail(instr, f"window size {w.size} of spatial dim {i} differs from the kernel's "
                 f"size {kernel_size} there")
        dims[dn.out_spatial[i]] = window_output_size(lhs.dims[dn.lhs_spatial[i]], w)
    return ArrayShape(out.dtype, tuple(dims))
