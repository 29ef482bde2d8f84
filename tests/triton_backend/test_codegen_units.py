"""Unit checks of the code generator: index arithmetic, tile choice, the kernel file itself
(comments, standalone ``__main__``), and compilation of generated kernels for sm_90."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion.text.parser import parse_hlo
from tests.triton_backend.fusion_check import single_fusion_module as fm
from tests.triton_backend.target_compiles import compile_on_targets
from tiling.maps.affine_expr import d, s
from triton_backend.reports.compile_child import child_environment
from triton_backend.lowering.emitter.index_arithmetic import render_affine
from tiling.policy.choice import default_tile_sizes
from tiling.symbolic.tiled_fusion import next_power_of_two
from triton_backend.lowering.kernel_plan import plan_kernel
from triton_backend.driver.compiled_fusion import compile_fusion
from triton_backend.reports.ptx_report import find_ptxas

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _exprs():
    leaf = st.one_of(st.integers(0, 2).map(d), st.integers(0, 1).map(s), st.integers(0, 9))
    def grow(inner):
        return st.one_of(
            st.tuples(inner, inner).map(lambda p: p[0] + p[1]),
            st.tuples(inner, st.integers(1, 5)).map(lambda p: p[0] * p[1]),
            st.tuples(inner, st.integers(1, 7)).map(lambda p: p[0] // p[1]),
            st.tuples(inner, st.integers(1, 7)).map(lambda p: p[0] % p[1]),
        )
    return st.recursive(leaf, grow, max_leaves=8)


@settings(max_examples=100, deadline=None)
@given(_exprs(), st.lists(st.integers(0, 50), min_size=3, max_size=3),
       st.lists(st.integers(0, 50), min_size=2, max_size=2))
def test_rendered_index_arithmetic_evaluates_like_the_affine_expr(expr, dims, symbols):
    from tiling.maps.affine_expr import as_expr
    expr = as_expr(expr)
    text = render_affine(expr, ["x0", "x1", "x2"], ["y0", "y1"])
    env = {f"x{i}": v for i, v in enumerate(dims)} | {f"y{j}": v for j, v in enumerate(symbols)}
    # Non-negative dims and symbols with positive multipliers: Python and MLIR floordiv agree.
    assert eval(text, {}, env) == expr.evaluate(dims, symbols)


def test_tile_sizes_are_powers_of_two_within_budget():
    for dims in [(5,), (3, 5), (7, 300, 2), (1, 1), (1000,)]:
        tiles = default_tile_sizes(dims, 256)
        assert all(t == next_power_of_two(t) for t in tiles)
        assert 1 <= __import__("math").prod(tiles) <= 256


def test_plan_gives_each_reduce_its_own_axes():
    extra = "add { a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT r = f32[] add(a, b) }"
    body = ("  z = f32[] constant(0)\n  x = f32[5] reduce(p0, z), dimensions={1,2}, to_apply=add\n"
            "  y = f32[5] reduce(p0, z), dimensions={2,1}, to_apply=add\n  ROOT r = f32[5] add(x, y)")
    module = parse_hlo(fm(["f32[5,3,6]"], body, "f32[5]", extra))
    plan = plan_kernel(module.computation("f"), (5,))
    assert plan.axis_blocks[1:] == (4, 8, 8, 4)
    assert sorted(a for _, axes in plan.reduce_axes for a in axes) == [1, 2, 3, 4]


def test_kernel_file_quotes_hlo_safely_and_runs_standalone(tmp_path):
    text = fm(["f32[3,5]"], "  ROOT r = f32[3,5] negate(p0), metadata={op_name=\"x\u2028import os\"}", "f32[3,5]")
    compiled = compile_fusion(parse_hlo(text), "fusion")
    source = compiled.source
    assert "# f {" in source and "operand reads" in source and "p0 at (d0, d1)" in source
    compile(source, "kernel.py", "exec")  # the HLO text cannot escape its comments
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=ROOT)
    result = subprocess.run([sys.executable, str(compiled.kernel_path)], capture_output=True,
                            text=True, env=env, timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("output0 torch.float32 [3, 5]")


# A process without the interpreter (a GPU build of the kernel file) given CPU tensors runs the
# kernel through its interpreted copy (``kernel_loading``), rather than failing to launch.
CPU_TENSORS_CHILD = r"""
import sys
sys.path.insert(0, sys.argv[1])
from fusion.text.parser import parse_hlo
from triton_backend.driver.compiled_fusion import compile_fusion
compiled = compile_fusion(parse_hlo(sys.argv[2]), "fusion", target="cuda:90")
x, y = compiled.module.example_inputs()
assert (compiled(x, y)[0] == x * y).all()
# helpers beyond xla_math (the network's), and float8's, which xla_math imports by name
import numpy as np, torch
from fusion import evaluate
for text in sys.argv[3:]:
    module = parse_hlo(text)
    x = np.random.default_rng(0).integers(-9, 10, (3, 37)).astype(np.float32)
    got = compile_fusion(module, "fusion", target="cuda:90")(torch.from_numpy(x))
    for g, w in zip(got, evaluate(module, x)):
        assert np.array_equal(g.numpy(), np.asarray(w)), (text, g, w)
print("OK")
"""

ADD = "add { a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT r = f32[] add(a, b) }"


MULTIPLY = fm(["f32[37,45]", "f32[45]"], "  b = f32[37,45] broadcast(p1), dimensions={1}\n"
             "  ROOT r = f32[37,45] multiply(p0, b)", "f32[37,45]")


@pytest.mark.skipif(find_ptxas(90) is None, reason="ptxas not found in the Triton wheel")
def test_generated_kernels_compile_for_sm90_without_spills():
    programs = [
        MULTIPLY,
        fm(["f32[33,100]", "f32[]"], "  ROOT r = f32[33] reduce(p0, p1), dimensions={1}, to_apply=add",
           "f32[33]", ADD),
    ]
    compiled = [compile_fusion(parse_hlo(text), "fusion", target="cuda:90") for text in programs]
    for report in compile_on_targets([(c.kernel_path, 90) for c in compiled]):
        assert report["registers"] > 0 and report["spills"] == 0, report


#: A sort by magnitude: the comparator network, whose kernel imports ``sorting_network``.
NETWORK_SORT = """HloModule m
cmp {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  ma = f32[] abs(a)
  mb = f32[] abs(b)
  ROOT c = pred[] compare(ma, mb), direction=LT
}
f {
  p = f32[3,37] parameter(0)
  y = s32[3,37] iota(), iota_dimension=1
  ROOT s = (f32[3,37], s32[3,37]) sort(p, y), dimensions={1}, to_apply=cmp
}
ENTRY e {
  x = f32[3,37] parameter(0)
  ROOT fusion = (f32[3,37], s32[3,37]) fusion(x), kind=kLoop, calls=f
}
"""

FLOAT8_ROUND_TRIP = fm(["f32[3,37]"], "  n = f8e4m3fnuz[3,37] convert(p0)\n"
                       "  ROOT r = f32[3,37] convert(n)", "f32[3,37]")


def test_cpu_tensors_run_through_the_interpreted_copy_without_the_interpreter():
    env = child_environment()
    result = subprocess.run([sys.executable, "-c", CPU_TENSORS_CHILD, ROOT, MULTIPLY,
                             NETWORK_SORT, FLOAT8_ROUND_TRIP],
                            capture_output=True, text=True, env=env, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().splitlines()[-1] == "OK"


def test_xla_launch_options_come_with_xla_tiling():
    # block_level_fusion_config carries num_warps/num_stages chosen for XLA's own tile: they are
    # used when that tiling is, and the plan's rule decides otherwise.
    import json

    from fusion.text.parser import parse_hlo
    from triton_backend.driver.compiled_fusion import compile_fusion

    config = json.dumps({"fusion_backend_config": {"kind": "__triton", "block_level_fusion_config": {
        "output_tiles": [{"sizes": ["2", "128"]}], "num_warps": "2", "num_stages": 1}}})
    module = parse_hlo(f"""HloModule m
fused {{
  p = f32[8,256] parameter(0)
  ROOT e = f32[8,256] exponential(p)
}}
ENTRY e {{
  x = f32[8,256] parameter(0)
  ROOT f = f32[8,256] fusion(x), kind=kCustom, calls=fused, backend_config='{config}'
}}""")
    honored = compile_fusion(module, "f")
    assert honored.tile_sizes == (2, 128) and "XLA" in honored.tiling_reason
    assert "NUM_WARPS = 2\nNUM_STAGES = 1" in honored.source
    ours = compile_fusion(module, "f", tile_sizes=(4, 256))
    assert "NUM_WARPS = 2\nNUM_STAGES = 1" not in ours.source
