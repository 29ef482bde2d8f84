"""``fusion-compile cache`` (kernel cache size, LRU pruning) and ``fusion-compile tuning``
(the database: list, export, import on another machine, clear)."""
from __future__ import annotations

import io
import json
import os
import pathlib

import pytest

from fusion.text.parser import parse_hlo
from triton_backend.cli import main
from triton_backend.runtime import cache_pruning
from triton_backend.runtime.kernel_cache import KernelCache
from triton_backend.runtime.cache_pruning import cache_entries, parse_size
from triton_backend.runtime.tuning_db import TuningDb, fusion_key

MODULE = """HloModule m
f {
  p = f32[64,256] parameter(0)
  ROOT n = f32[64,256] negate(p)
}
ENTRY e {
  x = f32[64,256] parameter(0)
  ROOT r = f32[64,256] fusion(x), kind=kLoop, calls=f
}
"""


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    directory = tmp_path / "kernels"
    monkeypatch.setenv("FUSION_KERNEL_CACHE_DIR", str(directory))
    monkeypatch.delenv("FUSION_KERNEL_CACHE_MAX_BYTES", raising=False)
    return directory


def _fill(directory: pathlib.Path, n: int) -> list[pathlib.Path]:
    """``n`` entries, entry i last used at time 1000 + i (so entry 0 is the LRU one)."""
    cache = KernelCache(directory)
    paths = []
    for i in range(n):
        path = cache.write(f"VALUE = {i}\n" + "# padding\n" * 50)
        os.utime(path, (1000 + i, 1000 + i))
        paths.append(path)
    return paths


def _json(capsys) -> dict:
    return json.loads(capsys.readouterr().out)


def test_info_counts_files_and_bytes(cache_dir, capsys):
    paths = _fill(cache_dir, 3)
    (cache_dir / "notes.txt").write_text("not ours")
    assert main(["cache", "info", "--json"]) == 0
    doc = _json(capsys)
    assert doc["directory"] == str(cache_dir) and doc["files"] == 3
    assert doc["bytes"] == sum(p.stat().st_size for p in paths)
    assert doc["max_bytes"] == cache_pruning.DEFAULT_MAX_BYTES
    assert main(["cache", "info"]) == 0
    assert f"kernel cache: {cache_dir}\n  3 file(s)" in capsys.readouterr().out


def test_prune_removes_least_recently_used_first(cache_dir, capsys):
    paths = _fill(cache_dir, 5)
    size = paths[0].stat().st_size
    os.utime(paths[0], (5000, 5000))  # entry 0 used last: now entries 1 and 2 are the oldest
    limit = sum(p.stat().st_size for p in paths) - 2 * size
    assert main(["cache", "prune", "--max-size", str(limit), "--json"]) == 0
    doc = _json(capsys)
    assert (doc["removed_files"], doc["freed_bytes"]) == (2, 2 * size)
    assert sorted(e.path for e in cache_entries(cache_dir)) == sorted(
        [paths[0], paths[3], paths[4]])
    assert doc["bytes"] <= limit


def test_clear_removes_only_the_projects_files(cache_dir, capsys):
    _fill(cache_dir, 2)
    (cache_dir / "notes.txt").write_text("not ours")
    plans = cache_dir / "modules" / ("a" * 24)
    plans.mkdir(parents=True)
    (plans / ("b" * 40 + ".json")).write_text("{}")
    assert main(["cache", "clear"]) == 0
    assert "removed 3 file(s)" in capsys.readouterr().out
    assert sorted(p.name for p in cache_dir.iterdir()) == ["notes.txt"]


def test_the_cache_prunes_itself_on_write(cache_dir, monkeypatch):
    monkeypatch.setenv("FUSION_KERNEL_CACHE_MAX_BYTES", "2K")
    monkeypatch.setattr(cache_pruning, "PRUNE_EVERY_WRITES", 1)
    _fill(cache_dir, 6)  # ~0.5 kB each
    assert sum(e.size for e in cache_entries(cache_dir)) <= 2048


def test_size_arguments(cache_dir, capsys, monkeypatch):
    assert parse_size("1.5K") == 1536
    assert main(["cache", "prune", "--max-size", "lots"]) == 2
    assert "--max-size: size 'lots'" in capsys.readouterr().err
    monkeypatch.setenv("FUSION_KERNEL_CACHE_MAX_BYTES", "huge")
    assert main(["cache", "info"]) == 1
    assert "FUSION_KERNEL_CACHE_MAX_BYTES: size 'huge'" in capsys.readouterr().err


@pytest.fixture
def dbs(tmp_path, monkeypatch):
    here, there = tmp_path / "here.sqlite", tmp_path / "there.sqlite"
    monkeypatch.setenv("FUSION_TUNING_DB", str(here))
    module = parse_hlo(MODULE)
    TuningDb(here).put(fusion_key(module, "r", "h100"),
                       {"tile_sizes": [8, 128], "num_warps": 4, "num_stages": 1,
                        "time_s": 2e-6, "measured": False})
    TuningDb(here).put(fusion_key(module, "r", "h200"),
                       {"tile_sizes": [4, 256], "num_warps": 8, "num_stages": 1})
    return here, there, module


def test_list_shows_every_entry(dbs, capsys):
    here, _, _ = dbs
    assert main(["tuning", "list"]) == 0
    out = capsys.readouterr().out
    assert f"tuning database: {here} (2 entries)" in out
    assert "tiling [8, 128], warps 4, stages 1, 2.00 us predicted" in out and "h200" in out
    assert main(["tuning", "list", "--json"]) == 0
    doc = _json(capsys)
    assert sorted(e["device"] for e in doc["entries"]) == ["h100", "h200"]


def test_export_then_import_on_another_machine(dbs, capsys, tmp_path, monkeypatch):
    here, there, module = dbs
    assert main(["tuning", "export", str(tmp_path / "tuned.json")]) == 0
    assert "exported 2 entries" in capsys.readouterr().out
    monkeypatch.setenv("FUSION_TUNING_DB", str(there))  # the other machine
    assert main(["tuning", "import", str(tmp_path / "tuned.json"), "--json"]) == 0
    assert _json(capsys)["written"] == 2
    for device in ("h100", "h200"):
        key = fusion_key(module, "r", device)
        assert TuningDb(there).get(key) == TuningDb(here).get(key)
    # Importing the same export again keeps the entries (same age) and adds nothing.
    assert main(["tuning", "import", str(tmp_path / "tuned.json")]) == 0
    assert len(TuningDb(there).rows()) == 2


def test_export_to_stdout_and_import_from_stdin(dbs, capsys, monkeypatch):
    _, there, _ = dbs
    assert main(["tuning", "export"]) == 0
    exported = capsys.readouterr().out
    assert json.loads(exported)["format"] == "hlo-triton-fusion tuning database"
    monkeypatch.setenv("FUSION_TUNING_DB", str(there))
    monkeypatch.setattr("sys.stdin", io.StringIO(exported))
    assert main(["tuning", "import", "-"]) == 0
    assert "imported 2 of 2 entries" in capsys.readouterr().out


def test_a_newer_stored_entry_wins_over_an_older_import(dbs, tmp_path, monkeypatch, capsys):
    here, _, module = dbs
    export = TuningDb(here).export_json()
    for entry in export["entries"]:
        entry["created"] = 1.0  # older than what is stored
        entry["result"] = {"tile_sizes": [1, 1]}
    (tmp_path / "old.json").write_text(json.dumps(export))
    assert main(["tuning", "import", str(tmp_path / "old.json")]) == 0
    assert "imported 0 of 2 entries" in capsys.readouterr().out
    assert TuningDb(here).get(fusion_key(module, "r", "h100"))["tile_sizes"] == [8, 128]


def test_bad_imports_and_clear(dbs, tmp_path, capsys):
    here, _, _ = dbs
    (tmp_path / "bad.json").write_text('{"entries": []}')
    assert main(["tuning", "import", str(tmp_path / "bad.json")]) == 1
    assert "not a tuning-database export" in capsys.readouterr().err
    assert main(["tuning", "import", str(tmp_path / "missing.json")]) == 1
    assert main(["tuning", "clear"]) == 0
    assert f"removed 2 entries from {here}" in capsys.readouterr().out
    assert TuningDb(here).rows() == []


def test_cache_and_tuning_import_neither_torch_nor_triton(tmp_path):
    import subprocess
    import sys

    code = ("import sys\nfrom triton_backend.cli import main\n"
            "assert main(['cache', 'info']) == 0 and main(['tuning', 'list']) == 0\n"
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'triton'))\n"
            "assert not bad, bad\n")
    env = {**os.environ, "FUSION_KERNEL_CACHE_DIR": str(tmp_path / "k"),
           "FUSION_TUNING_DB": str(tmp_path / "t.sqlite")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env=env, cwd=pathlib.Path(__file__).parents[2])
    assert done.returncode == 0, done.stderr
