"""``select-and-scatter`` (max-pool gradients): the gather-style kernel, the evaluator and XLA
agree on strides, overlapping windows, padding, dilation-free windows with ties, another
select (min pool) and another scatter (max); the kernel is deterministic and covered."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("jax")

from fusion.text.parser import parse_hlo  # noqa: E402
from tests.triton_backend.xla_three_way import compare_three_ways  # noqa: E402
from tiling import output_to_input_indexing  # noqa: E402
from triton_backend.driver.op_coverage import COVERAGE, uncovered_ops  # noqa: E402
from triton_backend.templates.select_and_scatter.kernel import (  # noqa: E402
    MAX_WINDOW_ELEMENTS,
)

COMPUTATIONS = """ge {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=GE
}
le {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=LE
}
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] maximum(a, b)
}
"""


def module(operand, source, window, select="ge", scatter="add"):
    dims = lambda s: ",".join(map(str, s))  # noqa: E731
    return (f"HloModule select_and_scatter\n{COMPUTATIONS}ENTRY e {{\n"
            f"  x = f32[{dims(operand)}] parameter(0)\n  s = f32[{dims(source)}] parameter(1)\n"
            f"  z = f32[] parameter(2)\n  ROOT r = f32[{dims(operand)}] select-and-scatter(x, s, z),"
            f" window={{{window}}}, select={select}, scatter={scatter}\n}}")


CASES = {
    # jax.grad of a 2x2 stride-2 max pool (NHWC): disjoint windows
    "pool2_stride2": ((1, 4, 6, 2), (1, 2, 3, 2), "size=1x2x2x1 stride=1x2x2x1"),
    # 3x3 stride 1 with SAME padding: each element in up to 9 windows, padding never picked
    "pool3_same": ((2, 5, 4, 1), (2, 5, 4, 1), "size=1x3x3x1 pad=0_0x1_1x1_1x0_0"),
    # 3x3 stride 2, asymmetric padding, odd sizes
    "pool3_stride2": ((1, 7, 6, 3), (1, 4, 3, 3), "size=1x3x3x1 stride=1x2x2x1 pad=0_0x1_1x1_0x0_0"),
    # 1-D, windows wider than the stride
    "rank1": ((9,), (4,), "size=3 stride=2"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_max_pool_gradient_against_xla(name):
    operand, source, window = CASES[name]
    rng = np.random.default_rng(0)
    x = rng.integers(0, 3, operand).astype(np.float32)  # many ties: the first max is picked
    s = rng.standard_normal(source).astype(np.float32)
    compiled = compare_three_ways(module(operand, source, window), x, s, np.float32(0.5))
    (kernel,) = compiled.fusions.values()
    assert kernel.kind == "select_and_scatter"


@pytest.mark.parametrize("select,scatter", [("le", "add"), ("ge", "max")])
def test_other_select_and_scatter_computations(select, scatter):
    operand, source, window = CASES["pool3_same"]
    rng = np.random.default_rng(1)
    x = rng.standard_normal(operand).astype(np.float32)
    x[0, 1, 1, 0] = np.nan  # GE and LE are false against NaN: the candidate is taken
    s = rng.standard_normal(source).astype(np.float32)
    compare_three_ways(module(operand, source, window, select, scatter), x, s, np.float32(-1))


def test_kernel_is_deterministic_and_one_program_per_block():
    from triton_backend import compile_hlo
    import torch

    operand, source, window = CASES["pool3_stride2"]
    compiled = compile_hlo(module(operand, source, window))
    (kernel,) = compiled.fusions.values()
    elements = int(np.prod(operand))
    assert kernel.grid == (-(-elements // kernel.tile_sizes[0]),)
    rng = np.random.default_rng(2)
    args = [torch.from_numpy(rng.standard_normal(operand).astype(np.float32)),
            torch.from_numpy(rng.standard_normal(source).astype(np.float32)), torch.tensor(0.0)]
    first, second = compiled(*args)[0], compiled(*args)[0]
    assert torch.equal(first, second)
    assert "atomic" not in kernel.source


def test_coverage_and_limits():
    assert COVERAGE["select-and-scatter"].covered
    operand, source, window = CASES["pool2_stride2"]
    assert uncovered_ops(parse_hlo(module(operand, source, window))) == []
    wide = MAX_WINDOW_ELEMENTS + 1
    too_wide = module((1, wide), (1, 1), f"size=1x{wide} stride=1x1")
    (reason,) = [u.reason for u in uncovered_ops(parse_hlo(too_wide))]
    assert f"window of {wide} positions" in reason


def test_indexing_maps_are_undefined_for_operand_and_source():
    # As in XLA: which operand element a source element lands on depends on the data.
    operand, source, window = CASES["pool2_stride2"]
    m = parse_hlo(module(operand, source, window))
    maps = output_to_input_indexing(m.entry.root, m)
    assert [all(x.is_undefined for x in ms) for ms in maps[:2]] == [True, True]
