"""StableHLO text, what ``jax.jit(f).lower(x).as_text()`` prints by default, is read as the
HLO ``as_text(dialect="hlo")`` prints, through XLA's own converter; without jax, or for MLIR
XLA cannot read, the error says what the text is and how to print HLO."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fusion.errors import HloParseError
from fusion.text import stablehlo
from fusion.text.parser import parse_hlo
from fusion.evaluator import evaluate

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

CORPUS = Path(__file__).resolve().parents[1] / "data" / "hlo"


def _layer(x, w):
    h = jnp.tanh(x @ w)
    return h / jnp.sum(h, axis=-1, keepdims=True), jnp.max(h)


def _lowered():
    x = np.linspace(-1, 1, 24, dtype=np.float32).reshape(4, 6)
    w = np.linspace(0.5, -0.5, 18, dtype=np.float32).reshape(6, 3)
    return jax.jit(_layer).lower(x, w), (x, w)


def test_stablehlo_text_is_read_as_the_hlo_jax_prints():
    lowered, (x, w) = _lowered()
    text = lowered.as_text()
    assert text.lstrip().startswith("module @") and stablehlo.looks_like_stablehlo(text)
    ours, jaxs = parse_hlo(text), parse_hlo(lowered.as_text(dialect="hlo"))
    # The same converter: the same ops (JAX's own printing names some of them otherwise).
    assert [[i.opcode for i in c] for c in ours.computations] == \
        [[i.opcode for i in c] for c in jaxs.computations]
    for got, want in zip(evaluate(ours, x, w), evaluate(jaxs, x, w)):
        np.testing.assert_array_equal(got, want)


def test_a_stablehlo_module_compiles_and_matches_xla():
    from tests.triton_backend.xla_three_way import compare_three_ways

    lowered, (x, w) = _lowered()
    compare_three_ways(lowered.as_text(), x, w, xla_text=lowered.as_text(dialect="hlo"))


def test_hlo_text_is_never_taken_for_mlir():
    for path in sorted(CORPUS.glob("*.hlo"))[:40]:
        assert not stablehlo.looks_like_stablehlo(path.read_text()), path.name


def test_without_jax_the_error_says_how_to_print_hlo(monkeypatch):
    monkeypatch.setattr(stablehlo, "_converter", lambda: None)
    with pytest.raises(HloParseError) as info:
        parse_hlo(_lowered()[0].as_text())
    assert "StableHLO" in info.value.message and "dialect='hlo'" in info.value.message
    assert (info.value.line, info.value.column) == (1, 1)


def test_mlir_xla_cannot_read_is_a_located_error():
    text = _lowered()[0].as_text()
    lines = text.splitlines()
    (row,) = [n for n, line in enumerate(lines) if "stablehlo.tanh" in line]
    column = lines[row].index("stablehlo.tanh") + 1
    lines[row] = lines[row].replace("stablehlo.tanh", "stablehlo.tanhx")
    with pytest.raises(HloParseError) as info:
        parse_hlo("\n".join(lines))
    assert "'stablehlo.tanhx' is unknown" in info.value.message
    assert (info.value.line, info.value.column) == (row + 1, column)
