"""Indexing of convolution: XLA's own expectations (indexing_analysis_test.cc, the
``ConvolutionOp_*`` cases) text for text, and a brute-force check that the output -> lhs and
output -> rhs maps name exactly the elements each output element reads."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from fusion.ir.convolution import conv_dims
from fusion.evaluator import evaluate
from tests.tiling.indexing_seed_helpers import module_of, normalize, texts
from tiling import input_to_output_indexing, output_to_input_indexing
from tiling.maps.indexing_map import IndexingMap, enumerate_points

P = "p0 = f32[1,12,10,4] parameter(0)\np1 = f32[4,3,5,8] parameter(1)\n"
RHS = "(d0, d1, d2, d3)[s0, s1, s2] -> (s2, s0, s1, d3)\ndomain:\n{dims}\ns0 in [0, 2]\ns1 in [0, 4]\ns2 in [0, 3]"


def _dims(*sizes):
    return "\n".join(f"d{i} in [0, {n - 1}]" for i, n in enumerate(sizes))


CASES = {
    "no_padding": ("f32[1,10,6,8]", "window={size=3x5 pad=0_0x0_0}", P,
                   "(d0, d1, d2, d3)[s0, s1, s2] -> (d0, d1 + s0, d2 + s1, s2)\ndomain:\n"
                   "{dims}\ns0 in [0, 2]\ns1 in [0, 4]\ns2 in [0, 3]"),
    "padding_and_stride": ("f32[1,6,5,8]", "window={size=3x5 stride=2x2 pad=1_1x2_2}", P,
                           "(d0, d1, d2, d3)[s0, s1, s2] -> (d0, d1 * 2 + s0 - 1, d2 * 2 + s1 - 2, s2)"
                           "\ndomain:\n{dims}\ns0 in [0, 2]\ns1 in [0, 4]\ns2 in [0, 3]\n"
                           "d1 * 2 + s0 in [1, 12]\nd2 * 2 + s1 in [2, 11]"),
    "lhs_dilation": ("f32[1,21,15,8]", "window={size=3x5 pad=0_0x0_0 lhs_dilate=2x2}", P,
                     "(d0, d1, d2, d3)[s0, s1, s2] -> (d0, (d1 + s0) floordiv 2, (d2 + s1) floordiv 2, s2)"
                     "\ndomain:\n{dims}\ns0 in [0, 2]\ns1 in [0, 4]\ns2 in [0, 3]\n"
                     "(d1 + s0) mod 2 in [0, 0]\n(d2 + s1) mod 2 in [0, 0]"),
    "rhs_dilation": ("f32[1,8,2,8]", "window={size=3x5 pad=0_0x0_0 rhs_dilate=2x2}", P,
                     "(d0, d1, d2, d3)[s0, s1, s2] -> (d0, d1 + s0 * 2, d2 + s1 * 2, s2)\ndomain:\n"
                     "{dims}\ns0 in [0, 2]\ns1 in [0, 4]\ns2 in [0, 3]"),
    "feature_groups": ("f32[1,10,6,48]", "window={size=3x5 pad=0_0x0_0}, feature_group_count=6",
                       "p0 = f32[1,12,10,24] parameter(0)\np1 = f32[4,3,5,48] parameter(1)\n",
                       "(d0, d1, d2, d3)[s0, s1, s2] -> (d0, d1 + s0, d2 + s1, (d3 floordiv 8) * 4 + s2)"
                       "\ndomain:\n{dims}\ns0 in [0, 2]\ns1 in [0, 4]\ns2 in [0, 3]"),
    "batch_groups": ("f32[2,10,6,21]", "window={size=3x5 pad=0_0x0_0}, batch_group_count=7",
                     "p0 = f32[14,12,10,4] parameter(0)\np1 = f32[4,3,5,21] parameter(1)\n",
                     "(d0, d1, d2, d3)[s0, s1, s2, s3] -> (d0 + s3 * 2, d1 + s0, d2 + s1, s2)\n"
                     "domain:\n{dims}\ns0 in [0, 2]\ns1 in [0, 4]\ns2 in [0, 3]\ns3 in [0, 6]"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_xla_convolution_indexing(case):
    out, window, params, lhs = CASES[case]
    sizes = tuple(int(v) for v in out[4:-1].split(","))
    m = module_of(params + f"conv = {out} convolution(p0, p1), {window}, "
                  "dim_labels=b01f_i01o->b01f")
    maps = output_to_input_indexing(m.entry.root, m)
    dims = _dims(*sizes)
    (lhs_map,), (rhs_map,) = maps
    assert lhs_map == IndexingMap.parse(lhs.format(dims=dims))
    if case != "feature_groups":  # our printer orders `s2 + (d3 floordiv 8) * 4` the other way
        assert texts(maps[0]) == [normalize(lhs.format(dims=dims))]
    assert texts(maps[1]) == [normalize(RHS.format(dims=dims))]
    # Operand -> output indexing of a convolution is undefined, as in XLA.
    assert all(m_.is_undefined for m_ in input_to_output_indexing(m.entry.root, 0, m))


def _reads(module, out_index):
    """Per operand, the elements output element ``out_index`` depends on, found by
    perturbing each input element under the evaluator (brute force)."""
    conv = module.entry.root
    shapes = [module.entry.instruction(o).shape.dims for o in conv.operands]
    rng = np.random.default_rng(0)
    base = [rng.integers(1, 4, s).astype(np.float64) for s in shapes]
    reference = evaluate(module, *base)[0][out_index]
    found = []
    for k, shape in enumerate(shapes):
        hits = set()
        for idx in itertools.product(*(range(n) for n in shape)):
            args = [a.copy() for a in base]
            args[k][idx] += 1000.0
            if evaluate(module, *args)[0][out_index] != reference:
                hits.add(idx)
        found.append(hits)
    return found


BRUTE = [
    # (lhs, rhs, out, attributes)
    ("f64[1,5,2]", "f64[3,2,2]", "f64[1,4,2]",
     "window={size=3 stride=2 pad=2_1 lhs_dilate=2 rhs_dilate=2}, dim_labels=b0f_0io->b0f"),
    ("f64[2,4,3]", "f64[2,2,2]", "f64[2,2,2]",
     "window={size=2 pad=0_0}, dim_labels=fb0_0oi->bf0, batch_group_count=2"),
    ("f64[1,4,5]", "f64[4,2,2]", "f64[1,4,4]",
     "window={size=2 rhs_reversal=1}, dim_labels=bf0_o0i->bf0, feature_group_count=2"),
]


@pytest.mark.parametrize("lhs,rhs,out,attrs", BRUTE)
def test_maps_match_what_the_evaluator_reads(lhs, rhs, out, attrs):
    m = module_of(f"x = {lhs} parameter(0)\nw = {rhs} parameter(1)\n"
                  f"c = {out} convolution(x, w), {attrs}")
    conv = m.entry.root
    conv_dims(conv)
    maps = output_to_input_indexing(conv, m)
    for out_index in itertools.product(*(range(n) for n in conv.shape.dims)):
        reads = _reads(m, out_index)
        for k in (0, 1):
            (imap,) = maps[k]
            named = {imap.evaluate(dims, syms) for dims, syms in enumerate_points(imap)
                     if dims == out_index}
            if k == 1 or "batch_group_count" in attrs:
                # XLA's kernel map names every tap, even one that meets padding; its lhs map
                # reads every batch group for each output feature: supersets.
                assert reads[k] <= named, (k, out_index)
            else:
                assert named == reads[k], (k, out_index)
