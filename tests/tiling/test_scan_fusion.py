"""Scans in the fusion pass: a reduce-window that is a scan along its tile
(``tiling.policy.tile_scans``) fuses with elementwise work before and after it, as a
reduction takes its producers and epilogue; read any other way, beside a reduce, twice or
from an init its reducer does not absorb, it keeps a kernel of its own.  Fused modules
evaluate bit for bit as the unfused ones (their kernels against the evaluator:
``tests/triton_backend/test_tile_scans.py``)."""
from __future__ import annotations

import numpy as np

from fusion.evaluator import evaluate
from fusion.evaluator.npz_io import random_inputs
from fusion.shapes.verifier import verify_module
from fusion.text.parser import parse_hlo
from tiling.fusion_pass.priority_fusion import fuse_module
from tiling.fusion_pass.traffic_model import count_kernels, module_traffic

REDUCERS = """add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

max {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
"""


def module(body: str, init: str = "0", reducer: str = "add", n: int = 300) -> str:
    """``x: bf16[8, n]`` converted to f32 and scanned along dim 1 as ``cs``; ``body`` reads
    ``c`` (the f32 input) and ``cs``."""
    return (f"HloModule m\n\n{REDUCERS}\nENTRY e {{\n"
            f"  x = bf16[8,{n}] parameter(0)\n"
            f"  c = f32[8,{n}] convert(x)\n"
            f"  z = f32[] constant({init})\n"
            f"  cs = f32[8,{n}] reduce-window(c, z), window={{size=1x{n} pad=0_0x{n - 1}_0}}, "
            f"to_apply={reducer}\n{body}\n}}\n")


# cumsum(x) - x (the exclusive cumsum), rounded back to bf16: JAX's top-p mask reads its
# probabilities' cumsum so.
EPILOGUE = ("  d = f32[8,300] subtract(cs, c)\n"
            "  ROOT o = bf16[8,300] convert(d)")


def fused(text: str):
    result = fuse_module(parse_hlo(text))
    verify_module(result.module)
    return result


def reasons(result, producer: str) -> list[str]:
    return [d.reason for d in result.decisions if d.producer == producer and not d.fused]


def test_a_scan_takes_its_producer_and_its_elementwise_consumers():
    text = module(EPILOGUE)
    result = fused(text)
    assert count_kernels(result.module) == 1  # unfused: convert, scan, subtract + convert
    original = parse_hlo(text)
    assert module_traffic(result.module) == 8 * 300 * 2 * 2  # bf16 in, bf16 out: once each
    inputs = random_inputs(original, seed=3)
    assert all(np.array_equal(a, b) for a, b in
               zip(evaluate(original, *inputs), evaluate(result.module, *inputs)))


def test_a_scan_read_reversed_keeps_its_kernel():
    body = "  ROOT r = f32[8,300] reverse(cs), dimensions={1}"
    result = fused(module(body))
    assert count_kernels(result.module) == 2  # the convert fuses into the scan
    assert reasons(result, "cs") == ["no reduction epilogue: reverse r is no elementwise "
                                     "epilogue op"]


def test_a_scan_is_not_computed_again_for_a_second_consumer():
    body = ("  t = f32[300,8] transpose(cs), dimensions={1,0}\n"
            "  n = f32[8,300] negate(cs)\n"
            "  ROOT r = (f32[300,8], f32[8,300]) tuple(t, n)")
    result = fused(module(body))
    assert any("reduction cs would be computed 2 times" in r for r in reasons(result, "cs"))
    assert count_kernels(result.module) == 3


def test_a_scan_and_a_reduce_keep_their_own_kernels():
    body = "  ROOT s = f32[8] reduce(cs, z), dimensions={1}, to_apply=add"
    result = fused(module(body))
    assert any("would share a kernel with reduction" in r for r in reasons(result, "cs"))
    assert count_kernels(result.module) == 2


def test_a_scan_from_an_init_it_does_not_absorb_is_a_window_kernel():
    result = fused(module(EPILOGUE, init="3"))
    assert any("reduce-window is not fusible" in r for r in reasons(result, "cs"))
    assert count_kernels(result.module) == 3
