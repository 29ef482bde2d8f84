"""Every fusion XLA made in the corpus: emitted and checked against the reference evaluator,
or rejected with an UnsupportedOpError naming the op and why."""
from __future__ import annotations

import glob
import os

import numpy as np
import pytest

from fusion.errors import UnsupportedOpError
from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo
from fusion.ir.shape import TupleShape
from tests.triton_backend.fusion_check import (
    assert_matches,
    call_site_arrays,
    fusion_module,
    to_numpy,
    to_torch,
)
from triton_backend.driver.compiled_fusion import compile_fusion

CORPUS = os.path.join(os.path.dirname(__file__), "..", "data", "hlo")

#: fusion -> the op that makes it unsupported (the reason must name it).
UNSUPPORTED: dict[str, str] = {}


def _fusions():
    for path in sorted(glob.glob(os.path.join(CORPUS, "*.after.hlo"))):
        program = os.path.basename(path)[: -len(".after.hlo")]
        with open(path) as f:
            module = parse_hlo(f.read())
        for caller, instr in module.fusions():
            yield pytest.param(module, caller, instr, id=f"{program}:{instr.name}")


@pytest.mark.parametrize("module,caller,instr", list(_fusions()))
def test_corpus_fusion(module, caller, instr, request):
    fusion_id = request.node.callspec.id
    if fusion_id in UNSUPPORTED:
        with pytest.raises(UnsupportedOpError, match=UNSUPPORTED[fusion_id]):
            compile_fusion(module, instr)
        return
    compiled = compile_fusion(module, instr)
    params = module.computation(instr.attr("calls")).parameters
    rng = np.random.default_rng(1)
    arrays = call_site_arrays(caller, instr, params, rng)
    want = evaluate(fusion_module(module, instr.name), *arrays)
    got = compiled(*[to_torch(a, p.shape.dtype) for a, p in zip(arrays, params)])
    outs = instr.shape.elements if isinstance(instr.shape, TupleShape) else (instr.shape,)
    for g, w, s in zip(got, want, outs):
        assert_matches(to_numpy(g, s.dtype), w, s.dtype, exact=False, reduction_length=16)
    assert compiled.kernel_path.exists() and compiled.source.startswith("# Generated")
