"""Deep modules compile without recursion limits: chains of 3,000 ops through parse, verify,
the fusion pass, the tile analysis and code generation (no kernel is run), at the
interpreter's default recursion limit.

The generators are ``bench/compile_scaling.py``'s (``chain_text``: an unfused ENTRY chain;
``fused_chain_text``: the whole chain as one fused computation, deeper than the pass makes).
The truth for the fused chains is the reference evaluator on the unfused module.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo
from fusion.text.printer import print_hlo
from fusion.shapes.verifier import verify_module
from fusion.transforms.canonicalize import canonicalize
from tiling.fusion_pass.decisions import MAX_FUSION_MEMBERS
from tiling.fusion_pass.traffic_model import count_kernels
from tiling.fusion_pass.priority_fusion import fuse_module
from triton_backend.driver.compiled_fusion import choose_fusion_tiling, emitter_analysis
from triton_backend.lowering.kernel_file import render_kernel_file

N = 3000
BENCH = Path(__file__).resolve().parents[2] / "bench" / "compile_scaling.py"


def _bench():
    spec = importlib.util.spec_from_file_location("bench_compile_scaling", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


scaling = _bench()


@pytest.fixture(autouse=True)
def default_recursion_limit():
    # A walk that recursed once per op would need ~N frames: keep Python's default limit.
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    yield
    sys.setrecursionlimit(old)


def _kernels(module):
    for comp in module.computations:
        for instr in comp.instructions:
            if instr.opcode == "fusion":
                tiles, chunk, _ = choose_fusion_tiling(module, instr, None, None)
                kind = emitter_analysis(module, instr).kind
                yield render_kernel_file(module, instr, tiles, kind, reduction_chunk=chunk)


@pytest.mark.parametrize("kind", ["elementwise", "diamond", "wide-diamond"])
def test_deep_entry_chain_fuses_and_generates_code(kind):
    text = scaling.chain_text(kind, N)
    module = parse_hlo(text)
    verify_module(module)
    fused = fuse_module(module).module
    verify_module(fused)
    assert parse_hlo(print_hlo(fused)).entry.root.shape == module.entry.root.shape
    # The member limit cuts the chain into kernels; every op (after canonicalization merged
    # the diamonds' equal ops) lands in one of them.
    ops = sum(i.opcode != "parameter" for i in canonicalize(module).entry)
    members = sum(i.opcode != "parameter" for c in fused.computations if c is not fused.entry
                  for i in c.instructions)
    assert count_kernels(fused) >= ops // MAX_FUSION_MEMBERS and members >= ops > N // 2
    x = np.linspace(-2, 2, 128, dtype=np.float32).reshape(8, 16)
    np.testing.assert_array_equal(evaluate(fused, x)[0], evaluate(module, x)[0])
    sources = [k.source for k in _kernels(fused)]
    assert len(sources) == count_kernels(fused)


@pytest.mark.parametrize("kind", ["elementwise", "reshape", "transpose", "diamond",
                                  "wide-diamond"])
def test_one_fusion_of_3000_ops_generates_code(kind):
    module = parse_hlo(scaling.fused_chain_text(kind, N))
    verify_module(module)
    x = np.linspace(-2, 2, 128, dtype=np.float32).reshape(8, 16)
    unfused = parse_hlo(scaling.chain_text(kind, N))
    np.testing.assert_array_equal(evaluate(module, x)[0], evaluate(unfused, x)[0])
    (rendered,) = _kernels(module)
    # Linear code: a line or so per op; a reshape chain's index is simplified to one map
    # (unsimplified, each reshape doubled the expression of the parameter's index).
    assert len(rendered.source) < 200 * N
    load = [line for line in rendered.source.splitlines() if "tl.load(" in line]
    assert load and all(len(line) < 400 for line in load)


@pytest.mark.parametrize("reader", [
    "z = f32[] constant(0)\n  ROOT r = f32[8] reduce(x119, z), dimensions={1}, to_apply=add",
    "i = s32[] constant(0)\n  j = s32[] parameter(1)\n"
    "  ROOT r = f32[8,16] dynamic-slice(x119, i, j), dynamic_slice_sizes={8,16}"],
    ids=["reduce", "dynamic-slice"])
def test_a_chain_deeper_than_the_emitters_nesting_compiles(reader):
    """A chain deeper than the value emitter's nesting limit read by a persistent reduce or
    at a runtime start: the request handed back to the outermost call reruns the reader's
    rule, which takes the same dim variables or start symbol again (fresh ones made every
    rerun start over: it hung)."""
    from triton_backend import compile_hlo
    import torch

    ops = "\n".join(f"  x{k} = f32[8,64] {'sine' if k % 2 else 'tanh'}(x{k - 1})"
                    for k in range(1, 120))
    text = ("HloModule m\nadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
            "  ROOT s = f32[] add(a, b)\n}\nENTRY e {\n  x0 = f32[8,64] parameter(0)\n"
            f"{ops}\n  {reader}\n}}\n")
    compiled = compile_hlo(text, cache=False)
    assert len(compiled.fusions) == 1
    args = [np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32)]
    if "parameter(1)" in reader:
        args.append(np.int32(53))  # clamped to 48
    (got,) = compiled(*[torch.from_numpy(np.asarray(a)) for a in args])
    np.testing.assert_allclose(got.numpy(), evaluate(parse_hlo(text), *args)[0], rtol=1e-5,
                               atol=1e-5)
