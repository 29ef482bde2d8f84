"""Every parse error path: an HloParseError with line, column, offending text and expectation."""
from __future__ import annotations

import pytest

from fusion.errors import HloParseError
from fusion.text.parser import parse_hlo, parse_layout, parse_shape


def body(*lines: str) -> str:
    return "HloModule m\nENTRY e {\n" + "\n".join("  " + l for l in lines) + "\n}\n"


P = "p = f32[4] parameter(0)"

# (text, line, column, words in the message, words in 'expected')
CASES = [
    ("x = f32[] constant(1)", 1, 1, "must start with 'HloModule", "HloModule <name>"),
    ("ENTRY e {}", 1, 7, "computation e has no instructions", "at least one instruction"),
    ("HloModule 7", 1, 11, "expected the module name", "module name"),
    ("HloModule m, =3", 1, 14, "expected a module attribute name", "module attribute name"),
    ("HloModule m, a 3", 1, 16, "expected '='", "'=' after module attribute a"),
    ("HloModule m, a=,", 1, 16, "missing value for module attribute a", "a value after a="),
    ("HloModule m\n// nothing", 2, 11, "module has no computations", "at least one computation"),
    ("HloModule m\na { ROOT x = f32[] parameter(0) }\na { ROOT y = f32[] parameter(0) }", 2, 1,
     "duplicate computation name 'a'", "unique computation names"),
    ("HloModule m\nENTRY a { ROOT x = f32[] parameter(0) }\nENTRY b { ROOT y = f32[] parameter(0) }",
     3, 7, "second ENTRY computation 'b'", "exactly one ENTRY"),
    ("HloModule m\nENTRY e ROOT", 2, 9, "expected '{'", "opening the body of computation e"),
    ("HloModule m\nENTRY e {\n  " + P, 3, 26, "computation e is not closed", "'}' closing"),
    ("HloModule m\nENTRY e {\n}", 2, 7, "computation e has no instructions", "at least one instruction"),
    (body(P, P), 4, 3, "duplicate instruction name 'p'", "unique names"),
    (body("ROOT " + P, "ROOT q = f32[4] parameter(1)"), 4, 3, "second ROOT 'q' (first was 'p')",
     "one ROOT per computation"),
    (body("p f32[4] parameter(0)"), 3, 5, "expected '='", "'=' after instruction name p"),
    (body("= f32[4] parameter(0)"), 3, 3, "expected an instruction", "or '}'"),
    (body("p = g32[4] parameter(0)"), 3, 7, "unknown element type 'g32'", "one of pred"),
    (body("p = parameter(0)"), 3, 7, "expected a shape", "f32[2,3]{1,0}"),
    (body("p = f32[4,x] parameter(0)"), 3, 13, "bad dimension 'x' in shape", "<=N"),
    (body("p = f32[4;] parameter(0)"), 3, 12, "unexpected character ';'", "punctuation"),
    (body("p = f32[4 3] parameter(0)"), 3, 13, "bad shape dimensions", "',' or ']'"),
    (body("p = (f32[4] s32[]) parameter(0)"), 3, 15, "bad tuple shape", "',' or ')' in a tuple"),
    (body("p = f32[4]{0:Q} parameter(0)"), 3, 16, "bad layout", "T(...), E(n), S(n)"),
    (body("p = f32[4]{0:T(4,x)} parameter(0)"), 3, 17, "bad tile dimension 'x'", "'*' in T(...)"),
    (body("p = f32[4]{0:E(x)} parameter(0)"), 3, 16, "bad layout field E(x)", "E(<integer>)"),
    (body("p = f32[4] (0)"), 3, 14, "expected the opcode of p", "opcode of p"),
    (body("p = f32[4] parameter 0"), 3, 24, "expected '('", "opening the operands of parameter"),
    (body("p = f32[4] parameter(x)"), 3, 24, "bad parameter number 'x'", "parameter(<non-negative"),
    (body(P, "n = f32[4] add(p p)"), 4, 20, "expected ','", "',' or ')' in the operands of n"),
    (body(P, "n = f32[4] negate(3)"), 4, 21, "expected an operand name but found '3'", "operand name"),
    (body(P, "n = f32[4] negate(p), 3"), 4, 25, "expected an attribute name", "attribute name"),
    (body(P, "n = f32[4] negate(p), foo"), 5, 1, "expected '='", "'=' after attribute foo"),
    (body(P, "n = f32[4] negate(p), foo="), 4, 29, "missing value for attribute foo", "a value after foo="),
    (body(P, "g = f32[] get-tuple-element(p), index=x"), 4, 41, "bad value for index 'x'", "an integer"),
    (body(P, "s = f32[4] sort(p), is_stable=yes"), 4, 33, "bad value for is_stable: 'yes'", "true or false"),
    (body(P, "c = pred[4] compare(p, p), direction={LT}"), 4, 40, "bad value for direction: '{'",
     "a word such as kLoop"),
    (body(P, "f = f32[4] fusion(p), calls=3"), 4, 31, "bad computation name for calls: '3'",
     "a computation name"),
    (body(P, "t = f32[4] transpose(p), dimensions={0 1}"), 4, 42, "expected ','", "',' or '}' in dimensions"),
    (body(P, "s = f32[2] slice(p), slice={0:2}"), 4, 31, "expected '['", "'[' opening a slice dim"),
    (body(P, "s = f32[2] slice(p), slice={[0]}"), 4, 33, "a slice dim needs start:limit", "[start:limit]"),
    (body(P, "q = f32[5] pad(p, p), padding=1_2_3_4"), 4, 33, "bad padding '1_2_3_4'", "low_high[_interior]"),
    (body(P, "r = f32[4] reduce-window(p, p), window={size=2 strude=1}"), 4, 50,
     "unknown window field 'strude'", "one of size, stride"),
    (body(P, "r = f32[4] reduce-window(p, p), window={size=2 stride=1x1}"), 4, 60,
     "window fields disagree", "1 dims in every field"),
    (body(P, "r = f32[4] reduce-window(p, p), window={size=2 pad=1}"), 4, 54, "bad window pad '1'",
     "low_high per dim"),
    (body("c = f32[4] constant({...})"), 3, 23, "constant value was elided",
     "the constant's values"),
    (body("c = f32[3] constant({1, 2})"), 3, 23, "constant has dims [2] but its shape is f32[3]",
     "3 values nested as [3]"),
    (body("c = f32[2,2] constant({ {1, 2}, {3} })"), 3, 35, "ragged array literal", "every row"),
    (body("c = f32[3] constant(1)"), 3, 23, "a scalar value cannot fill shape f32[3]", "nested array"),
    (body("c = pred[] constant(yes)"), 3, 23, "bad pred value 'yes'", "true or false"),
    (body("c = s32[] constant(1.5)"), 3, 22, "bad integer value '1.5'", "an integer"),
    (body("c = f32[] constant(abc)"), 3, 22, "bad floating-point value 'abc'", "a number, inf"),
    (body("c = s8[] constant(300)"), 3, 21, "value 300 out of range for s8", "[-128, 127]"),
    (body("c = c64[] constant(1)"), 3, 22, "expected a complex value", "(real, imag)"),
    (body("c = token[] constant(1)"), 3, 24, "a constant of type token cannot hold a value", "element type"),
    (body("c = (f32[], f32[]) constant(1, 2)"), 3, 31, "expected '(' opening a tuple constant", "tuple literal"),
    (body(P, 'n = f32[4] custom-call(p), custom_call_target="abc'), 4, 49, "unterminated string",
     "closing '\"'"),
    ("HloModule m /* never closed\nENTRY e {}", 1, 13, "unterminated /* comment", "'*/'"),
    (body(P, "n = f32[4] negate(p), metadata={op_name=\"x\"")[:-3], 4, 34, "unbalanced '{'", "matching '}'"),
    (body(P, "n = f32[4] negate(p), metadata={op_name=(x}"), 4, 45, "mismatched '}'", "')'"),
    ("HloModule m\nENTRY e (a f32[]) -> f32[] {\n ROOT a = f32[] parameter(0)\n}", 2, 12,
     "expected ':'", "':' between parameter name and shape"),
    ("HloModule m\nENTRY e (a: f32[]) f32[] {\n ROOT a = f32[] parameter(0)\n}", 2, 20,
     "expected '->'", "result shape after the parameter list"),
]


@pytest.mark.parametrize("text,line,column,message,expected", CASES,
                         ids=[c[3][:40] for c in CASES])
def test_error(text, line, column, message, expected):
    with pytest.raises(HloParseError) as info:
        parse_hlo(text)
    err = info.value
    assert message in err.message
    assert expected in err.expected
    assert (err.line, err.column) == (line, column)
    assert err.text
    assert str(err).startswith(f"{line}:{column}: ")


def test_elided_constant_says_how_to_redump():
    with pytest.raises(HloParseError) as info:
        parse_hlo(body("c = f32[4] constant({...})"))
    assert "--xla_dump_large_constants" in str(info.value)
    assert "print_large_constants=true" in str(info.value)
    assert info.value.text == "{...}"


def test_parse_shape_and_layout_errors():
    with pytest.raises(HloParseError, match="unexpected text 'x' after the shape"):
        parse_shape("f32[2] x")
    with pytest.raises(HloParseError, match="expected a layout"):
        parse_layout("1,0")
    with pytest.raises(HloParseError, match="unexpected text '}' after the layout"):
        parse_layout("{1,0}}")
