"""Fusions over TPU-style tiled and word-packed layouts, in the Triton interpreter.

bf16 ``(8,128)(2,1)``, s8 ``(8,128)(4,1)``, PRED ``(32,128)(32,1)``, f32 ``(8,128)`` and mixes,
through elementwise, reduction (row and column) and transpose fusions on shapes that are not
multiples of the tiles; every output is compared bit-exactly with the reference evaluator,
logical values and physical buffer (padding: zero) both, with the input padding poisoned.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from fusion.errors import UnsupportedOpError
from fusion.text.parser import parse_hlo
from tests.triton_backend.fusion_check import single_fusion_module as fm
from tests.triton_backend.packed_layout_check import bits, run_packed
from tiling.layouts.tiled_layout import TiledLayout, elements_per_word
from triton_backend.driver.compiled_fusion import compile_fusion
from triton_backend.host.host_packing import pack_tensor

B16 = "{1,0:T(8,128)(2,1)}"
B8 = "{1,0:T(8,128)(4,1)}"
B1 = "{1,0:T(32,128)(32,1)}"
F32 = "{1,0:T(8,128)}"
B = f"bf16[37,300]{B16}"
S = f"s8[13,260]{B8}"
P = f"pred[40,130]{B1}"
F = f"f32[37,300]{F32}"

MAX_BF16 = "mx {\n  a = bf16[] parameter(0)\n  b = bf16[] parameter(1)\n  ROOT m = bf16[] maximum(a, b)\n}"
ADD_S8 = "ad {\n  a = s8[] parameter(0)\n  b = s8[] parameter(1)\n  ROOT m = s8[] add(a, b)\n}"
OR_PRED = "or {\n  a = pred[] parameter(0)\n  b = pred[] parameter(1)\n  ROOT m = pred[] or(a, b)\n}"
MAX_F32 = "mf {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT m = f32[] maximum(a, b)\n}"

ELEMENTWISE = {
    "bf16_add": ([B, B], f"  ROOT r = {B} add(p0, p1)", B),
    "s8_multiply": ([S, S], f"  ROOT r = {S} multiply(p0, p1)", S),
    "pred_xor": ([P, P], f"  ROOT r = {P} xor(p0, p1)", P),
    # not(0) is nonzero: lanes outside the array must still leave zero in the padding.
    "pred_not": ([P], f"  ROOT r = {P} not(p0)", P),
    "s8_not": ([S], f"  ROOT r = {S} not(p0)", S),
    "f32_tiled_maximum": ([F, F], f"  ROOT r = {F} maximum(p0, p1)", F),
    "s8_column_major_tiles": (["s8[13,60]{0,1:T(8,128)(4,1)}"] * 2,
                              "  ROOT r = s8[13,60]{0,1:T(8,128)(4,1)} subtract(p0, p1)",
                              "s8[13,60]{0,1:T(8,128)(4,1)}"),
    # Mixed: a packed input and a plain output, and the reverse.
    "packed_in_plain_out": ([B], "  ROOT r = f32[37,300] convert(p0)", "f32[37,300]"),
    "plain_in_packed_out": (["f32[37,300]"], f"  ROOT r = {B} convert(p0)", B),
    "packed_in_tiled_f32_out": ([B], f"  ROOT r = {F} convert(p0)", F),
    "compare_to_packed_pred": ([B, "bf16[37,300]"],
                               f"  ROOT r = pred[37,300]{B1} compare(p0, p1), direction=LT",
                               f"pred[37,300]{B1}"),
    # One bit per element without tiles: words run along the rows (and across them at 70).
    "pred_e1_untiled": (["pred[13,64]{1,0:E(1)}"], "  ROOT r = pred[13,64]{1,0:E(1)} not(p0)",
                        "pred[13,64]{1,0:E(1)}"),
    "pred_e1_read_across_rows": (["pred[13,70]{1,0:E(1)}"], "  ROOT r = pred[13,70] not(p0)",
                                 "pred[13,70]"),
    "dynamic_slice_of_packed": ([B, "s32[]", "s32[]"],
                                f"  ROOT r = bf16[5,7]{B16} dynamic-slice(p0, p1, p2), dynamic_slice_sizes={{5,7}}",
                                f"bf16[5,7]{B16}"),
    "select_pred_s8": ([f"pred[13,260]{B1}", S, "s8[13,260]"],
                       f"  n = {S} negate(p1)\n  ROOT r = {S} select(p0, n, p2)", S),
}


@pytest.mark.parametrize("case", sorted(ELEMENTWISE))
def test_elementwise(case):
    params, body, out = ELEMENTWISE[case]
    run_packed(fm(params, body, out))


# Reductions run slowly in the interpreter: smaller shapes, still no multiple of a tile.
RB, RS, RP, RF = f"bf16[19,140]{B16}", f"s8[13,140]{B8}", f"pred[40,70]{B1}", f"f32[19,140]{F32}"
REDUCTIONS = {
    "bf16_row_max": ([RB, "bf16[]"], "  ROOT r = bf16[19] reduce(p0, p1), dimensions={1}, to_apply=mx",
                     "bf16[19]", MAX_BF16),
    "bf16_row_max_packed_rank1": ([RB, "bf16[]"],
                                  "  ROOT r = bf16[19]{0:T(8,128)(2,1)} reduce(p0, p1), dimensions={1}, to_apply=mx",
                                  "bf16[19]{0:T(8,128)(2,1)}", MAX_BF16),
    "bf16_column_max": ([RB, "bf16[]"], "  ROOT r = bf16[140] reduce(p0, p1), dimensions={0}, to_apply=mx",
                        "bf16[140]", MAX_BF16),
    "s8_column_add": ([RS, "s8[]"], "  ROOT r = s8[140] reduce(p0, p1), dimensions={0}, to_apply=ad",
                      "s8[140]", ADD_S8),
    "pred_row_or": ([RP, "pred[]"], "  ROOT r = pred[40] reduce(p0, p1), dimensions={1}, to_apply=or",
                    "pred[40]", OR_PRED),
    "pred_column_or_packed": ([RP, "pred[]"],
                              "  ROOT r = pred[70]{0:T(32,128)(32,1)} reduce(p0, p1), dimensions={0}, to_apply=or",
                              "pred[70]{0:T(32,128)(32,1)}", OR_PRED),
    "bf16_middle_dim_to_packed_2d": (["bf16[5,6,40]{2,1,0:T(8,128)(2,1)}", "bf16[]"],
                                     f"  ROOT r = bf16[5,40]{B16} reduce(p0, p1), dimensions={{1}}, to_apply=mx",
                                     f"bf16[5,40]{B16}", MAX_BF16),
    "f32_tiled_row_max": ([RF, "f32[]"], "  ROOT r = f32[19]{0:T(128)} reduce(p0, p1), dimensions={1}, to_apply=mf",
                          "f32[19]{0:T(128)}", MAX_F32),
}


@pytest.mark.parametrize("case", sorted(REDUCTIONS))
def test_reduction(case):
    params, body, out, combiner = REDUCTIONS[case]
    run_packed(fm(params, body, out, combiner))


TRANSPOSES = {
    "bf16": (B, f"bf16[300,37]{B16}"),
    "s8": (S, f"s8[260,13]{B8}"),
    "pred": (P, f"pred[130,40]{B1}"),
    "f32": (F, f"f32[300,37]{F32}"),
}


@pytest.mark.parametrize("case", sorted(TRANSPOSES))
def test_transpose(case):
    source, out = TRANSPOSES[case]
    run_packed(fm([source], f"  ROOT r = {out} transpose(p0), dimensions={{1,0}}", out))


def test_transpose_3d_packed_to_packed():
    out = "bf16[20,4,6]{2,1,0:T(8,128)(2,1)}"
    run_packed(fm(["bf16[4,6,20]{2,1,0:T(8,128)(2,1)}"],
                  f"  ROOT r = {out} transpose(p0), dimensions={{2,0,1}}", out))


def test_multiply_add_chain_over_three_packed_formats():
    body = (f"  c = {P} compare(p0, p1), direction=GT\n"
            f"  x = pred[40,130]{B1} not(p2)\n  ROOT r = {P} and(c, x)")
    run_packed(fm([f"bf16[40,130]{B16}", f"bf16[40,130]{B16}", P], body, P))


@pytest.mark.parametrize("text,layout,dtype", [
    (fm([B, B], f"  ROOT r = {B} add(p0, p1)", B), B16, "bf16"),
    (fm([P, P], f"  ROOT r = {P} xor(p0, p1)", P), B1, "pred"),
])
def test_kernel_writes_every_element_word_whole_and_no_padding_only_word(text, layout, dtype):
    """What the kernel writes: each word holding an element, whole (zero padding bits); a
    word holding only padding is never touched (``run`` allocates those outputs zeroed)."""
    compiled, inputs, got, _ = run_packed(text)
    shape = next(i for _, i in parse_hlo(text).fusions()).shape
    poisoned = torch.full(got[0].shape, 0xA5A5A5A5, dtype=torch.int64).to(torch.uint32)
    module = compiled.module
    module.KERNEL[module.GRID](*inputs, poisoned)
    tiled = TiledLayout.of(shape.dims, shape.layout)
    holding = np.zeros(got[0].numel(), bool)
    holding[np.unique(tiled.offsets_array() // elements_per_word(dtype, shape.layout))] = True
    assert holding.sum() < holding.size  # the shapes do have padding-only words
    np.testing.assert_array_equal(bits(poisoned)[holding], bits(got[0])[holding])
    assert (poisoned.to(torch.int64)[torch.from_numpy(~holding)] == 0xA5A5A5A5).all()


def test_tile_sizes_are_aligned_to_whole_words():
    text = fm([P, P], f"  ROOT r = {P} xor(p0, p1)", P)
    compiled, *_ = run_packed(text, tile_sizes=(4, 64))
    assert compiled.tile_sizes[0] % 32 == 0


def test_physical_buffers_are_the_calling_convention():
    compiled = compile_fusion(parse_hlo(fm([B, B], f"  ROOT r = {B} add(p0, p1)", B)), "fusion")
    logical = torch.zeros((37, 300), dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"torch.uint32 \[7680\]"):
        compiled(logical, logical)
    packed = pack_tensor(logical, parse_hlo(fm([B], "  ROOT r = " + B + " negate(p0)", B))
                         .computation("f").parameters[0].shape.layout)
    assert packed.shape == (7680,)


@pytest.mark.parametrize("tile_sizes", [None, (64,)])
def test_words_not_along_one_dim_are_stored_field_by_field(tile_sizes):
    # Rank 1 under (128)(4,1): a word holds elements i, i+128, i+256, i+384, so programs of
    # 64 elements share every word: one atomic update per field (issue 29).
    out = "s8[260]{0:T(128)(4,1)}"
    compiled, *_ = run_packed(fm(["s8[260]"], f"  ROOT r = {out} negate(p0)", out),
                              tile_sizes=tile_sizes)
    assert "tl.atomic_xor(" in compiled.source


def test_tiled_packed_output_of_a_flat_space_is_stored_field_by_field():
    # Outputs of unrelated shapes share a flat space, where no tile holds whole words of the
    # tiled output (refused before issue 29): 11 programs update its fields atomically.
    body = (f"  n = bf16[37,300] negate(p0)\n  t = {B} copy(n)\n"
            f"  r = bf16[50] slice(p1), slice={{[0:50]}}\n  ROOT o = ({B}, bf16[50]) tuple(t, r)")
    compiled, *_ = run_packed(fm(["bf16[37,300]", "bf16[60]"], body, f"({B}, bf16[50])"),
                              tile_sizes=(1024,))
    assert "tl.atomic_xor(" in compiled.source and compiled.grid == (11,)


def test_but_such_layouts_are_read():
    run_packed(fm(["s8[260]{0:T(128)(4,1)}"], "  ROOT r = s8[260] negate(p0)", "s8[260]"))


def test_bitcast_of_a_tiled_operand_is_refused_clearly():
    text = fm([B], "  ROOT r = bf16[300,37]{0,1} bitcast(p0)", "bf16[300,37]{0,1}")
    with pytest.raises(UnsupportedOpError, match="tiled or packed layout"):
        compile_fusion(parse_hlo(text), "fusion")


def test_multi_output_reduction_with_packed_outputs_of_two_shapes():
    x = "bf16[5,6,40]{2,1,0:T(8,128)(2,1)}"
    body = (f"  n = {x} negate(p0)\n"
            f"  r = bf16[5,40]{B16} reduce(p0, p1), dimensions={{1}}, to_apply=mx\n"
            f"  ROOT t = ({x}, bf16[5,40]{B16}) tuple(n, r)")
    run_packed(fm([x, "bf16[]"], body, f"({x}, bf16[5,40]{B16})", MAX_BF16))


def test_array_constant_in_a_packed_layout_is_passed_untiled():
    t = f"bf16[2,3]{B16}"
    body = f"  c = {t} constant({{{{1, -2, 3.5}}, {{4, 5, -6}}}})\n  ROOT r = {t} add(p0, c)"
    run_packed(fm([t], body, t))
