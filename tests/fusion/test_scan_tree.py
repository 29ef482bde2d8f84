"""``rewrite_tree_scans``: long fp8 scans, and long scans from an init their reducer does not
absorb, become XLA:CPU's tree of 16-wide scans, with the same bits as the evaluator gives the
scan itself; everything else is left as it is."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from fusion.evaluator import evaluate
from fusion.shapes.verifier import verify_module
from fusion.text.parser import parse_hlo
from fusion.text.printer import print_hlo
from fusion.transforms.scan_tree import rewrite_tree_scans

# A non-associative reducer (the mean of the two, in f32) with a constant and conversions:
# any change of order or operand order changes its results.
MEAN = """mean {
  a = f8e4m3fn[] parameter(0)
  b = f8e4m3fn[] parameter(1)
  fa = f32[] convert(a)
  fb = f32[] convert(b)
  half = f32[] constant(0.5)
  d = f32[] subtract(fa, fb)
  s = f32[] add(fa, d)
  m = f32[] multiply(s, half)
  ROOT o = f8e4m3fn[] convert(m)
}
"""


def _scan_text(t: str, dims: tuple[int, int], out: tuple[int, int], window: str,
               reducer: str = "add", init: str = "0") -> str:
    add = (f"add {{\n  a = {t}[] parameter(0)\n  b = {t}[] parameter(1)\n"
           f"  ROOT s = {t}[] add(a, b)\n}}\n")
    return (f"HloModule m\n{add}{MEAN}ENTRY e {{\n  x = {t}[{dims[0]},{dims[1]}] parameter(0)\n"
            f"  z = {t}[] constant({init})\n  ROOT r = {t}[{out[0]},{out[1]}]{{0,1}} reduce-window(x, z), "
            f"window={window}, to_apply={reducer}\n}}\n")


@pytest.mark.parametrize("dims, out, window, reducer", [
    ((3, 40), (3, 40), "{size=1x40 pad=0_0x39_0}", "add"),
    ((300, 2), (300, 2), "{size=300x1 pad=0_299x0_0}", "add"),     # reverse, along dim 0
    ((2, 600), (2, 601), "{size=1x600 pad=0_0x600_0}", "add"),     # exclusive, two levels
    ((2, 300), (2, 301), "{size=1x300 pad=0_0x0_300}", "mean"),    # exclusive reverse
    ((50, 2), (50, 2), "{size=50x1 pad=49_0x0_0}", "mean"),
])
def test_the_tree_evaluates_as_the_scan(dims, out, window, reducer):
    module = parse_hlo(_scan_text("f8e4m3fn", dims, out, window, reducer))
    rewritten = rewrite_tree_scans(module)
    verify_module(rewritten)
    assert "reduce-window" in [i.opcode for i in rewritten.entry]
    assert all(i.attr("window").dims[k].size <= 16 for i in rewritten.entry
               if i.opcode == "reduce-window" for k in range(2))
    root = rewritten.entry.root
    assert (root.name, root.shape) == ("r", module.entry.root.shape)
    x = (np.random.default_rng(0).standard_normal(dims) * 3).astype(ml_dtypes.float8_e4m3fn)
    (want,) = evaluate(module, x)
    (got,) = evaluate(parse_hlo(print_hlo(rewritten)), x)
    assert np.array_equal(np.asarray(got).view(np.uint8), np.asarray(want).view(np.uint8))
    assert rewrite_tree_scans(rewritten) is rewritten


@pytest.mark.parametrize("t", ["f32", "s32"])
def test_a_sum_from_an_init_it_does_not_absorb_takes_the_tree(t):
    # A sum from 3 adds 3 once per padding position of its window: XLA's tree counts them
    # another way, which the kernels must then compute too.
    module = parse_hlo(_scan_text(t, (3, 40), (3, 40), "{size=1x40 pad=0_0x39_0}", init="3"))
    rewritten = rewrite_tree_scans(module)
    assert rewritten is not module and rewrite_tree_scans(rewritten) is rewritten
    x = np.random.default_rng(0).standard_normal((3, 40)).astype(t.replace("f", "float")
                                                                    .replace("s", "int"))
    (want,) = evaluate(module, x)
    (got,) = evaluate(parse_hlo(print_hlo(rewritten)), x)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("t, dims, out, window", [
    ("bf16", (3, 40), (3, 40), "{size=1x40 pad=0_0x39_0}"),          # not fp8
    ("f8e4m3fn", (3, 16), (3, 16), "{size=1x16 pad=0_0x15_0}"),      # not longer than 16
    ("f8e4m3fn", (3, 40), (3, 20), "{size=1x40 stride=1x2 pad=0_0x39_0}"),  # strided
    ("f8e4m3fn", (3, 40), (3, 41), "{size=1x40 pad=0_0x20_20}"),     # padded both ends
    ("f8e4m3fn", (4, 40), (2, 40), "{size=3x40 pad=0_0x39_0}"),      # two window dims
])
def test_other_windows_are_left_alone(t, dims, out, window):
    module = parse_hlo(_scan_text(t, dims, out, window))
    assert rewrite_tree_scans(module) is module
