"""Every module of the jax-generated corpus parses, matches what XLA printed, and round-trips."""
from __future__ import annotations

import pathlib
import re

import pytest

from fusion.text.parser import parse_hlo, parse_shape
from fusion.text.printer import print_hlo
from fusion.ir.shape import TupleShape

ROOT = pathlib.Path(__file__).resolve().parents[2]
CORPUS = sorted((ROOT / "tests" / "data" / "hlo").glob("*.hlo"))
FILES = CORPUS + [ROOT / "examples" / "gelu.hlo"]


def test_corpus_is_there():
    names = {p.name for p in CORPUS}
    assert len(CORPUS) >= 25
    for case in ("softmax", "gather", "scatter", "fori_loop", "cond", "max_pool", "sort"):
        assert f"{case}.before.hlo" in names and f"{case}.after.hlo" in names


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_parse_matches_text(path):
    text = path.read_text()
    module = parse_hlo(text)
    # Independent truth: the raw text itself, read line by line.
    instruction_lines = [l for l in text.splitlines() if re.match(r"\s+(ROOT )?%?[\w.\-]+ = ", l)]
    assert sum(len(c.instructions) for c in module.computations) == len(instruction_lines)
    computation_lines = [l for l in text.splitlines() if l.rstrip().endswith("{") and
                         not l.startswith(" ")]
    assert len(module.computations) == len(computation_lines)
    entry_line = next(l for l in computation_lines if l.startswith("ENTRY"))
    assert module.entry_name == entry_line.split()[1].lstrip("%")
    root_lines = [l for l in instruction_lines if l.strip().startswith("ROOT ")]
    assert {c.root_name for c in module.computations} == {
        l.split()[1].lstrip("%") for l in root_lines}
    for comp in module.computations:
        for instr in comp.instructions:
            line = text.splitlines()[instr.location.line - 1]
            assert line[instr.location.column - 1:].lstrip("ROOT ").lstrip("%").startswith(
                instr.name + " = ")


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_entry_parameters_match_entry_computation_layout(path):
    module = parse_hlo(path.read_text())
    layout_text = dict(module.attributes)["entry_computation_layout"]
    params_text, result_text = layout_text[1:-1].rsplit("->", 1)
    params = parse_shape(params_text)
    assert isinstance(params, TupleShape)
    assert tuple(p.shape for p in module.entry.parameters) == params.elements
    assert module.entry.root.shape == parse_shape(result_text)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_round_trip(path):
    module = parse_hlo(path.read_text())
    printed = print_hlo(module)
    again = parse_hlo(printed)
    assert again == module
    assert print_hlo(again) == printed


@pytest.mark.parametrize("path", sorted(ROOT.joinpath("tests/data/hlo").glob("*.before.hlo")),
                         ids=lambda p: p.name)
def test_printer_reproduces_jax_unoptimized_text(path):
    """Our style is jax's ``.lower().as_text(dialect="hlo")``: the text comes back verbatim
    except for float constants, which we print with the fewest digits for their type, and the
    ``/*index=5*/`` comments XLA puts in long tuple shapes."""
    text = path.read_text()
    printed = print_hlo(parse_hlo(text))
    def strip(s: str) -> str:
        s = re.sub(r"/\*index=\d+\*/", "", s)
        return re.sub(r"constant\([^)]*\)", "constant(_)", s).rstrip()

    assert strip(printed) == strip(text)


def test_gelu_example():
    module = parse_hlo((ROOT / "examples" / "gelu.hlo").read_text())
    assert module.name == "m"
    assert module.entry_name == "main"
    fusion = module.entry.root
    assert (fusion.opcode, fusion.attr("kind"), fusion.attr("calls")) == ("fusion", "kLoop", "gelu")
    gelu = module.computation("gelu")
    assert gelu.root_name == "multiply_0"
    assert gelu.instruction("bcast_0").operands == ("constant_0",)
    assert gelu.instruction("constant_2").attr("literal").values == (0.796875,)  # bf16(0.79785)


def test_parses_5000_instructions_quickly():
    lines = ["HloModule big", "ENTRY e {", "  p0 = f32[16,128]{1,0} parameter(0)"]
    for i in range(5000):
        prev = f"add.{i - 1}" if i else "p0"
        lines.append(f"  %add.{i} = f32[16,128]{{1,0}} add(f32[16,128]{{1,0}} %{prev}, p0), "
                     f'metadata={{op_name="jit(f)/add" stack_frame_id=2}}')
    lines.append("}")
    module = parse_hlo("\n".join(lines))
    assert len(module.entry.instructions) == 5001
    assert module.entry.root.operands == ("add.4998", "p0")
