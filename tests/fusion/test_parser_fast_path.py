"""The parser's one-match reading of common instruction heads (``parser._SIMPLE_HEAD``) gives
exactly what the token-by-token reading gives: the same module, the same source locations, the
same error (message, line, column, text, expected) for every program of the corpus and for
heads at the edges of what the pattern takes.
"""
from __future__ import annotations

import pathlib
import re

import pytest

import fusion.text.parser
from fusion.errors import HloParseError
from fusion.text.parser import parse_hlo

ROOT = pathlib.Path(__file__).parents[2]
CORPUS = sorted((ROOT / "tests" / "data" / "hlo").glob("*.hlo")) + sorted(
    (ROOT / "bench" / "programs").glob("**/*.hlo"))

#: Heads near the pattern's edges, each in an ENTRY after ``p = f32[2]{0} parameter(0)``.
EDGE_HEADS = [
    "ROOT n = f32[2]{0} negate(p)",
    "ROOT n = f32[2] negate(%p)",
    "ROOT %n = f32[2]{0} negate(p)",
    "ROOT = f32[2]{0} negate(p)",  # an instruction named ROOT
    "ROOT\n  n =\tf32[2]{0}\n negate( p )",
    "ROOT n=f32[2]{0}negate(p)",
    "ROOT n = f32[2]{} negate(p)",
    "ROOT n = f32[2]{0 } negate(p)",
    "ROOT n = f32[2] {0} negate(p)",
    "ROOT n = f32[ 2] negate(p)",
    "ROOT n = f32[<=2] negate(p)",
    "ROOT n = f32[2]{0:T(2)} negate(p)",
    "ROOT n = (f32[2]) tuple(p)",
    "ROOT n = f32[2]{0} negate(/*x*/p)",
    "ROOT n = f32[2]{0} negate(p) // done",
    "ROOT n = f32[2]{0} /* op */ negate(p)",
    "ROOT n = f32[2]{0} negate(f32[2]{0} p)",
    "ROOT n = f32[2]{0} add(p, p), metadata={op_name=\"a\"}",
    "ROOT n = f32[2]{0} add(p,p)",
    "ROOT n = f32[2]{0} add(p, )",
    "ROOT n = f32[2]{0} add(, p)",
    "ROOT n = f32[2]{0} negate(0)",
    "ROOT n = f32[2]{0} negate(p-)",
    "ROOT n = f32[2]{0} negate(p->q)",
    "ROOT inf = f32[2]{0} negate(p)",
    "ROOT inf.1 = f32[2]{0} negate(p)",
    "ROOT inf_1 = f32[2]{0} negate(p)",
    "ROOT %inf = f32[2]{0} negate(p)",
    "ROOT n = f32[2]{0} negate(nan)",
    "ROOT n = f32[2]{0} inf(p)",
    "ROOT n = f33[2]{0} negate(p)",
    "ROOT n = f32.x[2]{0} negate(p)",
    "ROOT n = %f32[2]{0} negate(p)",
    "ROOT n = f32[2]{0} parameter(1)",
    "ROOT n = f32[2]{0} parameter( 01 )",
    "ROOT n = f32[2]{0} parameter(x)",
    "ROOT n = f32[2]{0} parameter()",
    "ROOT n = f32[2]{0} parameter(1x)",
    "ROOT n = f32[2]{0} constant({1, 2})",
    "ROOT n = f32[2]{0} constant()",
    "ROOT n = f32[2]{0} negate(p), p = f32[2] negate(p)",
    "ROOT n == f32[2]{0} negate(p)",
    "ROOT n = f32[2]{0} negate p",
    "ROOT n = f32[2]{0} negate(p",
]


def _outcome(text: str):
    try:
        module = parse_hlo(text)
    except HloParseError as err:
        return ("error", str(err), err.line, err.column, err.text, err.expected)
    locations = [(c.name, c.location, [(i.name, i.location) for i in c.instructions])
                 for c in module.computations]
    return ("module", module, locations)


def _both_ways(text: str, monkeypatch) -> tuple:
    fast = _outcome(text)
    with monkeypatch.context() as patch:
        patch.setattr(fusion.text.parser, "_SIMPLE_HEAD", re.compile(r"(?!)"))  # never matches
        slow = _outcome(text)
    return fast, slow


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_every_corpus_program_parses_the_same_both_ways(path, monkeypatch):
    fast, slow = _both_ways(path.read_text(), monkeypatch)
    assert fast == slow


@pytest.mark.parametrize("head", EDGE_HEADS)
def test_heads_at_the_patterns_edges_parse_or_fail_the_same_both_ways(head, monkeypatch):
    text = f"HloModule m\nENTRY e {{\n  p = f32[2]{{0}} parameter(0)\n  {head}\n}}\n"
    fast, slow = _both_ways(text, monkeypatch)
    assert fast == slow


def test_the_pattern_takes_the_common_heads():
    """What the fast path is for: the heads XLA prints most (else it would buy nothing)."""
    for head in ("x.1 = f32[3,4]{1,0} parameter(0)", "ROOT add.2 = f32[] add(a.1, b.2)",
                 "%fusion = bf16[8,128]{1,0} fusion(%p0, %p1), kind=kLoop, calls=%f"):
        assert fusion.text.parser._SIMPLE_HEAD.match(head), head
