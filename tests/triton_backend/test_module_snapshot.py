"""Module snapshots (``triton_backend.runtime.ir_snapshot``): the form a plan keeps its module
in, so a warm compile decodes it instead of parsing HLO text.

A snapshot must give back exactly the module the parser gives (locations included) for every
corpus program, must name nothing but the IR's classes (bytes that name anything else are
refused before it is called), and a module holding a value outside the IR is not snapshotted.
"""
from __future__ import annotations

import pathlib
import pickle
import zlib
from fractions import Fraction

import pytest

from fusion.errors import FusionCompilerError
from fusion.ir.attributes import RawText
from fusion.ir.hlo_module import HloInstruction
from fusion.text.parser import parse_hlo
from fusion.text.printer import print_hlo
from triton_backend.runtime import ir_snapshot, module_plan

CORPUS = sorted((pathlib.Path(__file__).parents[1] / "data" / "hlo").glob("*.hlo"))


def _locations(module) -> list:
    return [(c.name, c.location, [(i.name, i.location) for i in c.instructions])
            for c in module.computations]


def _parsed(path: pathlib.Path):
    try:
        return parse_hlo(path.read_text())
    except FusionCompilerError:
        pytest.skip("not a module the parser takes")


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_a_snapshot_gives_back_the_parsed_module(path):
    module = _parsed(path)
    module.entry.users  # a cached_property filled in is not part of the snapshot
    data = ir_snapshot.encode(module)
    assert data is not None
    decoded = ir_snapshot.decode(data)
    assert decoded == module and _locations(decoded) == _locations(module)
    assert print_hlo(decoded) == print_hlo(module)
    assert "users" not in vars(decoded.entry)


class _Calls:
    """Pickles as a call of ``function`` (what a planted snapshot would try)."""

    def __init__(self, function, *args):
        self.reduced = (function, args)

    def __reduce__(self):
        return self.reduced


def _planted(payload) -> bytes:
    return ir_snapshot.SNAPSHOT_FORMAT + zlib.compress(pickle.dumps(payload, protocol=5))


@pytest.mark.parametrize("payload", ["open", "eval", "module-in-a-call"])
def test_a_snapshot_that_names_anything_but_ir_classes_is_refused_uncalled(payload, tmp_path):
    marker = tmp_path / "called"
    if payload == "open":
        data = _planted(_Calls(open, str(marker), "w"))
    elif payload == "eval":
        data = _planted(_Calls(eval, f"open({str(marker)!r}, 'w')"))
    else:  # a real module, inside a call of something else
        module = parse_hlo("HloModule m\nENTRY e { ROOT c = s32[] constant(7) }")
        data = _planted(_Calls(print, module, f"{marker}"))
    with pytest.raises(ir_snapshot.SnapshotError, match="not an IR class"):
        ir_snapshot.decode(data)
    assert not marker.exists()


@pytest.mark.parametrize("data", [b"", b"hlo-ir-snapshot/0\n", "truncated", "not-a-module",
                                  "not-compressed", "trailing-bytes", "inflates-too-far",
                                  "other-format"])
def test_bytes_that_are_not_a_module_snapshot_are_an_error(data, monkeypatch):
    module = parse_hlo("HloModule m\nENTRY e { ROOT c = s32[] constant(7) }")
    good = ir_snapshot.encode(module)
    if data == "truncated":
        data = good[: len(good) // 2]
    elif data == "not-a-module":
        data = ir_snapshot.encode(module.entry.root.shape) or b""
    elif data == "not-compressed":
        data = ir_snapshot.SNAPSHOT_FORMAT + pickle.dumps(module, protocol=5)
    elif data == "trailing-bytes":
        data = good + b"more"
    elif data == "inflates-too-far":
        monkeypatch.setattr(ir_snapshot, "MAX_BYTES", 100)
        data = good
    elif data == "other-format":
        data = good.replace(ir_snapshot.SNAPSHOT_FORMAT, b"hlo-ir-snapshot/99\n", 1)
    with pytest.raises(ir_snapshot.SnapshotError):
        ir_snapshot.decode(data)


def test_a_module_with_a_value_outside_the_ir_keeps_the_text_form():
    module = parse_hlo("HloModule m\nENTRY e { ROOT c = s32[] constant(7) }")
    root = module.entry.root
    odd = root.replace(attributes=root.attributes + (("note", Fraction(1, 3)),))
    entry = type(module.entry)(module.entry.name, (odd,), odd.name, True)
    changed = type(module)(module.name, (entry,), entry.name)
    assert ir_snapshot.encode(changed) is None
    assert ir_snapshot.encode(module) is not None
    plan = module_plan.ModulePlan.of(changed, module, {}, "fused", (), ())
    assert plan.snapshot is None and plan.module_text is not None and plan.locations
    with_ir_values = type(module)(module.name, (type(entry)(entry.name, (root.replace(
        attributes=(("note", RawText("x")),)),), root.name, True),), entry.name)
    assert isinstance(with_ir_values.entry.root, HloInstruction)
    assert ir_snapshot.decode(ir_snapshot.encode(with_ir_values)) == with_ir_values
