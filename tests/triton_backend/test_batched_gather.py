"""Gathers and scatters with batching dims (``jnp.take_along_axis`` with batch dims, vmapped
indexing in new jax) and variadic scatters: the kernel, the evaluator and XLA agree."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("jax")

from fusion.text.parser import parse_hlo  # noqa: E402
from tests.triton_backend.xla_three_way import compare_three_ways  # noqa: E402
from triton_backend.driver.op_coverage import uncovered_ops  # noqa: E402

ADD = "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n"
MAX = ("max {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
       "  ROOT s = f32[] maximum(a, b)\n}\n")

# What jax 0.10 lowers jnp.take_along_axis(x, idx, axis=1) to.
TAKE_ALONG_AXIS = """HloModule take_along_axis
ENTRY e {
  x = f32[2,5] parameter(0)
  i = s32[2,3] parameter(1)
  r = s32[2,3,1] reshape(i)
  ROOT g = f32[2,3] gather(x, r), offset_dims={}, collapsed_slice_dims={1}, start_index_map={1},
    operand_batching_dims={0}, start_indices_batching_dims={0}, index_vector_dim=2,
    slice_sizes={1,1}
}"""

# A batching dim in the middle of the operand, its partner first in the indices, next to
# offset (window) dims and a clamped start index.
MIDDLE_BATCH = """HloModule middle_batch
ENTRY e {
  x = f32[4,3,6] parameter(0)
  i = s32[3,2,1] parameter(1)
  ROOT g = f32[3,2,4,2] gather(x, i), offset_dims={2,3}, collapsed_slice_dims={},
    start_index_map={2}, operand_batching_dims={1}, start_indices_batching_dims={0},
    index_vector_dim=2, slice_sizes={4,1,2}
}"""


def scatter_module(combiner: str, name: str) -> str:
    # What jax lowers jax.vmap(lambda r, i, v: r.at[i].add(v)) to (index_vector_dim last).
    return (f"HloModule batched_scatter\n{combiner}ENTRY e {{\n  x = f32[3,5] parameter(0)\n"
            "  i = s32[3,2,1] parameter(1)\n  u = f32[3,2] parameter(2)\n"
            "  ROOT s = f32[3,5] scatter(x, i, u), update_window_dims={}, inserted_window_dims={1},"
            " scatter_dims_to_operand_dims={1}, input_batching_dims={0},"
            f" scatter_indices_batching_dims={{0}}, index_vector_dim=2, to_apply={name}\n}}")


VARIADIC = """HloModule variadic_scatter
argmax {
  a0 = f32[] parameter(0)
  a1 = s32[] parameter(1)
  b0 = f32[] parameter(2)
  b1 = s32[] parameter(3)
  gt = pred[] compare(b0, a0), direction=GT
  m = f32[] select(gt, b0, a0)
  i = s32[] select(gt, b1, a1)
  ROOT t = (f32[], s32[]) tuple(m, i)
}
ENTRY e {
  x = f32[6,3] parameter(0)
  xi = s32[6,3] parameter(1)
  idx = s32[4,1] parameter(2)
  u = f32[4,3] parameter(3)
  ui = s32[4,3] parameter(4)
  ROOT s = (f32[6,3], s32[6,3]) scatter(x, xi, idx, u, ui), update_window_dims={1},
    inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1,
    UNIQUE to_apply=argmax
}"""


def _floats(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def test_take_along_axis_with_batch_dims():
    rng = np.random.default_rng(0)
    compare_three_ways(TAKE_ALONG_AXIS, _floats(rng, 2, 5),
                       np.array([[4, 0, 2], [1, 1, 3]], np.int32))


def test_batching_dim_between_window_dims_and_clamped_starts():
    rng = np.random.default_rng(1)
    starts = np.array([[[0], [5]], [[3], [-2]], [[4], [1]]], np.int32)  # 5 and -2 are clamped
    compare_three_ways(MIDDLE_BATCH, _floats(rng, 4, 3, 6), starts)


def test_batched_gather_is_covered_by_the_kernel_path():
    assert uncovered_ops(parse_hlo(TAKE_ALONG_AXIS)) == []


@pytest.mark.parametrize("combiner,name", [(ADD, "add"), (MAX, "max")])
def test_vmapped_scatter_with_batch_dims(combiner, name):
    rng = np.random.default_rng(2)
    indices = np.array([[[1], [1]], [[0], [4]], [[2], [7]]], np.int32)  # 7: out of bounds, skipped
    compiled = compare_three_ways(scatter_module(combiner, name), _floats(rng, 3, 5), indices,
                                  _floats(rng, 3, 2))
    assert [f.kind for f in compiled.fusions.values()] == ["scatter"]


@pytest.mark.parametrize("unique", [False, True])
def test_variadic_scatter_combines_pairs_in_one_kernel(unique):
    rng = np.random.default_rng(3)
    rows = [[1], [4], [0], [2]] if unique else [[1], [4], [1], [7]]
    text = VARIADIC.replace("UNIQUE ", "unique_indices=true, " if unique else "")
    compiled = compare_three_ways(text, _floats(rng, 6, 3), np.arange(18, dtype=np.int32).reshape(6, 3),
                                  np.array(rows, np.int32), 3 * _floats(rng, 4, 3),
                                  100 + np.arange(12, dtype=np.int32).reshape(4, 3))
    (kernel,) = compiled.fusions.values()
    assert kernel.kind == "scatter"
    # Repeated rows are applied in order by one program; unique ones in parallel.
    assert "mode serial" in kernel.source if not unique else "mode parallel" in kernel.source
