"""The tuning database: hit, miss, explained miss, force, and key canonicalisation."""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from fusion.errors import BadArgumentError
from fusion.text.parser import parse_hlo
from triton_backend.tuning.autotune import autotune
from triton_backend.runtime.tuning_db import TuningDb, fusion_key

TEMPLATE = """HloModule m
fused_{suffix} {{
  param_0.{suffix} = f32[{rows},128] parameter(0), metadata={{op_name="x"}}
  neg.{suffix} = f32[{rows},128] {op}(param_0.{suffix})
  ROOT out.{suffix} = f32[{rows},128] add(neg.{suffix}, param_0.{suffix})
}}
ENTRY e {{
  x = f32[{rows},128] parameter(0)
  ROOT fusion.{suffix} = f32[{rows},128] fusion(x), kind=kLoop, calls=fused_{suffix}
}}"""


def _module(rows=16, op="negate", suffix="1"):
    return parse_hlo(TEMPLATE.format(rows=rows, op=op, suffix=suffix))


def _key(module, device="h100"):
    return fusion_key(module, module.entry.root, device)


@pytest.fixture
def db(tmp_path):
    return TuningDb(tmp_path / "tuning.sqlite")


def test_names_and_metadata_do_not_change_the_key():
    assert _key(_module(suffix="1")) == _key(_module(suffix="27"))
    assert _key(_module()).fingerprint != _key(_module(rows=32)).fingerprint
    assert _key(_module()).fingerprint != _key(_module(op="abs")).fingerprint


def test_hit_and_miss(db):
    module = _module()
    assert db.get(_key(module)) is None
    db.put(_key(module), {"tile_sizes": [4, 128], "num_warps": 2})
    assert db.get(_key(module)) == {"tile_sizes": [4, 128], "num_warps": 2}
    assert db.get(_key(module, "a100-80gb")) is None
    assert db.get(_key(_module(rows=32))) is None
    assert TuningDb(db.path).get(_key(module))["num_warps"] == 2  # persisted on disk


def test_explain_names_the_part_that_changed(db):
    assert "empty" in db.explain_miss(_key(_module()))
    db.put(_key(_module()), {"tile_sizes": [1, 128]})
    assert db.explain_miss(_key(_module())).startswith("hit")
    shapes = db.explain_miss(_key(_module(rows=32)))
    assert "differs in shapes" in shapes and "f32[16,128]{1,0}" in shapes \
        and "f32[32,128]{1,0}" in shapes
    device = db.explain_miss(_key(_module(), "h200"))
    assert "differs in device" in device and "'h100'" in device and "'h200'" in device
    op = db.explain_miss(_key(_module(op="abs")))
    assert "differs in computation" in op and "negate" in op and "abs" in op


def test_unknown_fusion_is_a_located_error():
    with pytest.raises(BadArgumentError, match="no fusion named 'nope'"):
        fusion_key(_module(), "nope", "h100")


def test_autotune_reuses_the_stored_result_unless_forced(db):
    module = _module()
    with ThreadPoolExecutor(1) as pool:
        first = autotune(module, module.entry.root, device="h100", budget=2, executor=pool,
                         db=db, num_warps=(4,), num_stages=(1,))
        assert not first.from_cache
        again = autotune(_module(suffix="9"), "fusion.9", device="h100", budget=2,
                         executor=pool, db=db, num_warps=(4,), num_stages=(1,))
        assert again.from_cache and again.trials == ()
        assert again.winner_json()["tile_sizes"] == list(first.best.config.tile_sizes)
        db.put(_key(module), {**first.winner_json(), "tile_sizes": [1, 1]})
        forced = autotune(module, module.entry.root, device="h100", budget=2, executor=pool,
                          db=db, force=True, num_warps=(4,), num_stages=(1,))
    assert not forced.from_cache
    assert db.get(_key(module))["tile_sizes"] == list(forced.best.config.tile_sizes) != [1, 1]
