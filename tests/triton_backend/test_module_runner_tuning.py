"""``compile_hlo`` reuses tuned tilings from the tuning database (``$FUSION_TUNING_DB``).

Entries are written into a temporary database for the fusions of the module ``compile_hlo``
actually compiles (after the fusion pass), for a named device; the interpreter's default
(``tuning_device="auto"`` on CPU) looks nothing up, and a simulated GPU resolves to its key.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from fusion.evaluator import evaluate
from fusion.evaluator.npz_io import random_inputs
from fusion.text.parser import parse_hlo
from triton_backend import compile_hlo
from triton_backend.runtime.device_specs import DEVICES
from triton_backend.host.input_validation import tensor_from_numpy, tensor_to_numpy
from triton_backend.driver.module_compiler import resolve_tuning_device
from triton_backend.runtime.tuning_db import TuningDb, fusion_key

# Unfused: the pass makes one loop fusion of the three elementwise ops.
TEXT = """HloModule tuned
ENTRY e {
  x = f32[8,64] parameter(0)
  y = f32[8,64] parameter(1)
  a = f32[8,64] add(x, y)
  m = f32[8,64] multiply(a, x)
  ROOT n = f32[8,64] negate(m)
}"""


@pytest.fixture
def db(tmp_path, monkeypatch):
    path = tmp_path / "tuning.sqlite"
    monkeypatch.setenv("FUSION_TUNING_DB", str(path))
    return TuningDb(path)


def _store(db, tile_sizes, device="h100", text=TEXT):
    """Store ``tile_sizes`` for the one fusion of the compiled module; returns its name."""
    untuned = compile_hlo(text, tuning_device=None)
    (name,) = untuned.fusions
    db.put(fusion_key(untuned.module, name, device),
           {"tile_sizes": list(tile_sizes), "reduction_chunk": None, "num_warps": 2})
    return name, untuned.fusions[name]


def _run_matches_the_evaluator(compiled) -> None:
    module = parse_hlo(TEXT)
    inputs = random_inputs(module, seed=2)
    outputs = compiled(*[tensor_from_numpy(a, "f32") for a in inputs])
    (want,) = evaluate(module, *inputs)
    np.testing.assert_array_equal(tensor_to_numpy(outputs[0]), want)


def test_an_entry_for_the_named_device_is_used(db):
    name, untuned = _store(db, (2, 16))
    assert untuned.tile_sizes != (2, 16)
    compiled = compile_hlo(TEXT, tuning_device="h100")  # the database from $FUSION_TUNING_DB
    fusion = compiled.fusions[name]
    assert fusion.tile_sizes == (2, 16) and compiled.tuning_device == "h100"
    assert fusion.tiling_reason.startswith("tuned tile sizes [2, 16]")
    assert str(db.path) in fusion.tiling_reason and "device h100" in fusion.tiling_reason
    assert "NUM_WARPS = 2" in fusion.source  # the stored launch options come with the tiles
    _run_matches_the_evaluator(compiled)


def test_the_interpreter_default_and_other_devices_look_nothing_up(db):
    name, untuned = _store(db, (2, 16))
    for compiled in (compile_hlo(TEXT), compile_hlo(TEXT, tuning_device="a100-80gb"),
                     compile_hlo(TEXT, tuning_device=None)):
        assert compiled.fusions[name].tile_sizes == untuned.tile_sizes
        assert "tuned" not in compiled.fusions[name].tiling_reason
    assert compile_hlo(TEXT).tuning_device is None  # auto, on the CPU interpreter


def test_auto_on_a_gpu_resolves_to_the_detected_device(monkeypatch):
    from triton_backend.runtime import device_specs

    monkeypatch.setattr(device_specs, "detect_device", lambda torch_module=None: DEVICES["h200"])
    assert resolve_tuning_device("auto", torch.device("cuda", 0)) == "h200"
    assert resolve_tuning_device("auto", torch.device("cpu")) is None
    monkeypatch.setattr(device_specs, "detect_device", lambda torch_module=None: None)
    assert resolve_tuning_device("auto", torch.device("cuda", 0)) is None


def test_explicit_tiling_wins_over_the_database(db):
    name, _ = _store(db, (2, 16))
    compiled = compile_hlo(TEXT, tuning_device="h100", tiling={name: (4, 8)})
    assert compiled.fusions[name].tile_sizes == (4, 8)
    assert compiled.fusions[name].tiling_reason.startswith("explicit")


def test_a_stale_entry_falls_back_to_the_default_saying_why(db):
    name, untuned = _store(db, (2, 16, 4))  # one size too many: the legality check refuses it
    compiled = compile_hlo(TEXT, tuning_device="h100")
    fusion = compiled.fusions[name]
    assert fusion.tile_sizes == untuned.tile_sizes
    assert fusion.tiling_reason.startswith("tuned tile sizes [2, 16, 4]") and "refused" in fusion.tiling_reason
    _run_matches_the_evaluator(compiled)
