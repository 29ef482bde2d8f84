"""Each op kind through the emitter in the Triton interpreter, on small non-power-of-two
shapes, against the reference evaluator: bit-exact for data movement, per-dtype tolerance for
arithmetic (scaled by the reduction length for reductions)."""
from __future__ import annotations

import numpy as np
import pytest

from fusion.errors import UnsupportedOpError
from fusion.text.parser import parse_hlo
from tests.triton_backend.fusion_check import ARGMAX, run_and_compare
from tests.triton_backend.fusion_check import single_fusion_module as fm
from triton_backend.driver.compiled_fusion import compile_fusion

DTYPES = ["f32", "bf16", "f16", "s32", "s8", "pred"]

MOVEMENT = {
    "broadcast": (["{t}[3]"], "  ROOT r = {t}[5,3,2] broadcast(p0), dimensions={{1}}", "{t}[5,3,2]"),
    "transpose": (["{t}[3,5,2]"], "  ROOT r = {t}[2,3,5] transpose(p0), dimensions={{2,0,1}}", "{t}[2,3,5]"),
    "reshape": (["{t}[6,5]"], "  ROOT r = {t}[3,10] reshape(p0)", "{t}[3,10]"),
    "bitcast_layout": (["{t}[5,3]{{0,1}}"], "  ROOT r = {t}[3,5]{{1,0}} bitcast(p0)", "{t}[3,5]{{1,0}}"),
    "slice": (["{t}[7,9]"], "  ROOT r = {t}[3,3] slice(p0), slice={{[1:7:2], [2:9:3]}}", "{t}[3,3]"),
    "reverse": (["{t}[3,5]"], "  ROOT r = {t}[3,5] reverse(p0), dimensions={{1}}", "{t}[3,5]"),
    "pad": (["{t}[3,4]", "{t}[]"], "  ROOT r = {t}[8,5] pad(p0, p1), padding=1_2_1x-1_2", "{t}[8,5]"),
    "concatenate": (["{t}[3,2]", "{t}[3,5]", "{t}[3,1]"],
                    "  ROOT r = {t}[3,8] concatenate(p0, p1, p2), dimensions={{1}}", "{t}[3,8]"),
    "copy": (["{t}[5,3]{{0,1}}"], "  ROOT r = {t}[5,3]{{1,0}} copy(p0)", "{t}[5,3]{{1,0}}"),
    "dynamic-slice": (["{t}[6,5]", "s32[]", "s32[]"],
                      "  ROOT r = {t}[3,2] dynamic-slice(p0, p1, p2), dynamic_slice_sizes={{3,2}}", "{t}[3,2]"),
    "dynamic-update-slice": (["{t}[6,5]", "{t}[2,3]", "s32[]", "s32[]"],
                             "  ROOT r = {t}[6,5] dynamic-update-slice(p0, p1, p2, p3)", "{t}[6,5]"),
    "gather": (["{t}[7,3]", "s32[5,1]"],
               ("  ROOT r = {t}[5,2] gather(p0, p1), offset_dims={{1}}, collapsed_slice_dims={{0}}, "
                "start_index_map={{0}}, index_vector_dim=1, slice_sizes={{1,2}}"), "{t}[5,2]"),
    "iota_transpose": ([], ("  i = {t}[3,5] iota(), iota_dimension=1\n"
                            "  ROOT r = {t}[5,3] transpose(i), dimensions={{1,0}}"), "{t}[5,3]"),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", sorted(MOVEMENT))
def test_data_movement_is_bit_exact(op, dtype):
    params, body, out = MOVEMENT[op]
    if op == "iota_transpose" and dtype == "pred":
        pytest.skip("iota of pred is not a valid XLA op")
    params = [p.format(t=dtype) for p in params]
    text = fm(params, body.format(t=dtype), out.format(t=dtype))
    arrays = None
    if op.startswith("dynamic") or op == "gather":
        rng = np.random.default_rng(3)
        from tests.triton_backend.fusion_check import random_array
        module = parse_hlo(text)
        shapes = [p.shape for p in module.computation("f").parameters]
        arrays = [random_array(s, rng) for s in shapes]
        # Starts far out of range exercise XLA's clamping.
        for i, s in enumerate(shapes):
            if s.dtype == "s32":
                arrays[i] = rng.integers(-4, 9, s.dims).astype(np.int32)
    run_and_compare(text, exact=True, arrays=arrays)


ELEMENTWISE = [
    ("f32", "  ROOT r = f32[3,5] add(p0, p1)"),
    ("bf16", "  m = bf16[3,5] multiply(p0, p1)\n  ROOT r = bf16[3,5] exponential(m)"),
    ("f16", "  ROOT r = f16[3,5] divide(p0, p1)"),
    ("s32", "  ROOT r = s32[3,5] remainder(p0, p1)"),
    ("s8", "  ROOT r = s8[3,5] multiply(p0, p1)"),
    ("pred", "  ROOT r = pred[3,5] xor(p0, p1)"),
]


@pytest.mark.parametrize("dtype,body", ELEMENTWISE)
def test_elementwise(dtype, body):
    run_and_compare(fm([f"{dtype}[3,5]"] * 2, body, f"{dtype}[3,5]"), exact=dtype in ("s32", "s8", "pred"))


def test_compare_select_clamp_convert_chain():
    body = ("  c = pred[3,5] compare(p0, p1), direction=LT\n  s = f32[3,5] select(c, p0, p1)\n"
            "  lo = f32[] constant(-0.5)\n  hi = f32[] constant(0.75)\n"
            "  k = f32[3,5] clamp(lo, s, hi)\n  ROOT r = bf16[3,5] convert(k)")
    run_and_compare(fm(["f32[3,5]"] * 2, body, "bf16[3,5]"), exact=True)


#: Scalars combined with blocks: a broadcast constant or parameter, or clamp's scalar bounds,
#: through the NaN-propagating maximum/minimum (whose lowering ORs two comparisons) and
#: through a pred chain; the interpreter once failed on a 0-d i1 OR-ed with a block.
SCALAR_OPERANDS = {
    "max_of_broadcast_constant": (["f32[2,3]"], ("  lo = f32[] constant(-1)\n"
                                                 "  bl = f32[2,3] broadcast(lo), dimensions={}\n"
                                                 "  ROOT r = f32[2,3] maximum(bl, p0)"),
                                  "f32[2,3]"),
    "min_of_broadcast_parameter": (["f32[2,3]", "f32[]"],
                                   ("  bh = f32[2,3] broadcast(p1), dimensions={}\n"
                                    "  ROOT r = f32[2,3] minimum(p0, bh)"), "f32[2,3]"),
    "clamp_scalar_bounds": (["f32[2,3]"], ("  lo = f32[] constant(-0.5)\n"
                                           "  hi = f32[] constant(0.75)\n"
                                           "  ROOT r = f32[2,3] clamp(lo, p0, hi)"), "f32[2,3]"),
    "max_of_sum_of_broadcasts": (["f32[2,3]", "f32[]"],
                                 ("  b = f32[2,3] broadcast(p1), dimensions={}\n"
                                  "  s = f32[2,3] add(b, b)\n"
                                  "  ROOT r = f32[2,3] maximum(s, p0)"), "f32[2,3]"),
    "or_of_broadcast_compare": (["f32[2,3]", "f32[]"],
                                ("  k = pred[] compare(p1, p1), direction=NE\n"
                                 "  kb = pred[2,3] broadcast(k), dimensions={}\n"
                                 "  c = pred[2,3] compare(p0, p0), direction=NE\n"
                                 "  ROOT r = pred[2,3] or(kb, c)"), "pred[2,3]"),
}


@pytest.mark.parametrize("scalar", [-1.0, float("nan")])
@pytest.mark.parametrize("case", sorted(SCALAR_OPERANDS))
def test_scalar_operands_combined_with_blocks(case, scalar):
    params, body, out = SCALAR_OPERANDS[case]
    x = np.array([[-3.0, np.nan, 2.0], [0.0, -0.0, 0.5]], np.float32)
    arrays = [x] + [np.array(scalar, np.float32)] * (len(params) - 1)
    run_and_compare(fm(params, body, out), exact=True, arrays=arrays)


REDUCERS = """
add { a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT r = {t}[] add(a, b) }
max { a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT r = {t}[] maximum(a, b) }
mul { a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT r = {t}[] multiply(a, b) }
"""


@pytest.mark.parametrize("dtype", ["f32", "bf16", "f16", "s32", "s8"])
@pytest.mark.parametrize("dims,reducer,init", [
    ("{1}", "add", "0"), ("{0}", "max", "-100"), ("{0,2}", "add", "3"), ("{2}", "mul", "1"),
])
def test_reduce(dtype, dims, reducer, init):
    in_shape = f"{dtype}[5,3,7]"
    kept = [k for k in range(3) if str(k) not in dims]
    out = f"{dtype}[{','.join(str([5, 3, 7][k]) for k in kept)}]"
    body = (f"  c = {dtype}[] constant({init})\n"
            f"  ROOT r = {out} reduce(p0, c), dimensions={dims}, to_apply={reducer}")
    text = fm([in_shape], body, out, REDUCERS.replace("{t}", dtype))
    length = 5 * 7 if dims == "{0,2}" else 7
    run_and_compare(text, exact=dtype in ("s32", "s8") and reducer != "mul", reduction_length=length)


def test_reduce_pred_and_or():
    extra = ("and { a = pred[] parameter(0)\n  b = pred[] parameter(1)\n  ROOT r = pred[] and(a, b) }\n"
             "or { a = pred[] parameter(0)\n  b = pred[] parameter(1)\n  ROOT r = pred[] or(a, b) }")
    body = ("  t = pred[] constant(true)\n  f = pred[] constant(false)\n"
            "  x = pred[3] reduce(p0, t), dimensions={1}, to_apply=and\n"
            "  y = pred[3] reduce(p0, f), dimensions={1}, to_apply=or\n  ROOT r = (pred[3], pred[3]) tuple(x, y)")
    run_and_compare(fm(["pred[3,3]"], body, "(pred[3], pred[3])", extra), exact=True)


def test_variadic_argmax_and_softmax_in_one_fusion():
    extra = ARGMAX + """
add { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] add(a, b) }"""
    body = ("  io = s32[6,5] iota(), iota_dimension=1\n  ninf = f32[] constant(-inf)\n  z = s32[] constant(0)\n"
            "  am = (f32[6], s32[6]) reduce(p0, io, ninf, z), dimensions={1}, to_apply=argmax\n"
            "  mx = f32[6] get-tuple-element(am), index=0\n  ix = s32[6] get-tuple-element(am), index=1\n"
            "  zf = f32[] constant(0)\n  e = f32[6,5] exponential(p0)\n"
            "  s = f32[6] reduce(e, zf), dimensions={1}, to_apply=add\n"
            "  ROOT r = (f32[6], s32[6], f32[6]) tuple(mx, ix, s)")
    run_and_compare(fm(["f32[6,5]"], body, "(f32[6], s32[6], f32[6])", extra), exact=False,
                    reduction_length=5)


def test_row_reduction_broadcast_back_in_one_fusion():
    extra = REDUCERS.replace("{t}", "f32")
    body = ("  z = f32[] constant(0)\n  s = f32[5] reduce(p0, z), dimensions={1}, to_apply=add\n"
            "  b = f32[5,7] broadcast(s), dimensions={0}\n  ROOT r = f32[5,7] subtract(p0, b)")
    run_and_compare(fm(["f32[5,7]"], body, "f32[5,7]", extra), exact=False, reduction_length=7,
                    tile_sizes=(2, 4))


@pytest.mark.parametrize("tiles", [(1, 1), (2, 4), (4, 2), (3, 7), (5, 3)])
def test_partial_tiles_and_explicit_tile_sizes(tiles):
    compiled = run_and_compare(fm(["f32[5,7]{0,1}"], "  ROOT r = f32[5,7]{1,0} negate(p0)",
                                  "f32[5,7]{1,0}"), exact=True, tile_sizes=tiles)
    assert compiled.tile_sizes == tiles
    assert compiled.tiling_reason.startswith("explicit tile sizes (legal")


@pytest.mark.parametrize("tiles,why", [((2, 8), "outside"), ((5,), "rank")])
def test_illegal_explicit_tile_sizes_are_rejected_with_the_reason(tiles, why):
    module = parse_hlo(fm(["f32[5,7]"], "  ROOT r = f32[5,7] negate(p0)", "f32[5,7]"))
    with pytest.raises(UnsupportedOpError, match=f"illegal: .*{why}"):
        compile_fusion(module, "fusion", tile_sizes=tiles)


def test_scalar_output_and_array_constant():
    body = ("  c = f32[3] constant({1.5, -inf, 2})\n  m = f32[3] multiply(p0, c)\n"
            "  z = f32[] constant(0)\n  ROOT r = f32[] reduce(m, z), dimensions={0}, to_apply=add")
    run_and_compare(fm(["f32[3]"], body, "f32[]", REDUCERS.replace("{t}", "f32")), exact=False,
                    reduction_length=3)


def test_non_default_output_layout():
    run_and_compare(fm(["f32[3,5]"], "  ROOT r = f32[3,5]{0,1} exponential(p0)", "f32[3,5]{0,1}"),
                    exact=False)


@pytest.mark.parametrize("body,op", [
    ("  ROOT r = f32[3,3] cholesky(p0), lower=true", "cholesky"),
    ("  ROOT r = f32[3,3] convolution(p0, p0), window={size=1x1}, dim_labels=bf_io->bf", "convolution"),
])
def test_unsupported_ops_raise_naming_the_op(body, op):
    module = parse_hlo(fm(["f32[3,3]"], body, "f32[3,3]"))
    with pytest.raises(UnsupportedOpError, match=op):
        compile_fusion(module, "fusion")


@pytest.mark.parametrize("body,shape,kind", [
    ("  ROOT r = f32[5] sort(p0), dimensions={0}, to_apply=lt", "f32[5]", "sort"),
    ("  ROOT r = f32[3,3] dot(p0, p0), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
     "f32[3,3]", "dot"),
])
def test_dot_and_sort_fusions_dispatch_to_their_templates(body, shape, kind):
    extra = "lt { a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT r = pred[] compare(a, b), direction=LT }"
    compiled = run_and_compare(fm([shape], body, shape, extra), exact=kind == "sort",
                               reduction_length=3)
    assert compiled.kind == kind
