"""Looped (chunked) reductions, reduce-window and multi-output reduction fusions in the Triton
interpreter against the reference evaluator, on small non-power-of-two shapes (chunks are
forced small so loops run many iterations); plus where the tiling comes from."""
from __future__ import annotations

import re

import numpy as np
import pytest

from fusion.text.parser import parse_hlo
from tests.triton_backend.fusion_check import ARGMAX, run_and_compare
from tests.triton_backend.fusion_check import single_fusion_module as fm
from tiling.policy.limits import DEFAULT_REDUCTION_CHUNK
from triton_backend.lowering.kernel_plan import plan_kernel
from triton_backend.driver.compiled_fusion import compile_fusion

ADD = "add {{ a = {t}[] parameter(0)\n  b = {t}[] parameter(1)\n  ROOT r = {t}[] add(a, b) }}\n"
MAX = "max {{ a = {t}[] parameter(0)\n  b = {t}[] parameter(1)\n  ROOT r = {t}[] maximum(a, b) }}\n"
MUL = "mul {{ a = {t}[] parameter(0)\n  b = {t}[] parameter(1)\n  ROOT r = {t}[] multiply(a, b) }}\n"


def reducers(t: str) -> str:
    return (ADD + MAX + MUL).format(t=t)


SOFTMAX = """  ninf = {t}[] constant(-inf)
  m = {t}[3] reduce(p0, ninf), dimensions={{1}}, to_apply=max
  mb = {t}[3,100] broadcast(m), dimensions={{0}}
  d = {t}[3,100] subtract(p0, mb)
  e = {t}[3,100] exponential(d)
  z = {t}[] constant(0)
  s = {t}[3] reduce(e, z), dimensions={{1}}, to_apply=add
  sb = {t}[3,100] broadcast(s), dimensions={{0}}
  ROOT r = {t}[3,100] divide(e, sb)"""


@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("chunk", [16, 32])
def test_softmax_rows_looped_in_chunks(dtype, chunk):
    text = fm([f"{dtype}[3,100]"], SOFTMAX.format(t=dtype), f"{dtype}[3,100]", reducers(dtype))
    compiled = run_and_compare(text, exact=False, reduction_length=100, reduction_chunk=chunk)
    assert compiled.reduction_chunk == chunk
    assert f"range(0, 100, {chunk})" in compiled.source


LAYERNORM = """  z = f32[] constant(0)
  n = f32[] constant({inv})
  s = f32[5] reduce(p0, z), dimensions={{1}}, to_apply=add
  nb = f32[5] broadcast(n), dimensions={{}}
  mean = f32[5] multiply(s, nb)
  mb = f32[5,{n}] broadcast(mean), dimensions={{0}}
  c = f32[5,{n}] subtract(p0, mb)
  sq = f32[5,{n}] multiply(c, c)
  v = f32[5] reduce(sq, z), dimensions={{1}}, to_apply=add
  var = f32[5] multiply(v, nb)
  eps = f32[5] broadcast(n), dimensions={{}}
  ve = f32[5] add(var, eps)
  r = f32[5] rsqrt(ve)
  rb = f32[5,{n}] broadcast(r), dimensions={{0}}
  ROOT o = f32[5,{n}] multiply(c, rb)"""


def layernorm(n: int) -> str:
    """A layer norm of ``f32[5,n]`` rows (mean and variance: 1/n times a sum)."""
    return fm([f"f32[5,{n}]"], LAYERNORM.format(n=n, inv=1 / n), f"f32[5,{n}]", reducers("f32"))


def test_layernorm_looped_with_tile_over_the_row():
    # Rows of 50 in tiles of 2 x 32 (the second tile of each row partly past its end), each
    # reduce looped in chunks of 16 (the last one partly padding).
    run_and_compare(layernorm(50), exact=False, reduction_length=50, reduction_chunk=16,
                    tile_sizes=(2, 32))


@pytest.mark.parametrize("dtype", ["f32", "f16", "s32", "s8"])
@pytest.mark.parametrize("dims,reducer,init", [("{1}", "add", "3"), ("{0,2}", "max", "-100"),
                                               ("{2}", "mul", "1")])
def test_looped_reduce_any_combiner_non_identity_init(dtype, dims, reducer, init):
    kept = [k for k in range(3) if str(k) not in dims]
    out = f"{dtype}[{','.join(str([5, 19, 21][k]) for k in kept)}]"
    body = (f"  c = {dtype}[] constant({init})\n"
            f"  ROOT r = {out} reduce(p0, c), dimensions={dims}, to_apply={reducer}")
    text = fm([f"{dtype}[5,19,21]"], body, out, reducers(dtype))
    length = 5 * 21 if dims == "{0,2}" else 21
    run_and_compare(text, exact=dtype in ("s32", "s8") and reducer != "mul", reduction_length=length,
                    reduction_chunk=4)


def test_looped_variadic_argmax():
    extra = ARGMAX
    body = ("  io = s32[4,37] iota(), iota_dimension=1\n  ninf = f32[] constant(-inf)\n"
            "  z = s32[] constant(0)\n"
            "  ROOT am = (f32[4], s32[4]) reduce(p0, io, ninf, z), dimensions={1}, to_apply=argmax")
    run_and_compare(fm(["f32[4,37]"], body, "(f32[4], s32[4])", extra), exact=True,
                    reduction_chunk=8)


def test_large_reductions_are_looped_automatically():
    body = "  z = f32[] constant(0)\n  ROOT r = f32[2] reduce(p0, z), dimensions={1}, to_apply=add"
    module = parse_hlo(fm(["f32[2,100000]"], body, "f32[2]", reducers("f32")))
    plan = plan_kernel(module.computation("f"), (2,))
    assert plan.reduction_chunk == DEFAULT_REDUCTION_CHUNK
    assert plan.axis_blocks[1] == DEFAULT_REDUCTION_CHUNK
    # At a GPU's blocks, 2 rows cannot fill the SMs: each row is split among programs.
    assert plan.split is not None and plan.grid == (2 * plan.split.parts,)
    unsplit = plan_kernel(module.computation("f"), (2,), split_parts=1)
    assert unsplit.split is None and unsplit.grid == (2,)  # a program per row
    compiled = compile_fusion(module, "fusion")  # the interpreter's blocks: never split
    assert compiled.reduction_chunk is not None and "for r_r_0_start in range(0, 100000," in compiled.source


def test_a_row_tile_past_the_persistent_limit_keeps_its_loop_chunks():
    # A softmax over rows of 32,000 in one tile per row: the tile alone is past the limit
    # of a persistent reduction, so shrinking the max's and the sum's chunks cannot make
    # the program smaller (they were shrunk to 1, a row walked one element at a time).
    text = fm(["f32[2,32000]"], SOFTMAX.replace("3,100", "2,32000").replace("[3]", "[2]")
              .format(t="f32"), "f32[2,32000]", reducers("f32"))
    module = parse_hlo(text)
    plan = plan_kernel(module.computation("f"), (2, 32000), (1, 32000), module=module)
    assert plan.reduction_chunk == DEFAULT_REDUCTION_CHUNK
    assert plan.axis_blocks[2:] == (DEFAULT_REDUCTION_CHUNK,)  # the max and sum share one axis


WINDOWS = {
    "strided": ("f32[7,9]", "size=2x3 stride=2x2", "f32[3,4]", "max", "-inf"),
    "padded": ("f32[5,6]", "size=3x2 pad=1_1x0_1", "f32[5,6]", "add", "0"),
    "window_dilated": ("f32[9,5]", "size=3x2 rhs_dilate=2x3", "f32[5,2]", "add", "0"),
    "base_dilated": ("f32[4,5]", "size=2x2 stride=1x2 pad=1_0x0_0 lhs_dilate=2x1", "f32[7,2]", "max", "-inf"),
    "cumsum": ("f32[3,13]", "size=1x13 pad=0_0x12_0", "f32[3,13]", "add", "0"),
    "non_identity_init": ("s32[6,7]", "size=2x3 pad=0_1x1_1", "s32[6,7]", "add", "5"),
}


@pytest.mark.parametrize("case", sorted(WINDOWS))
@pytest.mark.parametrize("chunk", [None, 2])
def test_reduce_window(case, chunk):
    in_shape, window, out, reducer, init = WINDOWS[case]
    t = in_shape.split("[")[0]
    body = (f"  c = {t}[] constant({init})\n"
            f"  ROOT r = {out} reduce-window(p0, c), window={{{window}}}, to_apply={reducer}")
    text = fm([in_shape], body, out, reducers(t))
    compiled = run_and_compare(text, exact=t == "s32" or reducer == "max", reduction_length=13,
                               reduction_chunk=chunk)
    # A cumsum's row is one tile: it is scanned along the tile, with no reduction to chunk.
    assert compiled.reduction_chunk == (None if case == "cumsum" else chunk)


def test_reduce_window_inside_a_loop_fusion():
    body = ("  c = f32[] constant(0)\n  e = f32[4,11] exponential(p0)\n"
            "  w = f32[4,11] reduce-window(e, c), window={size=1x11 pad=0_0x10_0}, to_apply=add\n"
            "  ROOT r = f32[4,11] multiply(w, p0)")
    run_and_compare(fm(["f32[4,11]"], body, "f32[4,11]", reducers("f32")), exact=False,
                    reduction_length=11)


MULTI_OUTPUT = """  z = f32[] constant(0)
  e = f32[6,37] exponential(p0)
  s = f32[{kept}] reduce(e, z), dimensions={{{dims}}}, to_apply=add
  ROOT t = (f32[{kept}], f32[6,37]) tuple(s, e)"""


@pytest.mark.parametrize("dims,kept,tiles", [("1", "6", None), ("1", "6", (4, 16)),
                                             ("0", "37", (2, 8)), ("0", "37", None)])
def test_multi_output_reduction_with_an_input_shaped_output(dims, kept, tiles):
    text = fm(["f32[6,37]"], MULTI_OUTPUT.format(dims=dims, kept=kept), f"(f32[{kept}], f32[6,37])",
              reducers("f32"))
    run_and_compare(text, exact=False, reduction_length=37, tile_sizes=tiles)


# XLA's softmax keeps the row max as [R,1] (reshape of the reduce) next to the [R,C] exps.
UNIT_DIM_MULTI_OUTPUT = """  ninf = {t}[] constant(-inf)
  m = {t}[5] reduce(p0, ninf), dimensions={{1}}, to_apply=max
  mr = {t}[5,1] reshape(m)
  mb = {t}[5,13] broadcast(m), dimensions={{0}}
  d = {t}[5,13] subtract(p0, mb)
  e = {t}[5,13] exponential(d)
  ROOT t = ({t}[5,1], {t}[5,13]) tuple(mr, e)"""


@pytest.mark.parametrize("dtype,tiles", [("f32", None), ("f32", (2, 4)), ("bf16", None)])
def test_multi_output_reduction_reshaped_to_a_unit_dim(dtype, tiles):
    text = fm([f"{dtype}[5,13]"], UNIT_DIM_MULTI_OUTPUT.format(t=dtype),
              f"({dtype}[5,1], {dtype}[5,13])", reducers(dtype))
    compiled = run_and_compare(text, exact=False, reduction_length=13, tile_sizes=tiles)
    assert "== 0" in compiled.source  # the [5,1] output is stored once per row


def test_multi_output_with_an_output_of_a_variadic_reduce_and_an_input_shaped_output():
    extra = """argmax { a = f32[] parameter(0)
  ai = s32[] parameter(1)
  b = f32[] parameter(2)
  bi = s32[] parameter(3)
  gt = pred[] compare(a, b), direction=GT
  v = f32[] select(gt, a, b)
  i = s32[] select(gt, ai, bi)
  ROOT r = (f32[], s32[]) tuple(v, i) }"""
    body = ("  io = s32[6,5] iota(), iota_dimension=1\n  ninf = f32[] constant(-inf)\n"
            "  z = s32[] constant(0)\n"
            "  am = (f32[6], s32[6]) reduce(p0, io, ninf, z), dimensions={1}, to_apply=argmax\n"
            "  ix = s32[6] get-tuple-element(am), index=1\n  e = f32[6,5] exponential(p0)\n"
            "  ROOT r = (s32[6], f32[6,5]) tuple(ix, e)")
    compiled = run_and_compare(fm(["f32[6,5]"], body, "(s32[6], f32[6,5])", extra), exact=False,
                               reduction_length=5)
    assert compiled.tiling_reason.startswith("tile analysis: ")


def test_bf16_softmax_compiles_as_one_multi_output_fusion():
    from pathlib import Path

    from triton_backend import compile_hlo
    text = (Path(__file__).parents[1] / "data" / "hlo" / "bf16_softmax.before.hlo").read_text()
    compiled = compile_hlo(text)
    assert compiled.fusion_mode == "fused", compiled.fusion_fallbacks
    assert compiled.fusion_fallbacks == ()


def test_multi_output_of_unrelated_shapes_runs_over_a_flat_space():
    # Neither output is a reduce of the other: one kernel over the flat [12] space
    # (tests/triton_backend/test_multi_output_shapes.py has XLA's forms).
    body = ("  a = f32[3,4] negate(p0)\n  b = f32[12] reshape(p0)\n"
            "  ROOT t = (f32[3,4], f32[12]) tuple(a, b)")
    compiled = run_and_compare(fm(["f32[3,4]"], body, "(f32[3,4], f32[12])"), exact=True)
    assert len(compiled.tile_sizes) == 1


def test_tiling_comes_from_the_tile_analysis_or_falls_back_with_the_reason():
    loop = parse_hlo(fm(["f32[64,300]"], "  ROOT r = f32[64,300] exponential(p0)", "f32[64,300]"))
    compiled = compile_fusion(loop, "fusion")
    assert compiled.tiling_reason.startswith("tile analysis: ")
    assert "coalesce" in compiled.tiling_reason
    body = ("  c = f32[] constant(0)\n"
            "  ROOT r = f32[4,11] reduce-window(p0, c), window={size=1x11 pad=0_0x10_0}, to_apply=add")
    windowed = parse_hlo(fm(["f32[4,11]"], body, "f32[4,11]", reducers("f32")))
    compiled = compile_fusion(windowed, "fusion")
    assert compiled.tiling_reason.startswith("tile analysis") or \
        compiled.tiling_reason.startswith("default tile sizes (the tile analysis refused: ")


# --- GPU kernels' tl.reduce, run here under the interpreter ---------------------------------
# Kernels rendered for a GPU reduce with tl.reduce (the interpreter's own kernels reduce by
# halving steps); a row reduction reduces along the tile's axis it is broadcast over.

@pytest.mark.parametrize("dtype", ["f32", "bf16"])
@pytest.mark.parametrize("tiles,chunk,n", [(None, None, 100), ((2, 100), None, 100),
                                           ((2, 32), 16, 50)])
def test_gpu_softmax_reduces_along_the_row_tile_axis(dtype, tiles, chunk, n):
    # Looped, rows of 50: tiles of 32 and chunks of 16 each end partly past the row.
    text = fm([f"{dtype}[3,{n}]"], SOFTMAX.replace("3,100", f"3,{n}").format(t=dtype),
              f"{dtype}[3,{n}]", reducers(dtype))
    compiled = run_and_compare(text, exact=False, reduction_length=n, tile_sizes=tiles,
                               reduction_chunk=chunk, target="cuda:90")
    if chunk is None:
        # The row is one tile: the max and the sum reduce along the tile's own axis, so the
        # row is loaded once and exp(x - max) computed once (Triton's softmax tutorial).
        assert "tl.permute" not in compiled.source
        assert compiled.source.count("tl.load(") == 1
        assert compiled.source.count("xla_math.exp(") == 1
    else:
        # [rows, 1, R] permuted to [rows, R, 1] and reduced along axis 1, the row tile's axis.
        assert "tl.permute(m_in, (0, 2, 1))" in compiled.source
    assert re.search(r", 1, combine_v_max(_plain)?, keep_dims=True\)", compiled.source)


@pytest.mark.parametrize("dims", ["{0}", "{1}", "{0,2}", "{2}"])
def test_gpu_reduce_of_any_dims(dims):
    # 3 x 11 x 21: the tiles of 5 x 19 x 21 (several programs over the kept dims, the last
    # tile partly past them), fewer of them (the interpreter folds a tl.reduce lane by lane).
    kept = [k for k in range(3) if str(k) not in dims]
    out = f"f32[{','.join(str([3, 11, 21][k]) for k in kept)}]"
    body = f"  c = f32[] constant(3)\n  ROOT r = {out} reduce(p0, c), dimensions={dims}, to_apply=add"
    text = fm(["f32[3,11,21]"], body, out, reducers("f32"))
    length = 3 * 21 if dims == "{0,2}" else 21
    compiled = run_and_compare(text, exact=False, reduction_length=length, target="cuda:90")
    # A reduce-only kernel's operand spans every kept axis: no broadcast axis to reduce along.
    assert "tl.permute" not in compiled.source


def test_gpu_layernorm_and_argmax():
    run_and_compare(layernorm(100), exact=False, reduction_length=100, tile_sizes=(2, 100),
                    target="cuda:90")
    argmax = ("  io = s32[4,37] iota(), iota_dimension=1\n  ninf = f32[] constant(-inf)\n"
              "  z = s32[] constant(0)\n"
              "  ROOT am = (f32[4], s32[4]) reduce(p0, io, ninf, z), dimensions={1}, to_apply=argmax")
    compiled = run_and_compare(fm(["f32[4,37]"], argmax, "(f32[4], s32[4])", ARGMAX),
                               exact=True, target="cuda:90")
    # Not commutative (NaNs, ties): halving steps, which combine (lower, higher) in order.
    assert "tl.reduce" not in compiled.source and "tl.split(tl.reshape(" in compiled.source


def test_gpu_argmax_of_two_nans_is_the_first():
    body = ("  io = s32[2,16] iota(), iota_dimension=1\n  ninf = f32[] constant(-inf)\n"
            "  z = s32[] constant(0)\n"
            "  ROOT am = (f32[2], s32[2]) reduce(p0, io, ninf, z), dimensions={1}, to_apply=argmax")
    x = np.zeros((2, 16), np.float32)
    x[0, [5, 6]] = [np.nan, -np.nan]
    x[1, [3, 9, 12]] = [7, np.nan, np.nan]
    run_and_compare(fm(["f32[2,16]"], body, "(f32[2], s32[2])", ARGMAX), exact=True,
                    arrays=[x], target="cuda:90")
