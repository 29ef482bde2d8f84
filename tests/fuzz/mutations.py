"""The mutation engine of the front-end fuzzer: hostile variants of real HLO modules.

The seeds are the repository's real modules (``examples/gelu.hlo`` and
``tests/data/hlo/*.hlo``).  Each mutation is a pure function ``(rng, text) -> text`` that
works on the raw text (never through the project's own lexer, so it can produce anything a
user's tool might dump): token edits, wrong shapes, unknown ops and attributes, truncation,
huge and negative sizes, cycles, hostile names, missing ROOT/ENTRY, garbage attribute values,
bad layouts and deep nesting.  Everything is driven by one ``random.Random`` so a case is
reproducible from ``(seed, index)``.

>>> cases = list(generate(3, seed=1))
>>> [c.index for c in cases], all(isinstance(c.text, str) for c in cases)
([0, 1, 2], True)
>>> cases == list(generate(3, seed=1))
True
"""
from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

ROOT_DIR = Path(__file__).resolve().parents[2]

# A coarse tokenizer of our own: words (names, numbers, dtypes), strings, or one character.
_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"|[%A-Za-z0-9_.\-+]+|\S')
_SHAPE = re.compile(r"\b(pred|[sufc][0-9]+|bf16|f8e[0-9a-z]+|token)\[([^\]]*)\]")
_LAYOUT = re.compile(r"\]\{([^{}]*)\}")
_INSTR = re.compile(r"^(\s*(?:ROOT\s+)?)(%?[A-Za-z_][\w.\-]*)(\s*=\s*)", re.MULTILINE)
_OPCODE = re.compile(r"(\]\{?[^ ]*\}?|\)) ([a-z][a-z0-9\-]*)\(")
_ATTR = re.compile(r", ([a-z_]+)=")
_NUMBER = re.compile(r"(?<![\w.])-?[0-9]+(?![\w.])")

HUGE = (2**31, 2**32, 2**40, 2**62, 2**63, 2**63 - 1, 2**64, 10**30)
ELEMENT_TYPES = ("pred", "s4", "s8", "s16", "s32", "s64", "u8", "u32", "u64", "f16", "bf16",
                 "f32", "f64", "c64", "c128", "f8e4m3fn", "f8e5m2", "token", "f33", "s0",
                 "opaque", "tuple", "F32")
OPCODES = ("add", "negate", "tuple", "get-tuple-element", "reduce", "broadcast", "reshape",
           "transpose", "slice", "dynamic-slice", "gather", "scatter", "dot", "fusion", "while",
           "call", "conditional", "convert", "bitcast", "bitcast-convert", "iota", "constant",
           "parameter", "sort", "pad", "concatenate", "select", "compare", "reverse", "map",
           "reduce-window", "custom-call", "rng", "frobnicate", "all-reduce", "copy", "after-all",
           "dynamic-update-slice", "clamp", "exponential", "not", "popcnt", "tanh")
ATTRIBUTE_KEYS = ("dimensions", "slice", "padding", "window", "lhs_contracting_dims",
                  "rhs_contracting_dims", "lhs_batch_dims", "rhs_batch_dims", "kind", "calls",
                  "to_apply", "direction", "type", "iota_dimension", "index", "condition", "body",
                  "dynamic_slice_sizes", "offset_dims", "collapsed_slice_dims",
                  "start_index_map", "index_vector_dim", "slice_sizes", "update_window_dims",
                  "inserted_window_dims", "scatter_dims_to_operand_dims", "is_stable",
                  "branch_computations", "true_computation", "false_computation",
                  "custom_call_target", "exponent_bits", "mantissa_bits", "frobnication_level")
GARBAGE_VALUES = ("{}", "{-1}", "{0,0,0}", "{99}", "{1,0,-5}", "{" + ",".join("7" * 3) + "}",
                  "[", "{[0:2]}", "{[5:1]}", "{[0:10:0]}", "{[-3:2:1]}", "0_0x1_-2_1",
                  "0_0", "-1_-1x9_9", "{size=0x0 stride=0x0}", "{size=3x3 pad=-1_-1x0_0}",
                  "{size=2 stride=-1}", "kFoo", "LT", "GTE", "%nowhere", "{%a, %b}",
                  "f32[]", "true", "false", "1e400", "nan", "\"unterminated", '"\\"x"',
                  str(2**63), str(-(2**63)), "{" + str(2**40) + "}", "''", "{{{}}}", "((",
                  "])", "S32", "F32", "-0", "0x1f", "{1,}", "{,1}", "{:T(0)}", "...")
LAYOUTS = ("{1,1}", "{0}", "{5,0}", "{0,1,2}", "{}", "{-1,0}", "{1,0:T(0,128)}",
           "{1,0:T(-1,8)}", "{1,0:T(8,128)(0,1)}", "{1,0:T()}", "{1,0:T(*,*)}",
           "{1,0:E(x)}", "{1,0:S(-1)}", "{1,0:E(0)}", "{1,0:T(8,128)E(99999999999)}",
           "{0,1:T(" + str(2**40) + ",2)}", "{1,0:Q(1)}", "{1,0:T(2,2)(2,2)(2,2)(2,2)}",
           "{1,0:", "{1,0:T(8,128", "{" + str(2**63) + "}", "{1,0:T(3)(0)}", "{0:T(1)E(3)}")
HOSTILE_NAMES = ("nämé", "名前", "a\u202eb", "x\u200by", "emoji\U0001F600", "\x00nul",
                 "a b", "q\"uote", "dollar$", "back\\slash", "semi;colon", "-dash", ".dot",
                 "ROOT", "ENTRY", "HloModule", "f32", "parameter", "%%double", "x" * 5000,
                 "\ufeffbom", "tab\tname", "new\nline", "a{b}", "1digit", "a->b", "\ud800")
HOSTILE_CHARS = ("\x00", "\x7f", "\u202e", "\ufeff", "\U0001F600", "\\", "\"", "'", "$", "#",
                 "@", "`", "~", "\r", "\t", "\x0b", "\x0c", "é", "名", "\ud800", "/*", "//", "<=",
                 "->", "...", "*", ":")


@dataclass(frozen=True)
class Case:
    """One fuzz case: the mutated ``text`` of seed file ``source`` after ``mutations``."""

    index: int
    source: str
    mutations: tuple[str, ...]
    text: str


@lru_cache(maxsize=1)
def seed_modules() -> tuple[tuple[str, str], ...]:
    """(relative path, text) of every seed module, in a fixed order."""
    paths = [ROOT_DIR / "examples" / "gelu.hlo"]
    paths += sorted((ROOT_DIR / "tests" / "data" / "hlo").glob("*.hlo"))
    return tuple((str(p.relative_to(ROOT_DIR)), p.read_text(encoding="utf-8"))
                 for p in paths if p.exists())


# -- helpers ----------------------------------------------------------------------------------

def _tokens(text: str) -> list[re.Match]:
    return list(_TOKEN.finditer(text))


def _splice(text: str, start: int, end: int, new: str) -> str:
    return text[:start] + new + text[end:]


def _pick(rng: random.Random, matches: list[re.Match]) -> re.Match | None:
    return rng.choice(matches) if matches else None


def _instruction_names(text: str) -> list[str]:
    return [m.group(2).lstrip("%") for m in _INSTR.finditer(text)
            if not m.group(2).startswith(("HloModule", "ENTRY"))]


def _rename_everywhere(text: str, old: str, new: str) -> str:
    return re.sub(r"(?<![\w.\-])%?" + re.escape(old) + r"(?![\w.\-])", lambda _: new, text)


def _odd_number(rng: random.Random) -> str:
    return str(rng.choice((0, 1, -1, -2, 3, 7, 1000) + HUGE + (-(2**63),)))


# -- mutations --------------------------------------------------------------------------------

def delete_token(rng: random.Random, text: str) -> str:
    m = _pick(rng, _tokens(text))
    return text if m is None else _splice(text, m.start(), m.end(), "")


def duplicate_token(rng: random.Random, text: str) -> str:
    m = _pick(rng, _tokens(text))
    return text if m is None else _splice(text, m.start(), m.end(), m.group() * 2)


def swap_tokens(rng: random.Random, text: str) -> str:
    toks = _tokens(text)
    if len(toks) < 2:
        return text
    i = rng.randrange(len(toks) - 1)
    j = i + 1 if rng.random() < 0.6 else rng.randrange(len(toks))
    a, b = sorted((toks[i], toks[j]), key=lambda m: m.start())
    if a.start() == b.start():
        return text
    return (text[: a.start()] + b.group() + text[a.end(): b.start()] + a.group()
            + text[b.end():])


def change_dim(rng: random.Random, text: str) -> str:
    m = _pick(rng, [s for s in _SHAPE.finditer(text) if s.group(2)])
    if m is None:
        return text
    dims = m.group(2).split(",")
    k = rng.randrange(len(dims))
    dims[k] = rng.choice(("0", "1", "2", "3", "5", "<=4", "-1", "2x3", "", " ", "?"))
    return _splice(text, m.start(2), m.end(2), ",".join(dims))


def change_element_type(rng: random.Random, text: str) -> str:
    m = _pick(rng, list(_SHAPE.finditer(text)))
    return text if m is None else _splice(text, m.start(1), m.end(1), rng.choice(ELEMENT_TYPES))


def change_rank(rng: random.Random, text: str) -> str:
    m = _pick(rng, list(_SHAPE.finditer(text)))
    if m is None:
        return text
    dims = [d for d in m.group(2).split(",") if d]
    if dims and rng.random() < 0.5:
        del dims[rng.randrange(len(dims))]
    else:
        dims.insert(rng.randrange(len(dims) + 1), rng.choice(("1", "2", "4")))
    return _splice(text, m.start(2), m.end(2), ",".join(dims))


def huge_dim(rng: random.Random, text: str) -> str:
    m = _pick(rng, list(_SHAPE.finditer(text)))
    if m is None:
        return text
    dims = [d for d in m.group(2).split(",") if d] or ["1"]
    dims[rng.randrange(len(dims))] = str(rng.choice(HUGE))
    return _splice(text, m.start(2), m.end(2), ",".join(dims))


def resize_everywhere(rng: random.Random, text: str) -> str:
    """One dim size replaced in every shape, so elementwise modules stay valid (and huge)."""
    sizes = sorted({d for m in _SHAPE.finditer(text) for d in m.group(2).split(",")
                    if d.isdigit()})
    if not sizes:
        return text
    old = rng.choice(sizes)
    new = str(rng.choice((0, 1, 7) + HUGE))

    def shape(m: re.Match) -> str:
        dims = ",".join(new if d == old else d for d in m.group(2).split(","))
        return f"{m.group(1)}[{dims}]"

    return _SHAPE.sub(shape, text)


def retype_everywhere(rng: random.Random, text: str) -> str:
    """One element type replaced in every shape (and constant), keeping the module consistent."""
    types = sorted({m.group(1) for m in _SHAPE.finditer(text)})
    if not types:
        return text
    old = rng.choice(types)
    new = rng.choice(ELEMENT_TYPES)
    return re.sub(r"\b" + re.escape(old) + r"\[", new + "[", text)


def negative_size(rng: random.Random, text: str) -> str:
    numbers = list(_NUMBER.finditer(text))
    m = _pick(rng, numbers)
    if m is None:
        return text
    return _splice(text, m.start(), m.end(), "-" + m.group().lstrip("-") if m.group() != "0"
                   else "-1")


def odd_number(rng: random.Random, text: str) -> str:
    m = _pick(rng, list(_NUMBER.finditer(text)))
    return text if m is None else _splice(text, m.start(), m.end(), _odd_number(rng))


def unknown_op(rng: random.Random, text: str) -> str:
    m = _pick(rng, list(_OPCODE.finditer(text)))
    if m is None:
        return text
    return _splice(text, m.start(2), m.end(2), rng.choice(OPCODES))


def unknown_attribute(rng: random.Random, text: str) -> str:
    lines = text.split("\n")
    candidates = [k for k, line in enumerate(lines) if " = " in line and line.rstrip().endswith(")")
                  or re.search(r"\)\s*,", line)]
    if not candidates:
        return text
    k = rng.choice(candidates)
    key = rng.choice(ATTRIBUTE_KEYS)
    lines[k] = lines[k].rstrip() + f", {key}={rng.choice(GARBAGE_VALUES)}"
    return "\n".join(lines)


def rename_attribute(rng: random.Random, text: str) -> str:
    m = _pick(rng, list(_ATTR.finditer(text)))
    return text if m is None else _splice(text, m.start(1), m.end(1), rng.choice(ATTRIBUTE_KEYS))


def garbage_attribute_value(rng: random.Random, text: str) -> str:
    m = _pick(rng, list(_ATTR.finditer(text)))
    if m is None:
        return text
    start = m.end()
    end = start
    depth = 0
    while end < len(text):
        c = text[end]
        if c in "{[(":
            depth += 1
        elif c in "}])":
            if depth == 0:
                break
            depth -= 1
        elif (c in ",\n") and depth == 0:
            break
        end += 1
    return _splice(text, start, end, rng.choice(GARBAGE_VALUES))


def truncate(rng: random.Random, text: str) -> str:
    return text[: rng.randrange(len(text) + 1)]


def cycle(rng: random.Random, text: str) -> str:
    """An operand renamed to itself or to a later instruction."""
    lines = text.split("\n")
    defs = [(k, m.group(2).lstrip("%")) for k, line in enumerate(lines)
            if (m := _INSTR.match(line)) and "(" in line]
    if len(defs) < 2:
        return text
    pos = rng.randrange(len(defs))
    k, _ = defs[pos]
    later = [n for _, n in defs[pos:]]
    target = rng.choice(later)
    line = lines[k]
    opening = line.find("(", line.find("="))
    closing = line.find(")", opening)
    operands = line[opening + 1: closing]
    names = re.findall(r"%?[A-Za-z_][\w.\-]*", operands)
    if not names:
        return text
    victim = rng.choice(names)
    new_ops = operands.replace(victim, ("%" if victim.startswith("%") else "") + target, 1)
    lines[k] = line[: opening + 1] + new_ops + line[closing:]
    return "\n".join(lines)


def hostile_name(rng: random.Random, text: str) -> str:
    names = _instruction_names(text)
    if not names:
        return text
    return _rename_everywhere(text, rng.choice(names), rng.choice(HOSTILE_NAMES))


def duplicate_name(rng: random.Random, text: str) -> str:
    matches = [m for m in _INSTR.finditer(text)]
    if len(matches) < 2:
        return text
    a, b = rng.sample(matches, 2)
    return _splice(text, a.start(2), a.end(2), b.group(2))


def hostile_char(rng: random.Random, text: str) -> str:
    pos = rng.randrange(len(text) + 1)
    return _splice(text, pos, pos, rng.choice(HOSTILE_CHARS))


def remove_root(rng: random.Random, text: str) -> str:
    spots = [m.start() for m in re.finditer(r"ROOT ", text)]
    if not spots:
        return text
    pos = rng.choice(spots)
    return _splice(text, pos, pos + 5, "")


def remove_entry(rng: random.Random, text: str) -> str:
    return text.replace("ENTRY ", "", 1)


def remove_header(rng: random.Random, text: str) -> str:
    return text.replace("HloModule", rng.choice(("", "HloModul", "Module", "HloModule HloModule")),
                        1)


def wrong_layout(rng: random.Random, text: str) -> str:
    m = _pick(rng, list(_LAYOUT.finditer(text)))
    if m is None:
        return text
    return _splice(text, m.start() + 1, m.end(), rng.choice(LAYOUTS))


def deep_nesting(rng: random.Random, text: str) -> str:
    depth = rng.choice((50, 500, 3000, 20000))
    kind = rng.randrange(4)
    shape = _pick(rng, list(_SHAPE.finditer(text)))
    if kind == 0 and shape is not None:  # a tuple shape nested ``depth`` deep
        return _splice(text, shape.start(), shape.end(),
                       "(" * depth + shape.group() + ")" * depth)
    attr = _pick(rng, list(_ATTR.finditer(text)))
    if kind == 1 and attr is not None:  # brackets in an attribute value
        return _splice(text, attr.end(), attr.end(), "{" * depth + "}" * depth + ",x=")
    if kind == 2:  # an unbalanced run of openers
        pos = rng.randrange(len(text) + 1)
        return _splice(text, pos, pos, rng.choice("([{") * depth)
    literal = "{" * depth + "1" + "}" * depth  # a deeply nested constant literal
    return text.replace("constant(", "constant(" + literal + "", 1) if "constant(" in text \
        else text + f"\nx = f32[] constant({literal})\n"


def duplicate_line(rng: random.Random, text: str) -> str:
    lines = text.split("\n")
    k = rng.randrange(len(lines))
    lines.insert(rng.randrange(len(lines) + 1), lines[k])
    return "\n".join(lines)


def delete_line(rng: random.Random, text: str) -> str:
    lines = text.split("\n")
    del lines[rng.randrange(len(lines))]
    return "\n".join(lines)


def swap_lines(rng: random.Random, text: str) -> str:
    lines = text.split("\n")
    if len(lines) < 2:
        return text
    i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
    lines[i], lines[j] = lines[j], lines[i]
    return "\n".join(lines)


MUTATIONS: dict[str, Callable[[random.Random, str], str]] = {
    f.__name__: f for f in (
        change_dim, change_element_type, change_rank, cycle, deep_nesting, delete_line,
        delete_token, duplicate_line, duplicate_name, duplicate_token, garbage_attribute_value,
        hostile_char, hostile_name, huge_dim, negative_size, odd_number, remove_entry,
        remove_header, remove_root, rename_attribute, resize_everywhere, retype_everywhere,
        swap_lines, swap_tokens, truncate,
        unknown_attribute, unknown_op, wrong_layout,
    )
}


def mutate(rng: random.Random, text: str, count: int) -> tuple[str, tuple[str, ...]]:
    """``text`` after ``count`` random mutations, and their names in order."""
    applied = []
    for _ in range(count):
        name = rng.choice(sorted(MUTATIONS))
        text = MUTATIONS[name](rng, text)
        applied.append(name)
    return text, tuple(applied)


def generate(count: int, seed: int = 0) -> Iterator[Case]:
    """``count`` reproducible cases; most carry one mutation, some two or three."""
    seeds = seed_modules()
    for index in range(count):
        rng = random.Random(f"{seed}:{index}")
        source, text = seeds[rng.randrange(len(seeds))]
        n = rng.choices((1, 2, 3), weights=(6, 3, 1))[0]
        mutated, applied = mutate(rng, text, n)
        yield Case(index, source, applied, mutated)
