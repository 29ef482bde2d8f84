"""``rng`` (``jax.lax.rng_uniform``; TensorFlow's stateful random ops under XLA) and
``rng-get-and-update-state``: the evaluator draws XLA's values from XLA's key and state, the
expansion the kernels compile computes the evaluator's values, and the draws have their
distributions."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fusion.analysis.rng_streams import INITIAL_STATE, advanced, state_delta
from fusion.errors import HloVerifyError
from fusion.evaluator import evaluate
from fusion.evaluator.rng_distribution_ops import draw
from fusion.shapes.verifier import verify_module
from fusion.text.parser import parse_hlo
from fusion.text.printer import print_hlo
from fusion.transforms.rng_distribution_expansion import expand_rngs

XLA_DRAWS = json.loads((Path(__file__).resolve().parents[1] / "data" / "rng" /
                        "xla_draws.json").read_text())["cases"]


def rng_module(shape: str, distribution: str, a, b, root: str = "") -> str:
    dtype = shape.split("[")[0]
    return (f"HloModule m\nENTRY e {{\n  a = {dtype}[] constant({a})\n  b = {dtype}[] constant({b})\n"
            f"  {'ROOT ' if not root else ''}r = {shape} rng(a, b), distribution={distribution}\n"
            f"{root}}}\n")


@pytest.mark.parametrize("case", XLA_DRAWS, ids=[c["name"] for c in XLA_DRAWS])
def test_the_draws_are_xlas_from_xlas_key_and_state(case):
    """XLA's first two draws (``tests/data/rng``, recorded with the key its expander chose)
    are computed from that key and the state after 0 and 1 runs.  Integers and f64 match
    exactly; f32 to a rounding of the largest intermediate (XLA:CPU contracts
    ``u * (b - a) + a`` into one rounding, and its log, sine and cosine are its own), and
    16-bit floats to one of their own roundings more."""
    module = parse_hlo(rng_module(case["shape"], case["distribution"], case["a"], case["b"]))
    rng = module.entry.root
    dtype = rng.shape.dtype
    state = (INITIAL_STATE, 0)
    for want in case["draws"]:
        got = np.asarray(draw(rng, state, case["a"], case["b"], key=case["key"])).reshape(-1)
        if dtype in ("s32", "s64", "u32", "u64", "f64"):
            assert got.tolist() == want, case["name"]
        else:
            # The largest intermediate: b - a, or b times a normal value (below 6 here).
            scale = abs(case["a"]) + abs(case["b"]) * (6 if "normal" in case["name"] else 1)
            eps = {"f32": 2.0 ** -23, "f16": 2.0 ** -10, "bf16": 2.0 ** -7}[dtype]
            np.testing.assert_allclose(got.astype(np.float64), want, rtol=0, atol=eps * scale,
                                       err_msg=case["name"])
        state = advanced(state, state_delta(rng.shape))


CASES = [("f32[5,3]", "rng_uniform", -2, 3), ("f64[4,2]", "rng_uniform", 0, 1),
         ("bf16[9]", "rng_uniform", -1, 1), ("f16[3]", "rng_uniform", 0, 8),
         ("s32[6]", "rng_uniform", -7, 100), ("u32[5]", "rng_uniform", 9, 9),
         ("s32[4]", "rng_uniform", 100, -100), ("s64[2,3]", "rng_uniform", -5, 10**12),
         ("u64[7]", "rng_uniform", 1, 2**63 + 5), ("f32[]", "rng_uniform", 0, 1),
         ("f32[5,3]", "rng_normal", 1, 2), ("f32[4,6]", "rng_normal", 0, 1),
         ("f64[3,7]", "rng_normal", -1, 0.5), ("f32[]", "rng_normal", 0, 1),
         ("bf16[2,5,3]", "rng_normal", 0, 1), ("f32[1,1,5]", "rng_normal", 0, 3)]


@pytest.mark.parametrize("shape,distribution,a,b", CASES)
def test_the_expanded_ops_draw_the_evaluators_values(shape, distribution, a, b):
    """Two implementations: the evaluator's NumPy rule and the elementwise ops the kernels
    compile (each element computing its own Philox words), printed and parsed back."""
    text = rng_module(shape, distribution, a, b)
    module = parse_hlo(text)
    expanded = parse_hlo(print_hlo(expand_rngs(module)))
    verify_module(expanded)
    assert "rng" not in {i.opcode for i in expanded.entry}
    (want,), (got,) = evaluate(module), evaluate(expanded)
    assert got.dtype == want.dtype and got.shape == want.shape
    np.testing.assert_array_equal(got, want)


def test_uniform_and_normal_draws_have_their_distributions():
    n = 40000
    (u,) = evaluate(parse_hlo(rng_module(f"f32[{n}]", "rng_uniform", -3, 5)))
    assert u.min() >= -3 and u.max() < 5
    assert abs(u.mean() - 1) < 0.05 and abs(u.var() - 64 / 12) < 0.1
    (k,) = evaluate(parse_hlo(rng_module(f"s32[{n}]", "rng_uniform", -2, 3)))
    assert set(np.unique(k)) == {-2, -1, 0, 1, 2}
    assert np.all(np.abs(np.bincount(k + 2) / n - 0.2) < 0.01)
    (x,) = evaluate(parse_hlo(rng_module(f"f32[200,{n // 200}]", "rng_normal", 3, 2)))
    assert abs(x.mean() - 3) < 0.05 and abs(x.std() - 2) < 0.05
    assert abs(np.mean(np.abs(x - 3) < 2) - 0.6827) < 0.01  # one sigma
    # The pair of a Box-Muller draw lands at neighbouring indices; they are uncorrelated.
    assert abs(np.corrcoef(x[0::2].ravel(), x[1::2].ravel())[0, 1]) < 0.03


def test_each_op_and_each_run_of_a_loop_draws_anew():
    text = """HloModule m
body {
  s = (s32[], f32[3,4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  one = s32[] constant(1)
  n = s32[] add(i, one)
  lo = f32[] constant(0)
  hi = f32[] constant(1)
  d = f32[1,4] rng(lo, hi), distribution=rng_uniform
  acc = f32[3,4] get-tuple-element(s), index=1
  z = s32[] constant(0)
  u = f32[3,4] dynamic-update-slice(acc, d, i, z)
  ROOT t = (s32[], f32[3,4]) tuple(n, u)
}
cond {
  s = (s32[], f32[3,4]) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  three = s32[] constant(3)
  ROOT p = pred[] compare(i, three), direction=LT
}
ENTRY e {
  zero = s32[] constant(0)
  lo = f32[] constant(0)
  hi = f32[] constant(1)
  first = f32[1,4] rng(lo, hi), distribution=rng_uniform
  second = f32[1,4] rng(lo, hi), distribution=rng_uniform
  init = f32[3,4] broadcast(lo), dimensions={}
  start = (s32[], f32[3,4]) tuple(zero, init)
  w = (s32[], f32[3,4]) while(start), condition=cond, body=body
  rows = f32[3,4] get-tuple-element(w), index=1
  ROOT all = f32[5,4] concatenate(first, second, rows), dimensions={0}
}
"""
    (x,) = evaluate(parse_hlo(text))
    assert len({tuple(row) for row in x.tolist()}) == 5  # two ops, three runs of one
    (y,) = evaluate(parse_hlo(text))
    np.testing.assert_array_equal(x, y)  # every evaluation is a fresh executable's first run


def test_the_state_op_counts_from_xlas_initial_state():
    text = ("HloModule m\nENTRY e {\n  s = u64[2] rng-get-and-update-state(), delta=7\n"
            "  t = u64[2] rng-get-and-update-state(), delta=7\n  ROOT r = (u64[2], u64[2]) "
            "tuple(s, t)\n}\n")
    s, t = evaluate(parse_hlo(text))
    assert s.tolist() == t.tolist() == [0x7012395, 0]  # one counter per instruction
    assert advanced((2**64 - 3, 5), 7) == (4, 6)


@pytest.mark.parametrize("line,problem", [
    ("r = s8[4] rng(a8, b8), distribution=rng_uniform", "draws s8 values"),
    ("r = s32[4] rng(a32, b32), distribution=rng_normal", "draws s32 values"),
    ("r = f32[4] rng(a, b), distribution=rng_gamma", "distribution 'rng_gamma' is unknown"),
    ("r = f32[4] rng(v, b), distribution=rng_uniform", "parameter a is f32[2]"),
    ("r = f32[4] rng(a, b32), distribution=rng_uniform", "parameter b is s32[]"),
    ("r = u64[2] rng-get-and-update-state()", "needs delta=N"),
])
def test_invalid_random_ops_are_located_errors(line, problem):
    text = ("HloModule m\nENTRY e {\n  a = f32[] constant(0)\n  b = f32[] constant(1)\n"
            "  a8 = s8[] constant(0)\n  b8 = s8[] constant(1)\n  a32 = s32[] constant(0)\n"
            "  b32 = s32[] constant(1)\n  v = f32[2] constant({0, 1})\n"
            f"  ROOT {line}\n}}\n")
    with pytest.raises(HloVerifyError) as info:
        verify_module(parse_hlo(text))
    assert problem in info.value.message and info.value.line == 10
