"""Property: for random chains of elementwise, broadcast, reshape, transpose and reduce ops,
the fused module evaluates to exactly the unfused module's values (bit for bit)."""
from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fusion.evaluator import evaluate
from fusion.evaluator.npz_io import random_inputs
from fusion.text.parser import parse_hlo
from fusion.text.printer import print_hlo
from fusion.shapes.verifier import verify_module
from tiling.fusion_pass.traffic_model import count_kernels
from tiling.fusion_pass.priority_fusion import fuse_module

UNARY = ("abs", "exponential", "negate", "sine", "tanh")
BINARY = ("add", "divide", "maximum", "multiply", "subtract")
HEADER = """HloModule random
sum {
  sa = f32[] parameter(0)
  sb = f32[] parameter(1)
  ROOT ss = f32[] add(sa, sb)
}
"""


def _shape(dims) -> str:
    return "f32[" + ",".join(map(str, dims)) + "]"


@st.composite
def chains(draw):
    lines = ["  x0 = f32[2,3] parameter(0)", "  x1 = f32[3] parameter(1)"]
    pool: list[tuple[str, tuple[int, ...]]] = [("x0", (2, 3)), ("x1", (3,))]
    for n in range(draw(st.integers(2, 9))):
        name = f"v{n}"
        src, dims = draw(st.sampled_from(pool))
        op = draw(st.sampled_from(("unary", "binary", "broadcast", "reshape", "transpose",
                                   "reduce")))
        if op == "unary":
            out = dims
            lines.append(f"  {name} = {_shape(out)} {draw(st.sampled_from(UNARY))}({src})")
        elif op == "binary":
            same = [p for p, d in pool if d == dims]
            other = draw(st.sampled_from(same))
            out = dims
            lines.append(f"  {name} = {_shape(out)} {draw(st.sampled_from(BINARY))}"
                         f"({src}, {other})")
        elif op == "broadcast" and len(dims) == 1:
            first = draw(st.booleans())
            out = (dims[0], 2) if first else (2, dims[0])
            lines.append(f"  {name} = {_shape(out)} broadcast({src}), "
                         f"dimensions={{{0 if first else 1}}}")
        elif op == "reshape":
            out = (dims[0] * dims[1],) if len(dims) == 2 else (
                (dims[0],) if dims[0] % 2 else (2, dims[0] // 2))
            lines.append(f"  {name} = {_shape(out)} reshape({src})")
        elif op == "transpose" and len(dims) == 2:
            out = (dims[1], dims[0])
            lines.append(f"  {name} = {_shape(out)} transpose({src}), dimensions={{1,0}}")
        elif op == "reduce" and len(dims) == 2:
            axis = draw(st.integers(0, 1))
            out = (dims[1 - axis],)
            lines.append(f"  z{n} = f32[] constant(0)")
            lines.append(f"  {name} = {_shape(out)} reduce({src}, z{n}), "
                         f"dimensions={{{axis}}}, to_apply=sum")
        else:
            out = dims
            lines.append(f"  {name} = {_shape(out)} negate({src})")
        pool.append((name, out))
    picks = draw(st.lists(st.sampled_from(pool[2:]), min_size=1, max_size=3, unique=True))
    shapes = ", ".join(_shape(d) for _, d in picks)
    lines.append(f"  ROOT out = ({shapes}) tuple({', '.join(p for p, _ in picks)})")
    return HEADER + "ENTRY main {\n" + "\n".join(lines) + "\n}\n"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chains())
def test_fused_equals_unfused(text):
    module = parse_hlo(text)
    verify_module(module)
    result = fuse_module(module)
    verify_module(result.module)
    reparsed = parse_hlo(print_hlo(result.module))
    inputs = random_inputs(module, seed=1)
    before = evaluate(module, *inputs)
    after = evaluate(reparsed, *inputs)
    assert len(before) == len(after)
    for a, b in zip(before, after):
        assert a.shape == b.shape and a.dtype == b.dtype
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32)), text
    assert count_kernels(result.module) <= count_kernels(module)
