"""Priority fusion makes no fusion the tile analysis cannot tile (unless a part of it was
already untileable), and its legality search agrees with ``tiling_candidates``."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fusion.transforms.canonicalize import canonicalize
from fusion.evaluator import evaluate
from fusion.evaluator.npz_io import random_inputs
from fusion.text.parser import parse_hlo
from fusion.text.printer import print_hlo
from fusion.shapes.verifier import verify_module
from tiling.fusion_pass.builder import NameAllocator, fused_computation
from tiling.fusion_pass.decisions import Node
from tiling.fusion_pass.tile_check import (
    candidate_structure,
    TilingVerdicts,
    analysis_problem,
    elementwise_dims,
    legal_tiling_problem,
    tile_analysis_check,
)
from tiling.fusion_pass.traffic_model import count_kernels
from tiling.fusion_pass.graph import FusionOptions
from tiling.fusion_pass.priority_fusion import fuse_module
from tiling.policy.candidates import report_for
from tiling.symbolic.tiled_fusion import analyze_computation_tiling, analyze_fusion_tiling

HLO = pathlib.Path(__file__).parents[1] / "data" / "hlo"
CORPUS = sorted(HLO.glob("*.before.hlo"))

# negate(reshape(transpose(reshape(x)))) reads x at `d0 floordiv 8 + (d0 mod 8) * 8`: no
# block of the flat output is a strided box of x.  Each op alone tiles, and so do
# transpose(reshape(x)) and negate(reshape(.)), the two kernels the pass makes instead.
SPLIT_TRANSPOSE = """HloModule m
ENTRY e {
  x = f32[64] parameter(0)
  a = f32[8,8] reshape(x)
  t = f32[8,8] transpose(a), dimensions={1,0}
  r = f32[64] reshape(t)
  ROOT n = f32[64] negate(r)
}
"""

# The whole chain as one fusion, written by hand: what the analysis refuses.
SPLIT_TRANSPOSE_FUSION = """HloModule m
f {
  p = f32[64] parameter(0)
  a = f32[8,8] reshape(p)
  t = f32[8,8] transpose(a), dimensions={1,0}
  r = f32[64] reshape(t)
  ROOT n = f32[64] negate(r)
}
ENTRY e {
  x = f32[64] parameter(0)
  ROOT y = f32[64] fusion(x), kind=kLoop, calls=f
}
"""

# The same chain without the reshape back: one tileable kernel.
TRANSPOSE_CHAIN = """HloModule m
ENTRY e {
  x = f32[8,8] parameter(0)
  a = f32[8,8] negate(x)
  t = f32[8,8] transpose(a), dimensions={1,0}
  ROOT n = f32[8,8] exponential(t)
}
"""

# Interior padding: the analysis refuses the pad itself (every other row is padding).
INTERIOR_PAD = """HloModule m
ENTRY e {
  x = f32[8,16] parameter(0)
  z = f32[] constant(0)
  p = f32[15,16] pad(x, z), padding=0_0_1x0_0_0
  n = f32[15,16] negate(p)
  t = f32[16,15] transpose(n), dimensions={1,0}
  ROOT e = f32[16,15] exponential(t)
}
"""


def _bits_equal(a, b) -> bool:
    return len(a) == len(b) and all(
        x.shape == y.shape and x.dtype == y.dtype
        and np.array_equal(np.ascontiguousarray(x).view(np.uint8),
                           np.ascontiguousarray(y).view(np.uint8))
        for x, y in zip(a, b))


def _fuse_checked(text: str, options: FusionOptions | None = None):
    module = parse_hlo(text)
    result = fuse_module(module, options=options)
    verify_module(result.module)
    reparsed = parse_hlo(print_hlo(result.module))
    inputs = random_inputs(module, seed=0)
    assert _bits_equal(evaluate(module, *inputs), evaluate(reparsed, *inputs))
    return result


def _bodies(module):
    return [module.computation(i.attr("calls")) for _, i in module.fusions()]


def _untileable_alone(body) -> list[str]:
    """The instructions of ``body`` the analysis refuses on their own (as one-op fusions)."""
    names = NameAllocator({i.name for i in body.instructions})
    out = []
    for instr in body.instructions:
        if instr.opcode == "parameter" or (instr.opcode == "tuple" and instr.name == body.root_name):
            continue
        single = fused_computation(body, Node((instr.name,), (instr.name,), True), "one", names)
        if analysis_problem(single) is not None:
            out.append(instr.name)
    return out


def _assert_no_fusion_made_untileable(module) -> None:
    """Every kernel the analysis refuses holds an instruction it refuses on its own: a merge
    of tileable parts into an untileable whole is never made."""
    for body in _bodies(module):
        problem = analysis_problem(body)
        if problem is not None:
            assert _untileable_alone(body), (body.name, problem, print_hlo(module))


def test_fusion_the_tile_analysis_refuses_is_not_made():
    truth = parse_hlo(SPLIT_TRANSPOSE_FUSION)
    assert analyze_fusion_tiling(truth, truth.entry.root).not_tileable()

    result = _fuse_checked(SPLIT_TRANSPOSE)
    refused = [d for d in result.decisions if not d.fused and d.producer == "t"]
    assert len(refused) == 1 and refused[0].consumers == ("n",)
    assert "cannot be tiled" in refused[0].reason
    assert "not tileable" in refused[0].reason and "floordiv" in refused[0].reason
    bodies = _bodies(result.module)
    assert [sorted(i.opcode for i in b.instructions) for b in bodies] == [
        ["parameter", "reshape", "transpose"], ["negate", "parameter", "reshape"]]
    assert all(report_for(analyze_computation_tiling(b, b.name)).legal for b in bodies)
    # Only the tile analysis keeps them apart: the merge would save bytes.
    anything = _fuse_checked(SPLIT_TRANSPOSE, FusionOptions(tile_check=lambda c, m: None))
    assert count_kernels(anything.module) == 1 < count_kernels(result.module) == 2


def test_tileable_fusion_is_made():
    result = _fuse_checked(TRANSPOSE_CHAIN)
    assert all(d.fused for d in result.decisions)
    (body,) = _bodies(result.module)
    assert len([i for i in body.instructions if i.opcode != "parameter"]) == 3
    assert report_for(analyze_computation_tiling(body, "f")).legal


def test_untileable_part_does_not_block_fusion():
    result = _fuse_checked(INTERIOR_PAD)
    (body,) = _bodies(result.module)
    assert analysis_problem(body) is not None
    assert _untileable_alone(body) == ["p"]
    assert count_kernels(result.module) == 1
    # The same analysis as an absolute (injected) check refuses every fusion with the pad.
    strict = _fuse_checked(INTERIOR_PAD, FusionOptions(tile_check=tile_analysis_check))
    assert count_kernels(strict.module) == 2
    assert any("not tileable" in d.reason and d.producer == "p" for d in strict.decisions)


_LEGALITY_CASES = {
    "split_transpose": SPLIT_TRANSPOSE,
    "interior_pad": INTERIOR_PAD,
    # A tile along the concatenated dim must divide 3 and 5: 1 element, under the minimum.
    "concat_coprime": """HloModule m
ENTRY e {
  a = f32[3] parameter(0)
  b = f32[5] parameter(1)
  ROOT c = f32[8] concatenate(a, b), dimensions={0}
}
""",
    # A row of 2^15 elements exceeds the persistent limit: legal only looped in chunks.
    "chunked_reduction": """HloModule m
add {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] add(x, y)
}
ENTRY e {
  p = f32[2,32768] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[2] reduce(p, z), dimensions={1}, to_apply=add
}
""",
}


def _legality_computations():
    for name, text in _LEGALITY_CASES.items():
        yield name, parse_hlo(text).entry
    for path in CORPUS:
        module = fuse_module(parse_hlo(path.read_text())).module
        for body in _bodies(module):
            yield f"{path.name.split('.')[0]}/{body.name}", body


@pytest.mark.parametrize("name, comp", list(_legality_computations()), ids=lambda x: x
                         if isinstance(x, str) else "")
def test_legality_search_agrees_with_tiling_candidates(name, comp):
    try:
        analysis = analyze_computation_tiling(comp, name)
    except Exception:  # noqa: BLE001 - the analysis has no rule: the check must refuse it
        assert analysis_problem(comp) is not None
        return
    report = report_for(analysis)
    problem = legal_tiling_problem(analysis)
    assert (problem is None) == bool(report.legal), (name, problem, report.default_reason)
    if report.not_tileable:
        assert problem.startswith("not tileable")


def test_legality_cases_cover_both_verdicts():
    verdicts = {n: analysis_problem(parse_hlo(t).entry) for n, t in _LEGALITY_CASES.items()}
    assert verdicts["chunked_reduction"] is None
    assert "no legal tiling" in verdicts["concat_coprime"]
    assert "not tileable" in verdicts["split_transpose"]


def _candidate_nodes(comp):
    """Per instruction: itself alone, itself with every producer it reaches, and the last
    few of those (the chains the pass grows)."""
    ancestors: dict[str, tuple[str, ...]] = {}
    for instr in comp.instructions:
        if instr.opcode in ("parameter", "tuple", "get-tuple-element"):
            continue
        members = {instr.name}
        for op in instr.operands:
            members |= set(ancestors.get(op, ()))
        ordered = tuple(i.name for i in comp.instructions if i.name in members)
        ancestors[instr.name] = ordered
        yield Node(ordered, (instr.name,), True)
        yield Node((instr.name,), (instr.name,), True)
        yield Node(ordered[-4:], (instr.name,), True)


@pytest.mark.parametrize("name", ["gelu", "integer_ops", "compare_select", "bf16_softmax",
                                  "layernorm"])
def test_elementwise_shortcut_matches_the_full_analysis(name):
    module = canonicalize(parse_hlo((HLO / f"{name}.before.hlo").read_text()))
    comp = module.entry
    taken = {i.name for c in module.computations for i in c.instructions}

    def build(node):
        return fused_computation(comp, node, "candidate", NameAllocator(set(taken)))

    fast = TilingVerdicts(comp, module, build)
    full = TilingVerdicts(comp, module, build, shortcut=False)
    shortcut_used = 0
    for node in _candidate_nodes(comp):
        shortcut_used += elementwise_dims(comp, node) is not None
        assert (fast.verdict(node) is None) == (full.verdict(node) is None), node
    assert shortcut_used > 0


_TRANSPOSE_CHAIN = "HloModule chain\nENTRY e {\n  v0 = f32[8,16] parameter(0)\n" + "".join(
    f"  {'ROOT ' if i == 24 else ''}v{i} = f32[{'16,8' if ((i + 1) // 2) % 2 else '8,16'}] "
    + (f"transpose(v{i - 1}), dimensions={{1,0}}\n" if i % 2 else f"negate(v{i - 1})\n")
    for i in range(1, 25)) + "}"


@pytest.mark.parametrize("text", [_TRANSPOSE_CHAIN] + [
    (HLO / f"{n}.before.hlo").read_text() for n in ("layernorm", "bf16_softmax", "transpose",
                                                      "reductions", "slices", "pad")],
    ids=["transpose_chain", "layernorm", "bf16_softmax", "transpose", "reductions", "slices",
         "pad"])
def test_isomorphic_candidates_get_the_full_analysis_verdict(text):
    # The verdict memo shares "tileable" between candidates of equal structure: every
    # candidate it answers must get the verdict the full analysis gives it.
    module = canonicalize(parse_hlo(text))
    comp = module.entry
    taken = {i.name for c in module.computations for i in c.instructions}

    def build(node):
        return fused_computation(comp, node, "candidate", NameAllocator(set(taken)))

    fast = TilingVerdicts(comp, module, build)
    structures: dict[tuple, list[Node]] = {}
    for node in _candidate_nodes(comp):
        full = analysis_problem(build(node))
        assert (fast.verdict(node) is None) == (full is None), node
        structure = candidate_structure(comp, node)
        if structure is not None:
            structures.setdefault(structure, []).append(node)
    if text is _TRANSPOSE_CHAIN:  # the chain repeats itself: the memo must be hit
        assert any(len(nodes) > 1 for nodes in structures.values())
        assert fast._tileable_structures


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name.split(".")[0])
def test_corpus_fusions_are_tileable_or_hold_an_untileable_op(path):
    _assert_no_fusion_made_untileable(fuse_module(parse_hlo(path.read_text())).module)


SHAPES = [(24,), (2, 12), (3, 8), (4, 6), (6, 4), (8, 3), (12, 2), (2, 3, 4), (4, 3, 2)]


@st.composite
def index_chains(draw):
    """Chains of reshapes, transposes, reverses and elementwise ops on 24 elements."""
    lines = ["  x0 = f32[24] parameter(0)"]
    pool: list[tuple[str, tuple[int, ...]]] = [("x0", (24,))]
    for n in range(draw(st.integers(2, 7))):
        name = f"v{n}"
        src, dims = pool[-1] if draw(st.integers(0, 3)) else draw(st.sampled_from(pool))
        # Reshapes and transposes weigh most: their compositions are what may not tile.
        op = draw(st.sampled_from(("reshape", "reshape", "transpose", "transpose", "reverse",
                                   "negate", "add") if len(dims) == 1 or n % 2 else
                                  ("transpose", "reshape")))
        if op == "reshape" and len(dims) == 1 and draw(st.booleans()):
            # Split, transpose, collapse back: the composition that most often cannot tile.
            split = draw(st.sampled_from(SHAPES[1:]))
            perm = draw(st.permutations(range(len(split))))
            moved = tuple(split[p] for p in perm)
            lines.append(f"  {name}s = f32[{','.join(map(str, split))}] reshape({src})")
            lines.append(f"  {name}t = f32[{','.join(map(str, moved))}] transpose({name}s), "
                         f"dimensions={{{','.join(map(str, perm))}}}")
            out, rest = (24,), f"reshape({name}t)"
        elif op == "reshape":  # split from or collapse to rank 1: each tiles on its own
            out = draw(st.sampled_from(SHAPES)) if len(dims) == 1 else (24,)
            rest = "reshape(" + src + ")"
        elif op == "transpose":
            perm = draw(st.permutations(range(len(dims))))
            out = tuple(dims[p] for p in perm)
            rest = f"transpose({src}), dimensions={{{','.join(map(str, perm))}}}"
        elif op == "reverse":
            out = dims
            rest = f"reverse({src}), dimensions={{{draw(st.integers(0, len(dims) - 1))}}}"
        elif op == "add":
            other = draw(st.sampled_from([p for p, d_ in pool if d_ == dims]))
            out, rest = dims, f"add({src}, {other})"
        else:
            out, rest = dims, f"negate({src})"
        lines.append(f"  {name} = f32[{','.join(map(str, out))}] {rest}")
        pool.append((name, out))
    # End in real work, so that a trailing reshape (a bitcast) is worth fusing.
    last, dims = pool[-1]
    lines.append(f"  end = f32[{','.join(map(str, dims))}] negate({last})")
    pool.append(("end", dims))
    picks = [pool[-1]]  # the chain's end, perhaps with one value from its middle
    if draw(st.booleans()) and len(pool) > 2:
        picks.append(draw(st.sampled_from(pool[1:-1])))
    shapes = ", ".join(f"f32[{','.join(map(str, d_))}]" for _, d_ in picks)
    lines.append(f"  ROOT out = ({shapes}) tuple({', '.join(p for p, _ in picks)})")
    return "HloModule chain\nENTRY main {\n" + "\n".join(lines) + "\n}\n"


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(index_chains())
def test_random_index_chains_fuse_exactly_and_never_become_untileable(text):
    module = parse_hlo(text)
    verify_module(module)
    result = _fuse_checked(text)
    _assert_no_fusion_made_untileable(result.module)
    assert count_kernels(result.module) <= count_kernels(module)
