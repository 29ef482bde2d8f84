"""The HLO text parser: what XLA and JAX print, into ``fusion.ir.hlo_module`` IR.

Accepts both styles XLA prints: ``jax.jit(f).lower(x).as_text(dialect="hlo")`` (names without
``%``, ``ENTRY main.3 {``) and ``.compile().as_text()`` / ``--xla_dump_to`` dumps (``%`` names,
computation signatures, stack-frame tables, ``metadata``/``backend_config``), and what XLA's own
parser accepts beyond that: a module without the ``HloModule`` line (named
``module_<entry computation>``, as XLA names it) and computations written inline as attribute
values (``to_apply={ ... }``, named ``_``, ``_.1``, ... as XLA names them).  The parser is
syntactic: unknown opcodes and unknown attributes parse fine (unknown attributes are kept as
``RawText``); the verifier judges them later.  Every error is an ``HloParseError`` with line,
column, the offending text and what was expected.

>>> m = parse_hlo('''HloModule m
... ENTRY e {
...   p = f32[2] parameter(0)
...   ROOT n = f32[2] negate(p)
... }''')
>>> m.entry.root.opcode, m.entry.root.operands, m.entry.root.location
('negate', ('p',), SourceLocation(line=4, column=3))
"""
from __future__ import annotations

import re
from typing import Any

from fusion.text.attribute_parsing import (
    read_attribute_value,
    read_computation,
    read_computation_list,
    rule_for_attribute,
)
from fusion.ir.element_types import ELEMENT_TYPES
from fusion.text.stablehlo import looks_like_stablehlo, stablehlo_to_hlo
from fusion.text.lexer import BLANKS, NAME_BODY, Lexer, Token
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.ir.layout import Layout
from fusion.opcodes import traits
from fusion.text.implied_shapes import implied_shape
from fusion.text.literal_parsing import read_literal
from fusion.ir.shape import ArrayShape, Shape
from fusion.text.shape_parsing import is_shape_start, read_layout_at, read_shape

STACK_FRAME_TABLES = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")
_COMPUTATION_RULES = (read_computation, read_computation_list)

# A NAME token as the lexer reads it: ``inf`` and ``nan`` on their own are numbers.
_NAME = r"(?:%|(?!(?:inf|nan)\b))" + NAME_BODY
# The common instruction head in one match (parsing is lexing-bound, about ten tokens an
# instruction): ``[ROOT] name = f32[2,3]{1,0} opcode(a, b)`` or ``... parameter(0)``, blanks
# only between the tokens, an array shape whose dims and layout the shape reader's own fast
# path would take.  Anything else (comments, tuple shapes, tiled layouts, constants, errors)
# goes token by token; ``_Parser.instruction`` checks what the pattern cannot.
_SIMPLE_HEAD = re.compile(
    rf"(?:(?P<root>ROOT)[ \t\r\n]+(?={_NAME}))?(?P<name>{_NAME}){BLANKS}={BLANKS}"
    rf"(?P<dtype>[A-Za-z_][A-Za-z0-9_]*)\[(?P<dims>[0-9]+(?:,[0-9]+)*)?\]"
    rf"(?P<braces>\{{(?P<layout>[0-9]+(?:,[0-9]+)*)?\}})?{BLANKS}"
    rf"(?P<opcode>{_NAME}){BLANKS}\({BLANKS}"
    rf"(?:(?P<number>[0-9]+)|(?P<operands>{_NAME}(?:{BLANKS},{BLANKS}{_NAME})*))?{BLANKS}\)")


def parse_hlo(text: str) -> HloModule:
    """Parse a whole HLO module.

    With no computation marked ``ENTRY``, the last computation is the entry (as in XLA).

    >>> parse_hlo("HloModule m, is_scheduled=true\\nENTRY e { ROOT c = s32[] constant(7) }"
    ...           ).entry.root.attr("literal").values
    (7,)
    >>> parse_hlo("ENTRY e { ROOT c = s32[] constant(7) }").name  # no header: XLA's name
    'module_e'

    StableHLO text (``lowered.as_text()``'s default) is converted to HLO first, as XLA
    converts it (``fusion.text.stablehlo``; needs jax installed).
    """
    if looks_like_stablehlo(text):
        text = stablehlo_to_hlo(text)
    return _Parser(text).module()


def parse_module_header(text: str) -> tuple[tuple[str, str], ...]:
    """The attributes of a module's ``HloModule`` line, without parsing its computations.

    >>> parse_module_header("HloModule m, num_partitions=2\\nENTRY e { ROOT c = s32[] constant(7) }")
    (('num_partitions', '2'),)
    """
    return _Parser(text).header()[1]


def parse_shape(text: str) -> Shape:
    """Parse a shape such as ``bf16[37,300]{1,0:T(8,128)(2,1)}`` or ``(f32[2], s32[])``.

    >>> parse_shape("f32[<=8,3]").dynamic
    (True, False)
    """
    lexer = Lexer(text)
    shape = read_shape(lexer)
    _expect_end(lexer, "shape")
    return shape


def parse_layout(text: str) -> Layout:
    """Parse a layout such as ``{1,0:T(8,128)(2,1)}``.

    >>> parse_layout("{0,1:T(2,*)E(4)S(1)}")
    Layout(minor_to_major=(0, 1), tiles=(Tile(dims=(2, -1)),), element_size_in_bits=4, memory_space=1, extras=())
    """
    lexer = Lexer(text)
    start = lexer.peek()
    if start.kind != "{":
        raise lexer.error("expected a layout", start.pos, expected="'{' opening a layout such as {1,0}")
    layout, end = read_layout_at(lexer, start.pos)
    lexer.seek(end)
    _expect_end(lexer, "layout")
    return layout


def _expect_end(lexer: Lexer, what: str) -> None:
    tok = lexer.peek()
    if tok.kind != "EOF":
        raise lexer.error(f"unexpected text {tok.text!r} after the {what}", tok.pos,
                          expected=f"the end of the {what}")


def _default_scalar_broadcast_dims(instructions: list[HloInstruction], at: list[int],
                                   shapes: dict[str, Shape]) -> None:
    """Give ``dimensions={}`` to the broadcasts at ``at`` whose operand is a scalar, as XLA's
    parser does (``dimensions`` is optional exactly then); any other stays without it, and the
    verifier says the attribute is missing.

    >>> m = parse_hlo("ENTRY e {\\n  x = f32[] parameter(0)\\n  ROOT b = f32[2] broadcast(x)\\n}")
    >>> m.entry.root.attr("dimensions")
    ()
    """
    for k in at:
        instr = instructions[k]
        operand = shapes.get(instr.operands[0]) if len(instr.operands) == 1 else None
        if isinstance(operand, ArrayShape) and operand.rank == 0:
            instructions[k] = instr.replace(attributes=instr.attributes + (("dimensions", ()),))


#: Name XLA gives a computation written inline (uniquified ``_.1``, ``_.2``, ...).
INLINE_COMPUTATION_NAME = "_"
#: Prefix of the name XLA gives a module without the ``HloModule`` line.
HEADERLESS_MODULE_PREFIX = "module_"


class _Parser:
    def __init__(self, text: str) -> None:
        self.lexer = Lexer(text)
        #: Inline computations parsed since the last top-level one (callees come first).
        self._inline: list[HloComputation] = []
        self._computation_names: set[str] = set()

    def name(self, what: str) -> Token:
        tok = self.lexer.next()
        if tok.kind != "NAME":
            raise self.lexer.error(f"expected {what} but found {tok.text or 'end of input'!r}",
                                   tok.pos, expected=what)
        return tok

    # -- module ------------------------------------------------------------------------------

    def module(self) -> HloModule:
        lx = self.lexer
        name, attributes = self.header()
        stack_frames = self.stack_frame_tables()
        computations: list[HloComputation] = []
        entry_name = None
        seen: dict[str, Any] = {}
        while lx.peek().kind != "EOF":
            if not computations and lx.peek(1).kind == "=":
                raise lx.error("an HLO module must start with 'HloModule <name>' or a "
                               "computation", lx.peek().pos,
                               expected="HloModule <name>, or 'name {' / 'ENTRY name {'")
            comp = self.computation()
            if comp.name in seen:
                raise lx.error(f"duplicate computation name {comp.name!r}", seen[comp.name],
                               expected="unique computation names")
            seen[comp.name] = self._last_comp_pos
            computations += self._inline
            self._inline = []
            if comp.is_entry:
                if entry_name is not None:
                    raise lx.error(f"second ENTRY computation {comp.name!r} (first was "
                                   f"{entry_name!r})", self._last_comp_pos,
                                   expected="exactly one ENTRY computation")
                entry_name = comp.name
            computations.append(comp)
        if not computations:
            raise lx.error("module has no computations", lx.peek().pos,
                           expected="at least one computation 'name { ... }'")
        if entry_name is None:
            last = computations[-1]
            computations[-1] = HloComputation(last.name, last.instructions, last.root_name,
                                              True, last.location)
            entry_name = last.name
        if name is None:
            name = HEADERLESS_MODULE_PREFIX + entry_name
        return HloModule(name, tuple(computations), entry_name, attributes, stack_frames)

    def header(self) -> tuple[str | None, tuple[tuple[str, str], ...]]:
        """``HloModule name, key=value, ...``: the name (None without a header) and the
        attributes, values as written."""
        lx = self.lexer
        name = None
        attributes: list[tuple[str, str]] = []
        if lx.peek().text == "HloModule":
            lx.next()
            name = self.name("the module name after HloModule").text.lstrip("%")
            if lx.peek().kind == ":":  # 'HloModule m:' as some hand-written reproducers have it
                lx.next()
        while name is not None and lx.peek().kind == ",":
            lx.next()
            key = self.name("a module attribute name").text
            self.lexer.expect("=", f"'=' after module attribute {key}")
            start = lx.skip_space(lx.pos)
            end = lx.raw_value(start)
            if end == start:
                raise lx.error(f"missing value for module attribute {key}", start,
                               expected=f"a value after {key}=")
            attributes.append((key, lx.text[start:end]))
            lx.seek(end)
        return name, tuple(attributes)

    def stack_frame_tables(self) -> str:
        lx = self.lexer
        start = end = None
        while lx.peek().kind == "NAME" and lx.peek().text in STACK_FRAME_TABLES:
            tok = lx.next()
            if start is None:
                start = tok.pos
            end = tok.end
            while lx.peek().kind == "NUM" and lx.peek(1).kind in ("STRING", "{"):
                lx.next()
                value = lx.next()
                end = value.end if value.kind == "STRING" else lx.balanced(value.pos)
                lx.seek(end)
        return "" if start is None else lx.text[start:end]

    # -- computations ------------------------------------------------------------------------

    def computation(self) -> HloComputation:
        lx = self.lexer
        first = lx.peek()
        is_entry = first.text == "ENTRY"
        if is_entry:
            lx.next()
        name_tok = self.name("a computation name (or ENTRY)")
        self._last_comp_pos = name_tok.pos
        self._computation_names.add(name_tok.text.lstrip("%"))
        if lx.peek().kind == "(":
            self.signature()
        return self.body(name_tok, is_entry, first.pos)

    def body(self, name_tok: Token, is_entry: bool, first_pos: int) -> HloComputation:
        """The ``{ instructions }`` of computation ``name_tok`` (its ``{`` is next)."""
        lx = self.lexer
        self.lexer.expect("{", f"'{{' opening the body of computation {name_tok.text}")
        instructions: list[HloInstruction] = []
        names: dict[str, Shape] = {}
        root_name = None
        defaulted: list[int] = []  # broadcasts without dimensions (XLA's default below)
        while lx.peek().kind != "}":
            if lx.peek().kind == "EOF":
                raise lx.error(f"computation {name_tok.text} is not closed", lx.peek().pos,
                               text="<end of input>", expected="'}' closing the computation")
            instr_pos = lx.peek().pos
            instr, is_root = self.instruction()
            if instr.name in names:
                raise lx.error(f"duplicate instruction name {instr.name!r}", instr_pos,
                               expected="unique names within a computation")
            if instr.shape is None:
                instr = instr.replace(shape=self.implied(instr, names, instr_pos))
            names[instr.name] = instr.shape
            if instr.opcode == "broadcast" and not instr.has_attr("dimensions"):
                defaulted.append(len(instructions))
            if is_root:
                if root_name is not None:
                    raise lx.error(f"second ROOT {instr.name!r} (first was {root_name!r})",
                                   lx.text.rfind("ROOT", 0, lx.pos),
                                   expected="one ROOT per computation")
                root_name = instr.name
            instructions.append(instr)
        lx.next()
        if not instructions:
            raise lx.error(f"computation {name_tok.text} has no instructions", name_tok.pos,
                           expected="at least one instruction")
        if defaulted:
            _default_scalar_broadcast_dims(instructions, defaulted, names)
        return HloComputation(name_tok.text.lstrip("%"), tuple(instructions),
                              root_name or instructions[-1].name, is_entry,
                              lx.location(first_pos))

    def implied(self, instr: HloInstruction, shapes: dict[str, Shape], pos: int) -> Shape:
        """The shape of ``instr``, written without one, from its operands' (``implied_shapes``)."""
        missing = [o for o in instr.operands if o not in shapes]
        shape = (f"its operand {missing[0]!r} is not defined before it" if missing else
                 implied_shape(instr.opcode, [shapes[o] for o in instr.operands],
                               instr.attributes))
        if isinstance(shape, str):
            raise self.lexer.error(f"cannot infer the shape of {instr.opcode} {instr.name!r}: "
                                   f"{shape}", pos, expected=f"a shape before {instr.opcode}")
        return shape

    def inline_follows(self) -> bool:
        """Whether a computation body (``{ name = ...`` or ``{ ROOT ...``) comes next."""
        lx = self.lexer
        if lx.peek().kind != "{" or lx.peek(1).kind != "NAME":
            return False
        return lx.peek(1).text == "ROOT" or lx.peek(2).kind == "="

    def inline_computation(self) -> str:
        """Parse a computation written as an attribute value; returns the name given to it."""
        lx = self.lexer
        name, n = INLINE_COMPUTATION_NAME, 0
        while name in self._computation_names:
            n += 1
            name = f"{INLINE_COMPUTATION_NAME}.{n}"
        self._computation_names.add(name)
        brace = lx.peek()
        comp = self.body(Token("NAME", name, brace.pos, brace.pos), False, brace.pos)
        self._inline.append(comp)
        return name

    def signature(self) -> None:
        """``(p0: f32[2], p1: s32[]) -> f32[2]``: checked for syntax, then dropped (the
        parameter instructions carry the same information)."""
        lx = self.lexer
        lx.next()
        count = 0
        while lx.peek().kind != ")":
            if count:
                self.lexer.expect(",", "',' or ')' in the computation's parameter list")
            self.name("a parameter name in the computation's signature")
            self.lexer.expect(":", "':' between parameter name and shape")
            read_shape(lx)
            count += 1
        lx.next()
        self.lexer.expect("->", "'->' and the result shape after the parameter list")
        read_shape(lx)

    # -- instructions ------------------------------------------------------------------------

    def instruction(self) -> tuple[HloInstruction, bool]:
        lx = self.lexer
        first = lx.peek()
        head = self.simple_head(first.pos)
        if head is not None:
            is_root, name, shape, opcode, operands, attributes = head
        else:
            is_root, name, shape, opcode, operands, attributes = self.head(first)
        while lx.peek().kind == ",":
            lx.next()
            key = self.name("an attribute name after ','")
            self.lexer.expect("=", f"'=' after attribute {key.text}")
            if rule_for_attribute(key.text) in _COMPUTATION_RULES and self.inline_follows():
                attributes.append((key.text, self.inline_computation()))
                continue
            attributes.append((key.text, read_attribute_value(lx, key.text)))
        instr = HloInstruction(name.lstrip("%"), opcode, shape, operands, tuple(attributes),
                               lx.location(first.pos))
        return instr, is_root

    def simple_head(self, pos: int) -> tuple[bool, str, Shape, str, tuple[str, ...],
                                             list[tuple[str, Any]]] | None:
        """``head`` for the common form ``_SIMPLE_HEAD`` matches at ``pos``, in one step;
        None (nothing consumed) for any other, ``head`` then reads it token by token."""
        lx = self.lexer
        m = _SIMPLE_HEAD.match(lx.text, pos)
        if m is None:
            return None
        dtype, opcode, number, operands = m.group("dtype", "opcode", "number", "operands")
        if dtype not in ELEMENT_TYPES or opcode == "constant" \
                or (opcode == "parameter") != (number is not None):
            return None
        layout = None
        if m.start("braces") >= 0:
            text = m.group("layout")
            layout = Layout(tuple(int(d) for d in text.split(",")) if text else ())
        dims = m.group("dims")
        shape = ArrayShape(dtype, tuple(int(d) for d in dims.split(",")) if dims else (),
                           layout)
        lx.seek(m.end())
        if number is not None:
            return (m.start("root") >= 0, m.group("name"), shape, opcode, (),
                    [("parameter_number", int(number))])
        names = tuple(o.strip().lstrip("%") for o in operands.split(",")) if operands else ()
        return m.start("root") >= 0, m.group("name"), shape, opcode, names, []

    def head(self, first: Token) -> tuple[bool, str, Shape, str, tuple[str, ...],
                                          list[tuple[str, Any]]]:
        """``[ROOT] name = shape opcode(operands)``, token by token: whether it is the ROOT,
        the name as written, shape, opcode, operand names and the attributes written in
        operand position (a constant's literal, a parameter's number)."""
        lx = self.lexer
        is_root = first.kind == "NAME" and first.text == "ROOT" and lx.peek(1).kind == "NAME"
        if is_root:
            lx.next()
        name_tok = self.name("an instruction 'name = shape opcode(operands)' or '}'")
        self.lexer.expect("=", f"'=' after instruction name {name_tok.text}")
        # XLA's parser infers a shape left out (``t = tuple(a, b)``): ``body`` fills it in.
        left_out = lx.peek().kind == "NAME" and lx.peek(1).kind == "(" and not is_shape_start(lx)
        shape = None if left_out else read_shape(lx)
        opcode_tok = self.name(f"the opcode of {name_tok.text}")
        opcode = opcode_tok.text
        if shape is None and not traits(opcode).implied_shape:
            raise lx.error(f"expected a shape: {opcode} cannot leave it out (only tuple, "
                           "get-tuple-element and elementwise ops other than conversions can)",
                           opcode_tok.pos, expected="a shape such as f32[2,3]{1,0} or (f32[], s32[])")
        self.lexer.expect("(", f"'(' opening the operands of {opcode}")
        operands: list[str] = []
        attributes: list[tuple[str, Any]] = []
        if opcode == "constant" and lx.peek().kind != ")":
            attributes.append(("literal", read_literal(lx, shape)))
        elif opcode == "parameter":
            tok = lx.next()
            if tok.kind != "NUM" or not tok.text.isdigit():
                raise lx.error(f"bad parameter number {tok.text or 'end of input'!r}", tok.pos,
                               expected="parameter(<non-negative integer>)")
            attributes.append(("parameter_number", int(tok.text)))
        else:
            while lx.peek().kind != ")":
                if operands:
                    self.lexer.expect(",", f"',' or ')' in the operands of {name_tok.text}")
                operands.append(self.operand())
        self.lexer.expect(")", f"')' closing the operands of {name_tok.text}")
        return is_root, name_tok.text, shape, opcode, tuple(operands), attributes

    def operand(self) -> str:
        lx = self.lexer
        if is_shape_start(lx):
            read_shape(lx)  # the inline operand shape of older dumps carries nothing new
        tok = self.name("an operand name")
        return tok.text.lstrip("%")
