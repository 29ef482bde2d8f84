"""``index_splitting``: values computed from iotas get one copy per reader, the module's
value unchanged, and nothing expensive or read from a parameter is copied."""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from fusion.evaluator import evaluate
from fusion.shapes.verifier import verify_module
from fusion.text.parser import parse_hlo
from tiling.fusion_pass.builder import NameAllocator
from tiling.fusion_pass.index_splitting import split_index_values

TEXT = """HloModule m
ENTRY e {
  x = f32[6,6] parameter(0)
  i = s32[6] iota(), iota_dimension=0
  two = s32[] constant(2)
  twos = s32[6] broadcast(two), dimensions={}
  j = s32[6] multiply(i, twos)
  q = s32[6,6] broadcast(j), dimensions={0}
  k = s32[6,6] broadcast(j), dimensions={1}
  m = pred[6,6] compare(q, k), direction=GE
  f = f32[6] convert(i)
  e = f32[6] exponential(f)
  a = f32[6,6] broadcast(e), dimensions={0}
  b = f32[6,6] broadcast(e), dimensions={1}
  p = f32[6,6] add(x, x)
  y = f32[6,6] select(m, p, a)
  z = f32[6,6] multiply(y, b)
  ROOT r = f32[6,6] add(z, p)
}
"""


def _split(text: str):
    module = parse_hlo(text)
    names = NameAllocator({i.name for c in module.computations for i in c.instructions})
    entry = split_index_values(module.entry, names.fresh)
    return module, replace(module, computations=tuple(
        entry if c.name == entry.name else c for c in module.computations))


def test_index_values_get_a_copy_per_reader_and_the_value_is_kept():
    module, split = _split(TEXT)
    verify_module(split)
    x = np.random.default_rng(0).standard_normal((6, 6)).astype(np.float32)
    np.testing.assert_array_equal(evaluate(split, x)[0], evaluate(module, x)[0])
    readers: dict[str, int] = {}
    for instr in split.entry.instructions:
        for operand in set(instr.operands):
            readers[operand] = readers.get(operand, 0) + 1
    ops = {i.name: i.opcode for i in split.entry.instructions}
    # j (two readers: q and k) and its operands are copied; the exponential is expensive
    # and p reads a parameter: both keep their readers.
    assert readers["j"] == 1 and readers["i"] == 1 and ops.get("j.1") == "multiply"
    assert readers["e"] == 2 and readers["p"] == 2
    assert list(ops.values()).count("iota") == 3  # j, its copy and the convert each read one
    assert list(ops.values()).count("exponential") == 1


def test_a_computation_without_shared_index_values_is_returned_as_is():
    text = TEXT.replace("k = s32[6,6] broadcast(j)", "k = s32[6,6] broadcast(twos)")
    text = text.replace("f = f32[6] convert(i)", "f = f32[6] convert(twos)")
    module, _ = _split(text)
    names = NameAllocator({i.name for i in module.entry.instructions})
    assert split_index_values(module.entry, names.fresh) is module.entry
