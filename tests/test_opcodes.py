"""The opcode table (``fusion/opcodes.py``) guards every phase's registry, and ``docs/ops.md``
is the table generated from them."""
from __future__ import annotations

from pathlib import Path

import pytest

from fusion.analysis.library_calls import HLO_LIBRARY_OPS
from fusion.evaluator.registry import OP_RULES
from fusion.opcodes import ELEMENTWISE_OPCODES, OPCODES, OpTraits, opcodes_with
from fusion.shapes.inference import SHAPE_RULES
from tiling.indexing_analysis.registry import INPUT_TO_OUTPUT, OUTPUT_TO_INPUT
from triton_backend.driver.op_coverage import COVERAGE
from triton_backend.host.host_ops import HOST_RULES
from triton_backend.lowering.rules.elementwise_rules import ELEMENTWISE_RULES
from triton_backend.lowering.rules.value_rules import STRUCTURAL_RULES
from triton_backend.reports.ops_table import ops_markdown

ROOT = Path(__file__).resolve().parent.parent

REGISTRIES = {
    "SHAPE_RULES": SHAPE_RULES,
    "OP_RULES": OP_RULES,
    "OUTPUT_TO_INPUT": OUTPUT_TO_INPUT,
    "INPUT_TO_OUTPUT": INPUT_TO_OUTPUT,
    "STRUCTURAL_RULES (lowering)": STRUCTURAL_RULES,
    "ELEMENTWISE_RULES (lowering)": ELEMENTWISE_RULES,
    "HOST_RULES": HOST_RULES,
    "COVERAGE": COVERAGE,
}


def test_the_opcode_table_is_alphabetical():
    assert list(OPCODES) == sorted(OPCODES)


def test_every_record_is_a_frozen_op_traits():
    assert all(isinstance(t, OpTraits) for t in OPCODES.values())
    with pytest.raises(AttributeError):
        OPCODES["add"].elementwise = False  # type: ignore[misc]


@pytest.mark.parametrize("name", sorted(REGISTRIES))
def test_registry_keys_are_known_opcodes(name):
    unknown = sorted(set(REGISTRIES[name]) - set(OPCODES))
    assert not unknown, f"{name} has keys that are not in fusion/opcodes.py: {unknown}"


def test_traits_hang_together():
    assert len(ELEMENTWISE_OPCODES) == 51
    assert opcodes_with("flop_free") <= ELEMENTWISE_OPCODES
    assert opcodes_with("foldable") <= ELEMENTWISE_OPCODES
    assert opcodes_with("control_flow") <= opcodes_with("host_only")
    assert set(OUTPUT_TO_INPUT) >= ELEMENTWISE_OPCODES


def test_the_library_call_decoders_are_the_library_call_ops():
    assert set(HLO_LIBRARY_OPS) == opcodes_with("library_call")


def test_unknown_trait_is_an_error():
    with pytest.raises(ValueError):
        opcodes_with("elementwsie")


def test_docs_ops_md_is_generated_from_the_registries():
    committed = (ROOT / "docs" / "ops.md").read_text()
    assert committed == ops_markdown(), (
        "docs/ops.md is stale: run python -m triton_backend.reports.ops_table > docs/ops.md")
