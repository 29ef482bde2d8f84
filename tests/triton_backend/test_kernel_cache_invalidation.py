"""Kernel cache invalidation, corruption and concurrency.

* A changed Triton, torch or project version, or kernel template version, moves an entry to a
  new key and path; the old file (planted here with code that raises if executed) is never run.
* A truncated, edited or foreign entry is detected and rewritten, never executed; bytecode in
  ``__pycache__`` is never trusted instead of the checked text.
* Several spawned processes compiling the same and different fusions into one directory get
  correct results and leave only complete entries (no temporary files).
"""
from __future__ import annotations

import importlib.util
import marshal
import multiprocessing
import os
import sys
from pathlib import Path

import pytest

from fusion.errors import CacheError
from triton_backend.runtime import kernel_cache
from triton_backend.runtime.kernel_cache import KernelCache
from triton_backend.runtime.cache_files import entry_is_valid, render_entry

SOURCE = "import math\nVALUE = math.prod([6, 7])\nTEXT = 'the real kernel'\n"
PARTS = {"fusion": "demo", "tiling": "(8,)", "target": ""}
#: Executing this raises: an entry with it must never be imported.
POISON = "raise RuntimeError('a stale or corrupt cache entry was executed')\n"


def _forget(path: Path) -> None:
    sys.modules.pop(f"_fusion_kernel_{path.stem}", None)


def _plant(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


@pytest.mark.parametrize("package", ["triton", "torch", "hlo-triton-fusion"])
def test_a_package_version_change_uses_a_new_entry(tmp_path, monkeypatch, package):
    cache = KernelCache(tmp_path)
    old_key, old_path = cache.key(SOURCE, PARTS), cache.path_for(SOURCE, PARTS)
    _plant(old_path, render_entry(POISON))  # a complete, valid-looking entry of the old world
    real = kernel_cache.package_versions()
    monkeypatch.setattr(kernel_cache, "package_versions",
                        lambda: {**real, package: real[package] + ".post1"})
    fresh = KernelCache(tmp_path)
    assert fresh.key(SOURCE, PARTS) != old_key and cache.key(SOURCE, PARTS) != old_key
    new_path = fresh.path_for(SOURCE, PARTS)
    assert new_path != old_path
    module = fresh.load(SOURCE, PARTS)
    assert module.VALUE == 42 and Path(module.__file__) == new_path
    assert old_path.read_text() == render_entry(POISON)  # untouched, and never executed


def test_unchanged_versions_reuse_the_entry(tmp_path):
    first = KernelCache(tmp_path)
    path = first.write(SOURCE, PARTS)
    stamp = path.stat().st_mtime_ns
    second = KernelCache(tmp_path)
    assert second.path_for(SOURCE, PARTS) == path
    _forget(path)
    assert second.load(SOURCE, PARTS).VALUE == 42
    assert path.stat().st_mtime_ns == stamp  # not rewritten
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]


def test_template_version_bump_moves_entries(tmp_path, monkeypatch):
    """Regression: ``template_version`` defaulted to the value of TEMPLATE_VERSION at import
    time, so bumping it (as a new template release does) left caches on the old entries."""
    before = KernelCache(tmp_path)
    old_path = before.path_for(SOURCE, PARTS)
    _plant(old_path, render_entry(POISON))
    monkeypatch.setattr(kernel_cache, "TEMPLATE_VERSION", kernel_cache.TEMPLATE_VERSION + "-next")
    after = KernelCache(tmp_path)
    assert after.template_version == kernel_cache.TEMPLATE_VERSION
    assert after.path_for(SOURCE, PARTS) != old_path
    assert after.load(SOURCE, PARTS).VALUE == 42
    explicit = KernelCache(tmp_path, template_version="7")
    assert explicit.path_for(SOURCE, PARTS) not in (old_path, after.path_for(SOURCE, PARTS))


@pytest.mark.parametrize("part", ["fusion", "tiling", "target"])
def test_each_key_part_separates_entries(tmp_path, part):
    cache = KernelCache(tmp_path)
    other = {**PARTS, part: PARTS[part] + "x"}
    assert cache.path_for(SOURCE, PARTS) != cache.path_for(SOURCE, other)
    assert cache.path_for(SOURCE, PARTS) != cache.path_for(SOURCE + "# changed\n", PARTS)


def _truncations(entry: str):
    """Prefixes of a complete entry: cut in the header, in the body, just before the end."""
    yield entry[:10]
    yield entry[:entry.index("\n") + 1]
    yield entry[:len(entry) // 2]
    yield entry[:-2]
    yield ""


@pytest.mark.parametrize("cut", range(5))
def test_truncated_entry_is_rebuilt_not_executed(tmp_path, cut):
    # Cut anywhere in the body, it raises if executed (SyntaxError, or NameError at the end).
    source = "import math\nVALUE = math.prod([\n" + "    1,\n" * 40 + "    42,\n])\nCOMPLETE = True\n"
    cache = KernelCache(tmp_path)
    path = cache.path_for(source, PARTS)
    truncated = list(_truncations(render_entry(source)))[cut]
    if "[" in truncated:
        with pytest.raises((SyntaxError, NameError)):
            exec(compile(truncated, "truncated", "exec"), {})  # noqa: S102 - proves the cut is harmful
    _plant(path, truncated)
    assert not entry_is_valid(truncated)
    module = cache.load(source, PARTS)
    assert module.VALUE == 42 and module.COMPLETE
    assert path.read_text() == render_entry(source)


@pytest.mark.parametrize("corruption", ["body", "header", "foreign", "crlf", "binary", "directory"])
def test_corrupted_entry_is_rebuilt_not_executed(tmp_path, corruption):
    cache = KernelCache(tmp_path)
    path = cache.path_for(SOURCE, PARTS)
    good = render_entry(SOURCE)
    header = good.split("\n", 1)[0] + "\n"
    if corruption == "directory":
        path.mkdir(parents=True)
        with pytest.raises(CacheError, match="directory"):  # a clear error, nothing run
            cache.load(SOURCE, PARTS)
        return
    planted = {
        "body": header + POISON,  # same header, edited body
        "header": "# content-sha256: " + "0" * 64 + "\n" + POISON,
        "foreign": render_entry(POISON),  # a complete entry, but not this key's source
        "crlf": good.replace("\n", "\r\n").replace("VALUE = ", "VALUE = -1 + "),
    }.get(corruption)
    if corruption == "binary":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\xff\xfe\x00" + POISON.encode())
    else:
        _plant(path, planted)
    module = cache.load(SOURCE, PARTS)
    assert module.VALUE == 42
    assert path.read_text(encoding="utf-8") == good


def test_write_repairs_a_corrupt_entry(tmp_path):
    cache = KernelCache(tmp_path)
    path = cache.path_for(SOURCE, PARTS)
    _plant(path, render_entry(SOURCE)[:-5])
    assert cache.write(SOURCE, PARTS) == path
    assert path.read_text() == render_entry(SOURCE)


def test_stale_bytecode_is_never_executed(tmp_path, monkeypatch):
    """Regression: entries were imported with ``spec.loader.exec_module``, which runs the
    ``__pycache__`` bytecode of a file whose mtime and size match; a corrupt ``.pyc`` made a
    valid entry unloadable (EOFError) and a forged one ran instead of the checked text."""
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    cache = KernelCache(tmp_path)
    path = cache.write(SOURCE, PARTS)
    stat = path.stat()
    forged_source = "VALUE = 666\n" + "#" * 40
    code = compile(forged_source, str(path), "exec")
    pyc = Path(importlib.util.cache_from_source(str(path)))
    pyc.parent.mkdir(exist_ok=True)
    header = importlib.util.MAGIC_NUMBER + (0).to_bytes(4, "little")
    header += (int(stat.st_mtime) & 0xFFFFFFFF).to_bytes(4, "little")
    header += (stat.st_size & 0xFFFFFFFF).to_bytes(4, "little")
    pyc.write_bytes(header + marshal.dumps(code))
    _forget(path)
    assert KernelCache(tmp_path).load(SOURCE, PARTS).VALUE == 42
    pyc.write_bytes(header + marshal.dumps(code)[:7])  # truncated bytecode
    _forget(path)
    assert KernelCache(tmp_path).load(SOURCE, PARTS).VALUE == 42


# --- several processes, one directory -----------------------------------------------------------

_FUSION = """HloModule m
f {{
  p0 = f32[{n}] parameter(0)
  c = f32[] constant({k})
  b = f32[{n}] broadcast(c), dimensions={{}}
  ROOT r = f32[{n}] {op}(p0, b)
}}
ENTRY e {{
  x = f32[{n}] parameter(0)
  ROOT fusion = f32[{n}] fusion(x), kind=kLoop, calls=f
}}
"""


_START = None  # each spawned worker's copy of the test's barrier


def _join(barrier) -> None:
    global _START
    _START = barrier


def _worker(job):
    """Compile and run the given fusions (spawned process); returns (ok, message)."""
    directory, specs = job
    os.environ.setdefault("TRITON_INTERPRET", "1")
    import numpy as np
    import torch

    from fusion.text.parser import parse_hlo
    from triton_backend.driver.compiled_fusion import compile_fusion
    cache = KernelCache(directory)
    _START.wait(timeout=120)  # line the processes up, imports done, so their writes overlap
    for n, k, op in specs:
        module = parse_hlo(_FUSION.format(n=n, k=k, op=op))
        x = np.arange(n, dtype=np.float32) - 3
        got = compile_fusion(module, "fusion", cache=cache)(torch.from_numpy(x))[0].numpy()
        want = x + np.float32(k) if op == "add" else x * np.float32(k)
        if not np.array_equal(got, want):
            return False, f"{(n, k, op)}: {got} != {want}"
    return True, ""


def test_concurrent_processes_share_one_directory(tmp_path):
    shared = [(8, 1.5, "add"), (16, -2.0, "multiply")]
    jobs = [(str(tmp_path), shared + [(8 + i, float(i), "add")]) for i in range(3)]
    context = multiprocessing.get_context("spawn")
    with context.Pool(len(jobs), initializer=_join, initargs=(context.Barrier(len(jobs)),)) as pool:
        results = pool.map(_worker, jobs, chunksize=1)
    assert all(ok for ok, _ in results), results
    names = sorted(p.name for p in tmp_path.iterdir())
    assert all(n.startswith("kernel_") and n.endswith(".py") for n in names), names  # no temps
    assert len(names) == len(shared) + len(jobs)
    for name in names:
        assert entry_is_valid((tmp_path / name).read_text())
