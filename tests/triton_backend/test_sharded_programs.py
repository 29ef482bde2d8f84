"""``compile_hlo`` on JAX programs annotated for devices (``tests/data/hlo_sharded``), lowered
for one device: the Sharding custom calls and the one-participant collectives run as host
steps between our kernels, and the result is XLA's."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from fusion import parse_hlo
from tests.conformance.sharded_programs import CASES, corpus_files
from tests.conformance.xla_oracle import run_xla
from triton_backend import compile_hlo


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("variant", ["before", "after"])
def test_one_device_sharded_program_compiles_and_matches_xla(name, variant):
    before, after = corpus_files(name, 1)
    text = (before if variant == "before" else after).read_text()
    rng = np.random.default_rng(7)
    args = [rng.standard_normal(p.shape.dims).astype(np.float32)
            for p in parse_hlo(text).entry.parameters]
    want = run_xla(before.read_text(), *args)  # XLA rejects its optimized dp_train_step text
    got = compile_hlo(text)(*[torch.from_numpy(a) for a in args])
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g.numpy(), w, rtol=5e-5, atol=5e-5)


def test_partition_id_is_zero_on_one_device():
    text = """HloModule m
ENTRY e {
  x = f32[2] parameter(0)
  p = u32[] partition-id()
  r = u32[] replica-id()
  s = u32[] add(p, r)
  c = f32[] convert(s)
  b = f32[2] broadcast(c), dimensions={}
  ROOT y = f32[2] add(x, b)
}"""
    x = np.float32([1.5, -2.0])
    np.testing.assert_array_equal(compile_hlo(text)(torch.from_numpy(x))[0].numpy(),
                                  run_xla(text, x)[0])
