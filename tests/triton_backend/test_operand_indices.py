"""Operand indices derived from the indexing analysis (``lowering.operand_indices``): checked
against NumPy applying the same op to an ``arange`` (each output element names the operand
element it reads), and end to end against the reference evaluator where the maps' domains
(pad, concatenate) and runtime variables (dynamic-slice) drive masks and clamps."""
from __future__ import annotations

import itertools
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion.text.parser import parse_hlo
from tests.triton_backend.fusion_check import run_and_compare
from tests.triton_backend.fusion_check import single_fusion_module as fm
from tiling.maps.affine_expr import d
from tiling.indexing_analysis import output_to_input_indexing
from triton_backend.lowering.emitter.operand_indices import exact_operand_indices
from triton_backend.lowering.emitter.value_emitter import ValueEmitter
from triton_backend.lowering.emitter.identifiers import IdentifierAllocator


def _operand_positions(operand_shape, op_line, out_shape):
    """For every output index, the operand index the map-derived expressions give."""
    shape = ",".join
    module = parse_hlo(f"HloModule m\nENTRY e {{\n  p = f32[{shape(map(str, operand_shape))}] "
                       f"parameter(0)\n  ROOT r = f32[{shape(map(str, out_shape))}] {op_line}\n}}\n")
    em = ValueEmitter(module, module.entry, [1] * len(out_shape), IdentifierAllocator(), {})
    exprs = exact_operand_indices(em, module.entry.root, 0, tuple(d(i) for i in range(len(out_shape))))
    return {idx: tuple(e.evaluate(idx) for e in exprs)
            for idx in itertools.product(*(range(n) for n in out_shape))}


def _check(operand_shape, op_line, out_shape, numpy_op):
    source = np.arange(math.prod(operand_shape)).reshape(operand_shape)
    want = numpy_op(source)
    assert want.shape == tuple(out_shape)
    for idx, at in _operand_positions(operand_shape, op_line, out_shape).items():
        assert source[at] == want[idx], (idx, at)


_dims = st.lists(st.integers(1, 4), min_size=1, max_size=3)


@settings(max_examples=40, deadline=None)
@given(_dims, st.data())
def test_reshape_reads_the_row_major_element(dims, data):
    total = math.prod(dims)
    factors = [f for f in range(1, total + 1) if total % f == 0]
    first = data.draw(st.sampled_from(factors))
    out = (first, total // first) if data.draw(st.booleans()) else (total,)
    _check(dims, "reshape(p)", out, lambda a: a.reshape(out))


@settings(max_examples=40, deadline=None)
@given(_dims, st.data())
def test_transpose_reverse_and_slice_read_what_numpy_reads(dims, data):
    perm = data.draw(st.permutations(range(len(dims))))
    out = tuple(dims[p] for p in perm)
    _check(dims, f"transpose(p), dimensions={{{','.join(map(str, perm))}}}", out,
           lambda a: np.transpose(a, perm))
    flipped = data.draw(st.lists(st.sampled_from(range(len(dims))), unique=True))
    _check(dims, f"reverse(p), dimensions={{{','.join(map(str, flipped))}}}", dims,
           lambda a: np.flip(a, tuple(flipped)) if flipped else a)
    starts = [data.draw(st.integers(0, n - 1)) for n in dims]
    strides = [data.draw(st.integers(1, 3)) for _ in dims]
    sizes = [len(range(s, n, k)) for s, n, k in zip(starts, dims, strides)]
    spec = ",".join(f"[{s}:{n}:{k}]" for s, n, k in zip(starts, dims, strides))
    _check(dims, f"slice(p), slice={{{spec}}}", sizes,
           lambda a: a[tuple(slice(s, n, k) for s, n, k in zip(starts, dims, strides))])


def test_broadcast_and_bitcast_with_a_layout_read_what_numpy_reads():
    _check((3, 2), "broadcast(p), dimensions={0,2}", (3, 4, 2),
           lambda a: np.broadcast_to(a[:, None, :], (3, 4, 2)))
    # f32[3,2]{0,1} holds the transpose in memory: bitcast to row-major [2,3] reads it so.
    module = parse_hlo("HloModule m\nENTRY e {\n  p = f32[3,2]{0,1} parameter(0)\n"
                       "  ROOT r = f32[2,3] bitcast(p)\n}\n")
    em = ValueEmitter(module, module.entry, [1, 1], IdentifierAllocator(), {})
    exprs = exact_operand_indices(em, module.entry.root, 0, (d(0), d(1)))
    assert [str(e) for e in exprs] == ["d1", "d0"]


def test_maps_are_computed_once_per_instruction():
    module = parse_hlo("HloModule m\nENTRY e {\n  p = f32[4] parameter(0)\n"
                       "  ROOT r = f32[4] reverse(p), dimensions={0}\n}\n")
    em = ValueEmitter(module, module.entry, [4], IdentifierAllocator(), {})
    exact_operand_indices(em, module.entry.root, 0, (d(0),))
    first = em.index_maps["r"]
    exact_operand_indices(em, module.entry.root, 0, (d(0) + 1,))
    assert em.index_maps["r"] is first


def test_elementwise_hlo_spellings_have_indexing_maps():
    # The analysis used to spell these cos/sin/clz, leaving HLO's cosine/sine undefined.
    for op, t in (("cosine", "f32"), ("sine", "f32"), ("count-leading-zeros", "s32")):
        module = parse_hlo(f"HloModule m\nENTRY e {{\n  p = {t}[3] parameter(0)\n"
                           f"  ROOT r = {t}[3] {op}(p)\n}}\n")
        (maps,) = output_to_input_indexing(module.entry.root, module)
        assert [str(m) for m in maps] == ["(d0) -> (d0), domain: d0 in [0, 2]"]


def test_pad_masks_by_the_map_domain_and_drops_the_mask_when_nothing_is_padded():
    padded = fm(["f32[5,3]", "f32[]"], "  ROOT r = f32[12,5] pad(p0, p1), padding=2_1_1x0_-2_2",
                "f32[12,5]")
    run_and_compare(padded, exact=True, tile_sizes=(4, 8))
    cut = fm(["f32[6,4]", "f32[]"], "  ROOT r = f32[4,2] pad(p0, p1), padding=-1_-1x-2_0",
             "f32[4,2]")
    compiled = run_and_compare(cut, exact=True)
    assert "tl.where" not in compiled.source


def test_pad_of_a_reshape_and_concatenate_with_an_empty_operand():
    text = fm(["f32[2,6]", "f32[]", "f32[3,0]", "f32[3,2]"],
              "  r = f32[3,4] reshape(p0)\n  q = f32[3,7] pad(r, p1), padding=0_0x2_1\n"
              "  ROOT c = f32[3,9] concatenate(q, p2, p3), dimensions={1}", "f32[3,9]")
    run_and_compare(text, exact=True, tile_sizes=(2, 4))


def test_dynamic_slice_offsets_are_clamped_like_xla():
    text = fm(["f32[6,5]", "s32[]", "s32[]"],
              "  ROOT r = f32[3,2] dynamic-slice(p0, p1, p2), dynamic_slice_sizes={3,2}", "f32[3,2]")
    for starts in ((1, 2), (-4, 9), (5, 0)):
        arrays = [np.arange(30, dtype=np.float32).reshape(6, 5),
                  np.array(starts[0], np.int32), np.array(starts[1], np.int32)]
        run_and_compare(text, exact=True, arrays=arrays)
