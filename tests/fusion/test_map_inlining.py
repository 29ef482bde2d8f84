"""``map`` inlined as array ops (``fusion.transforms.map_inlining``): the same value, bit for
bit, under the reference evaluator, for random scalar computations; and compiled, the shape of
map XLA's CPU pipeline writes (a scan's combine inside a fusion) matches XLA."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo
from fusion.transforms.map_inlining import inline_maps

#: Scalar ops of a random to_apply: (text template over operands a and b, result type).
_OPS = [
    ("add({a}, {b})", "f32"), ("multiply({a}, {b})", "f32"), ("subtract({a}, {b})", "f32"),
    ("maximum({a}, {b})", "f32"), ("divide({a}, {b})", "f32"), ("tanh({a})", "f32"),
    ("negate({a})", "f32"), ("exponential({a})", "f32"), ("abs({a})", "f32"),
]


@st.composite
def to_apply_bodies(draw):
    """A scalar computation of two f32 parameters: constants and random elementwise ops, a
    select over a compare and a bf16 round trip among them."""
    lines = ["  a = f32[] parameter(0)", "  b = f32[] parameter(1)",
             f"  k = f32[] constant({draw(st.sampled_from(['0.5', '-2', '3']))})"]
    names = ["a", "b", "k"]
    for n in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["op", "op", "select", "round"]))
        x, y = draw(st.sampled_from(names)), draw(st.sampled_from(names))
        name = f"v{n}"
        if kind == "select":
            lines.append(f"  c{n} = pred[] compare({x}, {y}), direction=GT")
            lines.append(f"  {name} = f32[] select(c{n}, {x}, {y})")
        elif kind == "round":
            lines.append(f"  h{n} = bf16[] convert({x})")
            lines.append(f"  {name} = f32[] convert(h{n})")
        else:
            template, dtype = draw(st.sampled_from(_OPS))
            lines.append(f"  {name} = {dtype}[] {template.format(a=x, b=y)}")
        names.append(name)
    root = draw(st.sampled_from(names[3:] + ["a"]))  # the root may be a parameter too
    lines.append(f"  ROOT r = f32[] copy({root})" if root == "a" else
                 f"  ROOT r = f32[] negate({root})")
    return "\n".join(lines)


@settings(max_examples=60, deadline=None)
@given(to_apply_bodies(), st.integers(0, 2**32 - 1))
def test_an_inlined_map_computes_the_map_bit_for_bit(body, seed):
    module = parse_hlo("HloModule m\nf {\n" + body + "\n}\nENTRY e {\n"
                       "  x = f32[3,5] parameter(0)\n  y = f32[3,5] parameter(1)\n"
                       "  ROOT m = f32[3,5] map(x, y), dimensions={0,1}, to_apply=f\n}\n")
    inlined = inline_maps(module)
    assert not any(i.opcode == "map" for c in inlined.computations for i in c)
    assert inlined.entry.root.name == "m"
    rng = np.random.default_rng(seed)
    x, y = (rng.standard_normal((3, 5)).astype(np.float32) for _ in range(2))
    with np.errstate(all="ignore"):
        want, got = evaluate(module, x, y)[0], evaluate(inlined, x, y)[0]
    assert want.tobytes() == got.tobytes()


def test_a_map_calling_a_computation_is_left_as_it_is():
    module = parse_hlo("""HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
calls {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] call(a, b), to_apply=add
}
ENTRY e {
  x = f32[4] parameter(0)
  ROOT m = f32[4] map(x, x), dimensions={0}, to_apply=calls
}""")
    assert inline_maps(module) is module


@pytest.mark.parametrize("attribute", [", to_apply=nowhere", ""])
def test_a_map_calling_nothing_is_left_to_the_verifier(attribute):
    from fusion.errors import HloVerifyError
    from fusion.shapes.verifier import verify_module

    module = parse_hlo("HloModule m\nENTRY e {\n  x = f32[4] parameter(0)\n"
                       f"  ROOT m = f32[4] map(x), dimensions={{0}}{attribute}\n}}\n")
    assert inline_maps(module) is module
    with pytest.raises(HloVerifyError) as info:
        verify_module(module)
    assert (info.value.line, info.value.column) == (4, 3)


#: XLA:CPU's optimized cumsum of a bf16 row (``jnp.cumsum`` past 16 elements): the column
#: scans' prefixes are combined by a map of the reducer, inside a fusion, in XLA's layouts.
XLA_SCAN_COMBINE = """HloModule jit_f, entry_computation_layout={(f32[8,4,16]{2,1,0}, f32[8,5]{1,0})->bf16[64,8]{1,0}}

region (x: f32[], y: f32[]) -> f32[] {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  s = f32[] add(x, y)
  h = bf16[] convert(s)
  ROOT r = f32[] convert(h)
}

fused (p0: f32[8,4,16], p1: f32[8,5]) -> bf16[64,8] {
  p0 = f32[8,4,16]{2,1,0} parameter(0)
  p1 = f32[8,5]{1,0} parameter(1)
  slice = f32[8,4]{1,0} slice(p1), slice={[0:8], [0:4]}
  spread = f32[8,4,16]{2,1,0} broadcast(slice), dimensions={0,1}
  map = f32[8,4,16]{2,1,0} map(p0, spread), dimensions={0,1,2}, to_apply=region
  narrow = bf16[8,4,16]{2,1,0} convert(map)
  flat = bf16[8,64]{1,0} bitcast(narrow)
  t = bf16[64,8]{0,1} transpose(flat), dimensions={1,0}
  ROOT out = bf16[64,8]{1,0} copy(t)
}

ENTRY main (a: f32[8,4,16], b: f32[8,5]) -> bf16[64,8] {
  a = f32[8,4,16]{2,1,0} parameter(0)
  b = f32[8,5]{1,0} parameter(1)
  ROOT f = bf16[64,8]{1,0} fusion(a, b), kind=kLoop, calls=fused
}
"""


def test_xlas_scan_combine_map_compiles_and_matches_xla():
    pytest.importorskip("jax")
    from tests.conformance.xla_oracle import run_xla
    from triton_backend import compile_hlo
    from triton_backend.host.input_validation import tensor_from_numpy, tensor_to_numpy

    rng = np.random.default_rng(0)
    a = rng.standard_normal((8, 4, 16)).astype(np.float32)
    b = rng.standard_normal((8, 5)).astype(np.float32)
    want = run_xla(XLA_SCAN_COMBINE, a, b)[0]
    compiled = compile_hlo(XLA_SCAN_COMBINE)
    (got,) = compiled(tensor_from_numpy(a, "f32"), tensor_from_numpy(b, "f32"))
    assert tensor_to_numpy(got).tobytes() == np.asarray(want).tobytes()
