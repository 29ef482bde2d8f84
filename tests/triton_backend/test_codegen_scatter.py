"""Scatter fusions (atomic, parallel and serialized combining; window, inserted and batching
dims; out-of-bounds windows skipped) and 64-bit offsets, in the Triton interpreter against
the reference evaluator."""
from __future__ import annotations

import numpy as np
import pytest

from fusion.analysis.emitter_kind import EmitterKind
from fusion.text.parser import parse_hlo
from tests.triton_backend.fusion_check import random_array, run_and_compare
from tests.triton_backend.fusion_check import single_fusion_module as fm

COMBINERS = """add { a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT r = {t}[] add(a, b) }
mul { a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT r = {t}[] multiply(a, b) }
assign { a = {t}[] parameter(0)
  ROOT b = {t}[] parameter(1) }
"""

ROWS = ("update_window_dims={{1}}, inserted_window_dims={{0}}, scatter_dims_to_operand_dims={{0}}, "
        "index_vector_dim=1")


def _scatter_text(t, operand, indices, updates, dims, combiner, extra=""):
    body = (f"  ROOT s = {t}[{operand}] scatter(p0, p1, p2), {dims.format()}, "
            f"to_apply={combiner}{extra}")
    return fm([f"{t}[{operand}]", f"s32[{indices}]", f"{t}[{updates}]"], body, f"{t}[{operand}]",
              COMBINERS.replace("{t}", t))


def _arrays(text, low, high, seed=0):
    module = parse_hlo(text)
    rng = np.random.default_rng(seed)
    shapes = [p.shape for p in module.computation("f").parameters]
    arrays = [random_array(s, rng) for s in shapes]
    arrays[1] = rng.integers(low, high, shapes[1].dims).astype(np.int32)
    return arrays


@pytest.mark.parametrize("t,combiner,mode", [
    ("f32", "add", "atomic"), ("s32", "add", "atomic"), ("bf16", "add", "serial"),
    ("f32", "mul", "serial"), ("s32", "assign", "serial"),
])
def test_scatter_rows_with_repeated_and_out_of_bounds_indices(t, combiner, mode):
    text = _scatter_text(t, "7,5", "9,1", "9,5", ROWS, combiner)
    arrays = _arrays(text, -2, 9)  # repeats, and starts below 0 / past the end: skipped
    compiled = run_and_compare(text, exact=t == "s32" or combiner == "assign", arrays=arrays,
                               reduction_length=9)
    assert compiled.kind == "scatter" and f"({mode})" in compiled.tiling_reason


def test_scatter_unique_indices_runs_in_parallel():
    text = _scatter_text("f32", "7,5", "4,1", "4,5", ROWS, "assign", ", unique_indices=true")
    arrays = _arrays(text, 0, 1)
    arrays[1] = np.array([[5], [0], [3], [6]], np.int32)
    compiled = run_and_compare(text, exact=True, arrays=arrays)
    assert "(parallel)" in compiled.tiling_reason


def test_scatter_windows_partly_out_of_bounds_are_skipped_whole():
    # 2-D starts, window 2x3 into a 6x7 operand; starts near the edges exercise the skip rule.
    dims = ("update_window_dims={{1,2}}, inserted_window_dims={{}}, "
            "scatter_dims_to_operand_dims={{1,0}}, index_vector_dim=1")
    text = _scatter_text("f32", "6,7", "5,2", "5,2,3", dims, "add")
    arrays = _arrays(text, -1, 7, seed=4)
    run_and_compare(text, exact=False, arrays=arrays, reduction_length=5)


def test_scatter_with_batching_dims():
    # (The reference evaluator cannot do an empty update window, hence the window of 2.)
    dims = ("update_window_dims={{2}}, inserted_window_dims={{1}}, input_batching_dims={{0}}, "
            "scatter_indices_batching_dims={{0}}, scatter_dims_to_operand_dims={{1}}, "
            "index_vector_dim=2")
    text = _scatter_text("f32", "3,5,2", "3,4,1", "3,4,2", dims, "add")
    run_and_compare(text, exact=False, arrays=_arrays(text, 0, 5, seed=2), reduction_length=4)


def test_scatter_updates_computed_inside_the_fusion_and_explicit_tiles():
    body = ("  e = f32[9,5] exponential(p2)\n"
            f"  ROOT s = f32[7,5] scatter(p0, p1, e), {ROWS.format()}, to_apply=mul")
    text = fm(["f32[7,5]", "s32[9,1]", "f32[9,5]"], body, "f32[7,5]", COMBINERS.replace("{t}", "f32"))
    compiled = run_and_compare(text, exact=False, arrays=_arrays(text, 0, 7), tile_sizes=(1, 2),
                               reduction_length=9)
    assert compiled.tile_sizes == (1, 2)


def test_sixty_four_bit_offsets_for_huge_buffers_and_forced_on_small_ones():
    from fusion.evaluator import evaluate
    from tests.triton_backend.fusion_check import fusion_module, to_torch
    from triton_backend.lowering.kernel_file import render_kernel_file
    from triton_backend.driver.compiled_fusion import CompiledFusion, load_kernel

    huge = parse_hlo(fm(["f32[3,1073741824]"], "  ROOT r = f32[3,1073741824] negate(p0)",
                        "f32[3,1073741824]"))
    instr = next(i for _, i in huge.fusions())
    rendered = render_kernel_file(huge, instr, (1, 1024))
    assert rendered.plan.index_bits == 64 and ".to(tl.int64)" in rendered.source
    small_text = fm(["f32[5,7]", "s32[]"], "  ROOT r = f32[3,7] dynamic-slice(p0, p1, p1), "
                    "dynamic_slice_sizes={3,7}", "f32[3,7]")
    small = parse_hlo(small_text)
    instr = next(i for _, i in small.fusions())
    assert render_kernel_file(small, instr).plan.index_bits == 32
    rendered = render_kernel_file(small, instr, (2, 4), index_bits=64)
    loaded, path = load_kernel(small, instr, rendered.source, "int64", None, None)
    compiled = CompiledFusion("fusion", EmitterKind.LOOP, path, rendered.source, rendered.plan.grid,
                              rendered.plan.tile_sizes, loaded)
    x = np.arange(35, dtype=np.float32).reshape(5, 7)
    start = np.array(1, np.int32)
    got = compiled(to_torch(x, "f32"), to_torch(start, "s32"))[0].numpy()
    np.testing.assert_array_equal(got, evaluate(fusion_module(small, "fusion"), x, start)[0])
