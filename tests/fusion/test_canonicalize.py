"""Canonicalization: each rule on a small module, and bit-exact values on the whole corpus."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

from fusion.transforms.canonicalize import REWRITE_RULES, canonicalize
from fusion.evaluator import evaluate
from fusion.evaluator.npz_io import random_inputs
from fusion.text.parser import parse_hlo
from fusion.text.printer import print_hlo
from fusion.shapes.verifier import verify_module

HLO = pathlib.Path(__file__).parents[1] / "data" / "hlo"
CORPUS = sorted(HLO.glob("*.before.hlo"))


def _bits_equal(a, b) -> bool:
    return len(a) == len(b) and all(
        x.shape == y.shape and x.dtype == y.dtype
        and np.array_equal(np.ascontiguousarray(x).view(np.uint8),
                           np.ascontiguousarray(y).view(np.uint8))
        for x, y in zip(a, b))


def _module(body: str, params: str = "p = f32[4] parameter(0)") -> str:
    return f"HloModule m\nENTRY e {{\n  {params}\n{body}\n}}\n"


def test_rules_are_alphabetical():
    assert list(REWRITE_RULES) == sorted(REWRITE_RULES)


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name.split(".")[0])
def test_corpus_values_are_bit_identical(path):
    module = parse_hlo(path.read_text())
    canon = canonicalize(module)
    verify_module(canon)
    reparsed = parse_hlo(print_hlo(canon))
    inputs = random_inputs(module)
    assert _bits_equal(evaluate(module, *inputs), evaluate(reparsed, *inputs))
    assert not any(i.opcode == "call" for c in canon.computations for i in c.instructions)


@pytest.mark.parametrize("body, root_opcode", [
    ("  ROOT r = f32[4] reshape(p)", "parameter"),
    ("  ROOT c = f32[4] convert(p)", "parameter"),
    ("  ROOT c = f32[4] copy(p)", "parameter"),
    ("  ROOT b = f32[4] broadcast(p), dimensions={0}", "parameter"),
    ("  z = f32[] constant(0)\n  zs = f32[4] broadcast(z), dimensions={}\n"
     "  ROOT s = f32[4] subtract(p, zs)", "parameter"),
    ("  z = f32[] constant(-0.0)\n  zs = f32[4] broadcast(z), dimensions={}\n"
     "  ROOT s = f32[4] add(zs, p)", "parameter"),
    # x + 0.0 is not x for x = -0.0: kept.
    ("  z = f32[] constant(0)\n  zs = f32[4] broadcast(z), dimensions={}\n"
     "  ROOT s = f32[4] add(p, zs)", "add"),
    ("  o = f32[] constant(1)\n  os = f32[4] broadcast(o), dimensions={}\n"
     "  ROOT d = f32[4] divide(p, os)", "parameter"),
    ("  o = f32[] constant(1)\n  os = f32[4] broadcast(o), dimensions={}\n"
     "  ROOT d = f32[4] divide(os, p)", "divide"),
    ("  n = f32[] constant(-inf)\n  ns = f32[4] broadcast(n), dimensions={}\n"
     "  ROOT m = f32[4] maximum(ns, p)", "parameter"),
    ("  n = f32[] constant(inf)\n  ns = f32[4] broadcast(n), dimensions={}\n"
     "  ROOT m = f32[4] minimum(p, ns)", "parameter"),
])
def test_identity_rules(body, root_opcode):
    module = canonicalize(parse_hlo(_module(body)))
    assert module.entry.root.opcode == root_opcode


def test_integer_add_zero_is_removed():
    text = _module("  z = s32[] constant(0)\n  zs = s32[4] broadcast(z), dimensions={}\n"
                   "  ROOT s = s32[4] add(p, zs)", "p = s32[4] parameter(0)")
    assert canonicalize(parse_hlo(text)).entry.root.opcode == "parameter"


def test_chains_compose():
    text = _module("  t = f32[3,2] transpose(q), dimensions={1,0}\n"
                   "  r = f32[6] reshape(t)\n  s = f32[2,3] reshape(r)\n"
                   "  ROOT u = f32[2,3] add(s, s)", "q = f32[2,3] parameter(0)")
    module = canonicalize(parse_hlo(text))
    ops = [i.opcode for i in module.entry.instructions]
    assert ops == ["parameter", "transpose", "reshape", "add"]
    q = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert _bits_equal(evaluate(module, q), evaluate(parse_hlo(text), q))


def test_scalar_broadcast_reshape_becomes_broadcast_and_broadcasts_compose():
    text = _module("  c = f32[] parameter(1)\n  b = f32[4,1] broadcast(c), dimensions={}\n"
                   "  r = f32[4] reshape(b)\n  bb = f32[2,4] broadcast(r), dimensions={1}\n"
                   "  ROOT m = f32[2,4] multiply(bb, bb)")
    module = canonicalize(parse_hlo(text))
    broadcasts = [i for i in module.entry.instructions if i.opcode == "broadcast"]
    assert len(broadcasts) == 1 and broadcasts[0].operands == ("c",)
    args = (np.ones(4, np.float32), np.float32(3.0))
    assert _bits_equal(evaluate(module, *args), evaluate(parse_hlo(text), *args))


def test_small_constants_fold_with_evaluator_rounding():
    text = _module("  a = bf16[] constant(1.5)\n  b = bf16[] constant(0.0078125)\n"
                   "  s = bf16[] add(a, b)\n  e = bf16[] exponential(s)\n"
                   "  eb = bf16[4] broadcast(e), dimensions={}\n"
                   "  ROOT m = bf16[4] multiply(q, eb)", "q = bf16[4] parameter(0)")
    module = canonicalize(parse_hlo(text))
    assert [i.opcode for i in module.entry.instructions].count("constant") == 1
    q = np.linspace(-1, 1, 4).astype(parse_hlo(text).entry.parameters[0].shape.element_type
                                       .numpy_dtype())
    assert _bits_equal(evaluate(module, q), evaluate(parse_hlo(text), q))


def test_call_is_inlined_and_callee_dropped():
    text = """HloModule m
sq {
  a = f32[4] parameter(0)
  ROOT m = f32[4] multiply(a, a)
}
ENTRY e {
  p = f32[4] parameter(0)
  c1 = f32[4] call(p), to_apply=sq
  ROOT c2 = f32[4] call(c1), to_apply=sq
}
"""
    module = canonicalize(parse_hlo(text))
    verify_module(module)
    assert [c.name for c in module.computations] == ["e"]
    assert [i.opcode for i in module.entry.instructions] == ["parameter", "multiply", "multiply"]
    p = np.array([1, 2, 3, 4], np.float32)
    np.testing.assert_array_equal(evaluate(module, p)[0], p ** 4)


def test_an_element_of_an_inlined_tuple_is_the_element_itself():
    """JAX's jvp of a jitted ``jnp.where`` calls a computation returning a tuple: inlined,
    its elements are read through ``get-tuple-element``s of a ``tuple``, which no kernel
    fuses (JAX's attention gradient kept its scores apart for it)."""
    text = """HloModule m
pair {
  a = f32[4] parameter(0)
  n = f32[4] negate(a)
  e = f32[4] exponential(a)
  ROOT t = (f32[4], f32[4]) tuple(n, e)
}
ENTRY e {
  p = f32[4] parameter(0)
  c = (f32[4], f32[4]) call(p), to_apply=pair
  g0 = f32[4] get-tuple-element(c), index=0
  g1 = f32[4] get-tuple-element(c), index=1
  ROOT s = f32[4] add(g0, g1)
}
"""
    original = parse_hlo(text)
    module = canonicalize(original)
    verify_module(module)
    assert [i.opcode for i in module.entry.instructions] == [
        "parameter", "negate", "exponential", "add"]
    p = np.array([1, 2, 3, 4], np.float32)
    assert _bits_equal(evaluate(module, p), evaluate(original, p))


def test_a_reduction_over_unit_dims_combines_each_element_with_the_init_once():
    """Bit for bit the reduction's value: the init is combined, not dropped (0 + -0.0 is
    +0.0; a max with init 5 clamps)."""
    text = """HloModule m
add { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b) }
mx { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] maximum(a, b) }
ENTRY e {
  p = f32[1,4,1] parameter(0)
  z = f32[] constant(0)
  five = f32[] constant(5)
  r = f32[4] reduce(p, z), dimensions={0,2}, to_apply=add
  m = f32[4] reduce(p, five), dimensions={0,2}, to_apply=mx
  keep = f32[1] reduce(p, z), dimensions={1,2}, to_apply=add
  ROOT t = (f32[4], f32[4], f32[1]) tuple(r, m, keep)
}
"""
    original = parse_hlo(text)
    module = canonicalize(original)
    verify_module(module)
    opcodes = [i.opcode for i in module.entry.instructions]
    assert opcodes.count("reduce") == 1  # the one over a dim of extent 4 stays
    p = np.array([-0.0, 7.0, -3.0, 2.5], np.float32).reshape(1, 4, 1)
    assert _bits_equal(evaluate(module, p), evaluate(original, p))


def test_dead_code_removed_but_parameters_kept():
    text = _module("  q = f32[4] parameter(1)\n  dead = f32[4] exponential(q)\n"
                   "  ROOT n = f32[4] negate(p)")
    module = canonicalize(parse_hlo(text))
    assert [i.name for i in module.entry.instructions] == ["p", "q", "n"]


def test_forward_references_are_put_in_dependency_order_first():
    # Found by the front-end fuzzer: an operand defined on a later line crashed the rewrites.
    module = parse_hlo("""HloModule m
ENTRY e {
  p = f32[2] parameter(0)
  ROOT a = f32[2] add(p, b)
  c = f32[] constant(1)
  b = f32[2] broadcast(c), dimensions={}
}""")
    x = np.array([1.5, -2.0], np.float32)
    (want,) = evaluate(module, x)
    (got,) = evaluate(canonicalize(module), x)
    np.testing.assert_array_equal(got, want)


def test_convert_of_a_reshape_becomes_a_reshape_of_the_convert():
    """XLA's ReshapeMover: the reshape goes last (a view), the convert next to the producer."""
    text = _module("  e = f32[2,3,4] exponential(q)\n  r = f32[6,4] reshape(e)\n"
                   "  ROOT c = bf16[6,4] convert(r)", "q = f32[2,3,4] parameter(0)")
    module = canonicalize(parse_hlo(text))
    verify_module(module)
    root = module.entry.root
    assert root.opcode == "reshape" and root.shape.dims == (6, 4) and root.shape.dtype == "bf16"
    convert = module.entry.instruction(root.operands[0])
    assert convert.opcode == "convert" and convert.shape.dims == (2, 3, 4)
    q = np.linspace(-3, 3, 24, dtype=np.float32).reshape(2, 3, 4)
    assert _bits_equal(evaluate(module, q), evaluate(parse_hlo(text), q))
