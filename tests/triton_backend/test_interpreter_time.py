"""Kernels meant for the Triton interpreter are shaped for it (issue 15: a row-and-column
reduction took over 5 minutes, an odd column reduction over 3): reductions are halving steps,
not ``tl.reduce`` (whose interpreter calls the combiner once per element in Python), and the
tiling aims at the interpreter's block size without the GPU's goal of a block per SM.  No
wall-clock here: program counts, loop trip counts and the emitted reduction form."""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

from fusion.text.parser import parse_hlo
from tests.triton_backend.fusion_check import ARGMAX, run_and_compare
from tests.triton_backend.fusion_check import single_fusion_module as fm
from triton_backend.driver.compiled_fusion import INTERPRETER_TILE_ELEMENTS, compile_fusion
from triton_backend.runtime.launch_mode import runs_on_interpreter

ADD = "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT r = f32[] add(a, b)\n}\n"
MAX = ("max {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
       "  ROOT r = f32[] maximum(a, b)\n}\n")


def reduce_module(dims, reduced, reducer="add", init="0"):
    kept = [n for k, n in enumerate(dims) if k not in reduced]
    out = f"f32[{','.join(map(str, kept))}]"
    body = (f"  z = f32[] constant({init})\n  ROOT r = {out} reduce(p0, z), "
            f"dimensions={{{','.join(map(str, reduced))}}}, to_apply={reducer}")
    return fm([f"f32[{','.join(map(str, dims))}]"], body, out, ADD + MAX)


def loop_trips(source: str) -> int:
    """Iterations of the kernel's reduction loops, nested ones multiplied."""
    trips = 1
    for start, stop, step in re.findall(r"for \w+ in range\((\d+), (\d+), (\d+)\):", source):
        trips *= -(-(int(stop) - int(start)) // int(step))
    return trips


pytestmark = pytest.mark.skipif(not runs_on_interpreter(), reason="kernels run on a GPU here")


def test_row_and_column_reduction_is_one_program_of_one_loop_trip():
    compiled = compile_fusion(parse_hlo(reduce_module((1000, 1000), (0, 1))), "fusion")
    assert compiled.grid == (1,)
    assert loop_trips(compiled.source) == 1
    assert "tl.reduce(" not in compiled.source
    # Each 1024-lane axis is halved 10 times (value and validity flag each split).
    assert compiled.source.count("tl.split(") == 2 * 2 * 10


@pytest.mark.parametrize("reduced", [(0,), (1,)])
def test_odd_sized_reductions_take_few_programs(reduced):
    compiled = compile_fusion(parse_hlo(reduce_module((999, 1001), reduced)), "fusion")
    programs = math.prod(compiled.grid)
    # The padded input (1024 x 1024 lanes) in blocks of the interpreter's size.
    assert programs <= 2 * 1024 * 1024 // INTERPRETER_TILE_ELEMENTS
    assert "tl.reduce(" not in compiled.source


def test_a_gpu_target_keeps_tl_reduce_and_gpu_blocks():
    text = reduce_module((999, 1001), (1,))
    gpu = compile_fusion(parse_hlo(text), "fusion", target="sm_90")
    interpreted = compile_fusion(parse_hlo(text), "fusion")
    assert "tl.reduce(" in gpu.source and "tl.split(" not in gpu.source
    # The GPU tiling gives every SM a block; the interpreter's takes far fewer programs.
    assert math.prod(gpu.grid) >= 132 > 16 >= math.prod(interpreted.grid)


@pytest.mark.parametrize("dims,reduced", [((37, 23), (1,)), ((37, 23), (0,)), ((5, 6, 7), (0, 2))])
def test_halving_steps_match_the_evaluator(dims, reduced):
    compiled = run_and_compare(reduce_module(dims, reduced), exact=False,
                               reduction_length=math.prod(dims[k] for k in reduced))
    assert "tl.split(" in compiled.source


def test_variadic_argmax_by_halving_steps_keeps_the_first_maximum():
    body = ("  io = s32[6,45] iota(), iota_dimension=1\n  ninf = f32[] constant(-inf)\n"
            "  z = s32[] constant(0)\n"
            "  ROOT am = (f32[6], s32[6]) reduce(p0, io, ninf, z), dimensions={1}, to_apply=argmax")
    text = fm(["f32[6,45]"], body, "(f32[6], s32[6])", ARGMAX)
    ties = np.random.default_rng(0).integers(0, 3, (6, 45)).astype(np.float32)
    compiled = run_and_compare(text, exact=True, arrays=[ties])
    assert "tl.reduce(" not in compiled.source


def test_looped_reduction_by_halving_steps():
    compiled = run_and_compare(reduce_module((3, 100), (1,), "max", "-inf"), exact=True,
                               reduction_chunk=16)
    assert loop_trips(compiled.source) == -(-100 // 16)


DOT = """HloModule dot
f {
  a = bf16[512,768] parameter(0)
  b = bf16[768,640] parameter(1)
  ROOT d = f32[512,640] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
ENTRY e {
  x = bf16[512,768] parameter(0)
  y = bf16[768,640] parameter(1)
  ROOT fusion = f32[512,640] fusion(x, y), kind=kCustom, calls=f
}"""


def _k_steps(source: str) -> int:
    """K steps per program: of ``range(0, K, STEP)``, or a split-K slice's
    ``range(pid_k * S, pid_k * S + S, STEP)``."""
    (k, sliced, step), = re.findall(
        r"for \w+ in range\((?:0|\w+ \* \d+), (\d+|\w+ \* \d+ \+ (\d+)), (\d+)\)", source)
    return -(-int(sliced or k) // int(step))


def test_dot_takes_the_largest_tiles_under_the_interpreter():
    gpu = compile_fusion(parse_hlo(DOT), "fusion", target="sm_90")
    interpreted = compile_fusion(parse_hlo(DOT), "fusion")
    assert gpu.kind == interpreted.kind == "dot"
    # On sm_90 the 20 tiles of 128x128 leave SMs idle: BLOCK_M halves (40 tiles), then K
    # splits in 3 slices (``default_split_k``).
    assert (gpu.tile_sizes, interpreted.tile_sizes) == ((64, 128, 64, 3), (256, 256, 128))
    # Programs times K steps: 8 x 5 tiles x 3 slices of 4 steps on a GPU, 2 x 3 tiles of 6
    # here: the same work, in fewer and larger programs under the interpreter.
    assert math.prod(gpu.grid) * _k_steps(gpu.source) == 40 * 12
    assert math.prod(interpreted.grid) * _k_steps(interpreted.source) == 6 * 6


def test_attention_takes_the_largest_blocks_under_the_interpreter():
    from pathlib import Path

    from triton_backend import compile_hlo

    path = Path(__file__).parents[2] / "bench" / "programs" / "attention_causal_f32_4x8x512x64.hlo"
    (kernel,) = compile_hlo(path.read_text()).fusions.values()
    assert kernel.kind == "attention" and kernel.tile_sizes == (128, 128)
    assert math.prod(kernel.grid) == 4 * 32 and "tl.reduce(" not in kernel.source
