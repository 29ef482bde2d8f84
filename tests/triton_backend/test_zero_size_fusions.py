"""``compile_fusion`` on fusions whose outputs have zero elements: a kernel that writes nothing
(its grid is empty), never an error.  Truth: the reference evaluator on the same fusion.

compile_hlo launches nothing for such fusions (``module_runner.empty_outputs``); these tests call
the code generator directly, so every emitter rule sees an empty iteration space.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo
from triton_backend.driver.compiled_fusion import compile_fusion
from triton_backend.host.input_validation import tensor_to_numpy

ADD = """add { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b) }"""

#: name -> (operand shapes, fusion body ending in ROOT r, root shape, fusion kind)
CASES = {
    "negate": (["f32[0,5]"], "ROOT r = f32[0,5] negate(p0)", "f32[0,5]", "kLoop"),
    "add_of_empties": (["f32[3,0]", "f32[3,0]"], "ROOT r = f32[3,0] add(p0, p1)", "f32[3,0]",
                       "kLoop"),
    "broadcast_of_nonempty": (["f32[5]"], "ROOT r = f32[0,5] broadcast(p0), dimensions={1}",
                              "f32[0,5]", "kLoop"),
    "broadcast_of_scalar": (["f32[]"], "ROOT r = f32[2,0] broadcast(p0), dimensions={}",
                            "f32[2,0]", "kLoop"),
    "empty_slice_of_nonempty": (["f32[4,5]"], "ROOT r = f32[0,5] slice(p0), slice={[2:2],[0:5]}",
                                "f32[0,5]", "kLoop"),
    "transpose": (["f32[0,5]"], "ROOT r = f32[5,0] transpose(p0), dimensions={1,0}",
                  "f32[5,0]", "kLoop"),
    "reshape": (["f32[0,6]"], "ROOT r = f32[0,2,3] reshape(p0)", "f32[0,2,3]", "kLoop"),
    "reverse": (["f32[4,0]"], "ROOT r = f32[4,0] reverse(p0), dimensions={0}", "f32[4,0]",
                "kLoop"),
    "convert_compare_select": (
        ["s32[0,3]", "f32[0,3]"],
        ("c = f32[0,3] convert(p0)\n  k = pred[0,3] compare(c, p1), direction=LT\n"
         "  ROOT r = f32[0,3] select(k, c, p1)"), "f32[0,3]", "kLoop"),
    "iota": ([], "ROOT r = s32[0,4] iota(), iota_dimension=1", "s32[0,4]", "kLoop"),
    "pad_of_empty_to_empty": (["f32[0,3]"], ("z = f32[] constant(0)\n"
                                             "  ROOT r = f32[0,5] pad(p0, z), padding=0_0x1_1"),
                              "f32[0,5]", "kLoop"),
    "concatenate": (["f32[0,2]", "f32[0,3]"],
                    "ROOT r = f32[0,5] concatenate(p0, p1), dimensions={1}", "f32[0,5]", "kLoop"),
    "dynamic_slice": (["f32[4,0]", "s32[]"],
                      ("z = s32[] constant(0)\n"
                       "  ROOT r = f32[2,0] dynamic-slice(p0, p1, z), dynamic_slice_sizes={2,0}"),
                      "f32[2,0]", "kLoop"),
    "reduce_keeping_an_empty_dim": (
        ["f32[0,7]"], ("z = f32[] constant(0)\n"
                       "  ROOT r = f32[0] reduce(p0, z), dimensions={1}, to_apply=add"),
        "f32[0]", "kInput"),
    "negate_of_reduce_to_empty": (
        ["f32[7,0]"], ("z = f32[] constant(0)\n"
                       "  s = f32[0] reduce(p0, z), dimensions={0}, to_apply=add\n"
                       "  ROOT r = f32[0] negate(s)"), "f32[0]", "kInput"),
}


def fusion_module(operands: list[str], body: str, root: str, kind: str) -> str:
    params = "\n  ".join(f"p{k} = {s} parameter({k})" for k, s in enumerate(operands))
    entry = "\n  ".join(f"x{k} = {s} parameter({k})" for k, s in enumerate(operands))
    args = ", ".join(f"x{k}" for k in range(len(operands)))
    return (f"HloModule zero_size\n{ADD}\nf {{\n  {params}\n  {body}\n}}\n"
            f"ENTRY e {{\n  {entry}\n  ROOT fu = {root} fusion({args}), kind={kind}, calls=f\n}}")


def _torch_dtype(dtype: str) -> torch.dtype:
    return {"f32": torch.float32, "s32": torch.int32}[dtype]


def _input(shape_text: str) -> torch.Tensor:
    dtype, dims = shape_text.split("[")
    dims = [int(n) for n in dims.rstrip("]").split(",") if n]
    values = torch.arange(math.prod(dims)).reshape(dims)
    return values.to(_torch_dtype(dtype))


@pytest.mark.parametrize("name", sorted(CASES))
def test_compile_fusion_of_a_zero_size_output_matches_the_evaluator(name):
    operands, body, root, kind = CASES[name]
    module = parse_hlo(fusion_module(operands, body, root, kind))
    compiled = compile_fusion(module, "fu")
    assert math.prod(compiled.grid) == 0, compiled.grid  # nothing to write: no program runs
    inputs = [_input(s) for s in operands]
    (got,) = compiled(*inputs)
    (want,) = evaluate(module, *[tensor_to_numpy(t) for t in inputs])
    got = tensor_to_numpy(got)
    assert got.shape == want.shape and got.dtype == want.dtype and got.size == 0
    np.testing.assert_array_equal(got, want)


def test_a_nonempty_fusion_beside_the_empty_ones_still_runs():
    # The same body with a non-empty output: the zero-size handling must not leak into it.
    module = parse_hlo(fusion_module(["f32[2,5]"], "ROOT r = f32[2,5] negate(p0)", "f32[2,5]",
                                     "kLoop"))
    x = _input("f32[2,5]")
    (got,) = compile_fusion(module, "fu")(x)
    torch.testing.assert_close(got, -x)


#: XLA input-slices fusions (kInput, a tuple of slices of one value) where one slice is empty:
#: the kernel iterates over a flat space of the largest output, and the empty one is never
#: stored.  Truth: XLA itself running the same text.
INPUT_SLICES = {
    "minor_dim": ("f32[2,8]", [("f32[2,3]", "[0:2], [0:3]"), ("f32[2,0]", "[0:2], [3:3]"),
                               ("f32[2,5]", "[0:2], [3:8]")]),
    "major_dim": ("f32[4,8]", [("f32[2,8]", "[0:2], [0:8]"), ("f32[0,8]", "[2:2], [0:8]"),
                               ("f32[2,8]", "[2:4], [0:8]")]),
    "rank_one": ("f32[8]", [("f32[3]", "[0:3]"), ("f32[0]", "[3:3]"), ("f32[5]", "[3:8]")]),
}


def input_slices_module(operand: str, slices: list[tuple[str, str]]) -> str:
    lines = "\n  ".join(f"piece{k} = {shape} slice(a), slice={{{where}}}"
                        for k, (shape, where) in enumerate(slices))
    result = "(" + ", ".join(shape for shape, _ in slices) + ")"
    pieces = ", ".join(f"piece{k}" for k in range(len(slices)))
    return (f"HloModule input_slices\nf {{\n  p0 = {operand} parameter(0)\n"
            f"  p1 = {operand} parameter(1)\n  a = {operand} add(p0, p1)\n  {lines}\n"
            f"  ROOT t = {result} tuple({pieces})\n}}\nENTRY e {{\n  x = {operand} parameter(0)\n"
            f"  y = {operand} parameter(1)\n  ROOT fu = {result} fusion(x, y), kind=kInput, "
            "calls=f\n}")


@pytest.mark.parametrize("name", sorted(INPUT_SLICES))
def test_input_slices_fusion_with_an_empty_slice_matches_xla(name):
    pytest.importorskip("jax")
    import triton_backend
    from fusion.evaluator.npz_io import random_inputs
    from triton_backend.host.input_validation import tensor_from_numpy
    from tests.conformance.xla_oracle import run_xla

    text = input_slices_module(*INPUT_SLICES[name])
    module = parse_hlo(text)
    inputs = random_inputs(module, seed=0)
    want = run_xla(text, *inputs)
    got = triton_backend.compile_hlo(text)(*[tensor_from_numpy(a, "f32") for a in inputs])
    assert len(got) == len(want) == 3
    for g, w in zip(got, want):
        g = tensor_to_numpy(g)
        assert g.shape == w.shape
        np.testing.assert_array_equal(g, w)  # slices of one add: bit-exact
