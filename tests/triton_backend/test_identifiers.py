"""Hostile HLO names and text must come out as inert, valid, distinct Python."""
from __future__ import annotations

import ast
import builtins
import io
import keyword
import tokenize

from hypothesis import given, settings
from hypothesis import strategies as st

from triton_backend.lowering.emitter.identifiers import (
    KERNEL_RESERVED_NAMES,
    IdentifierAllocator,
    comment_block,
    sanitize,
    string_literal,
)

HOSTILE = [
    "class", "def", "None", "True", "match", "case", "_", "type", "print", "tl", "triton",
    "__import__('os').system('x')", "__class__", "__init__", "a'b", 'a"b', "a\nb", "a\rb",
    "", "0", "123abc", "fusion.1", "fusion-1", "fusion_1", "ünïcödé", "日本", "a b", "a\x00b",
    "x" * 300, "\u2028", "𝔘nicode",
]
LINE_BREAKERS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"


def _is_safe_identifier(ident: str) -> bool:
    return (ident.isidentifier() and ident.isascii() and not keyword.iskeyword(ident)
            and not keyword.issoftkeyword(ident) and ident not in dir(builtins)
            and not ident.startswith("__") and ident not in KERNEL_RESERVED_NAMES)


def test_hostile_names_sanitize_to_safe_identifiers():
    for name in HOSTILE:
        ident = sanitize(name)
        assert _is_safe_identifier(ident), (name, ident)
        # The identifier works as an assignment target and does not run anything.
        namespace: dict = {}
        exec(f"{ident} = 7", namespace)  # noqa: S102 - the point of the test
        assert namespace[ident] == 7


def test_allocator_makes_colliding_names_distinct_and_is_deterministic():
    def run():
        names = IdentifierAllocator()
        return [names.allocate(n) for n in HOSTILE + ["fusion.1", "a.b", "a-b", "a_b"]]

    first = run()
    assert first == run()
    assert len(set(first)) == len(set(HOSTILE + ["a.b", "a-b", "a_b"]))
    assert all(_is_safe_identifier(i) for i in first)
    names = IdentifierAllocator()
    assert names.allocate("a.b") == "a_b"
    assert names.allocate("a-b") == "a_b_1"
    assert names.allocate("a_b") == "a_b_2"
    assert names.allocate("a_b_1") == "a_b_1_1"
    assert names.allocate("a.b") == "a_b"
    assert names.fresh("a_b") == "a_b_3"


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(max_size=8), max_size=20))
def test_allocator_is_injective(originals):
    names = IdentifierAllocator()
    idents = [names.allocate(o) for o in originals]
    by_original = dict(zip(originals, idents))
    assert len(set(by_original.values())) == len(by_original)
    assert all(_is_safe_identifier(i) for i in idents)


def _assert_comment_is_inert(text: str) -> None:
    block = comment_block(text)
    program = block + "RESULT = 1\n"
    namespace: dict = {}
    exec(compile(program, "<test>", "exec"), namespace)  # noqa: S102
    assert set(namespace) - {"__builtins__"} == {"RESULT"}
    tokens = list(tokenize.generate_tokens(io.StringIO(block).readline))
    kinds = {tokenize.tok_name[t.type] for t in tokens}
    assert kinds <= {"COMMENT", "NL", "ENDMARKER"}, kinds
    # Every way Python (or inspect/textwrap) splits lines sees only comment lines.
    assert all(line.startswith("# ") or line == "#" for line in block.splitlines())
    assert len(block.splitlines()) == max(1, len(text.splitlines()))
    ast.parse(program)
    block.encode("utf-8")  # no lone surrogates


def test_comment_block_hostile_text():
    payload = "print('owned')"
    for brk in LINE_BREAKERS:
        _assert_comment_is_inert(f"ROOT %x = f32[] add(%a, %b){brk}{payload}")
    _assert_comment_is_inert("a\x00b\ud800c\x7f\x1f\x1b[31m")
    _assert_comment_is_inert("")
    _assert_comment_is_inert("\n\n")


def test_comment_block_keeps_readable_text():
    assert comment_block("%p0 = bf16[8,128]{1,0:T(8,128)(2,1)} parameter(0)") == (
        "# %p0 = bf16[8,128]{1,0:T(8,128)(2,1)} parameter(0)\n")
    assert comment_block("a\nb", indent="    ") == "    # a\n    # b\n"


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(exclude_categories=()), max_size=40))
def test_comment_block_any_text_is_inert(text):
    _assert_comment_is_inert(text + "\nprint('x')")


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_string_literal_round_trips(text):
    literal = string_literal(text)
    assert literal.isascii() and "\n" not in literal and "\r" not in literal
    assert ast.literal_eval(literal) == text
    for brk in LINE_BREAKERS:
        assert brk not in literal
