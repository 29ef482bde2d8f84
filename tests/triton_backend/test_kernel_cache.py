"""The kernel cache: stable keys, corruption recovery, concurrent writers, real Triton kernels."""
from __future__ import annotations

import multiprocessing

import numpy as np
import pytest
import torch

from triton_backend.runtime.kernel_cache import KernelCache
from triton_backend.runtime.cache_files import entry_is_valid

COPY_KERNEL = '''
import triton
import triton.language as tl


@triton.jit
def double(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2, mask=mask)
'''


def test_same_key_same_path(tmp_path):
    cache = KernelCache(tmp_path)
    parts = {"fusion": "f", "tiling": "t", "target": "cuda:90"}
    assert cache.path_for(COPY_KERNEL, parts) == cache.path_for(COPY_KERNEL, dict(reversed(parts.items())))
    # Line endings are not part of the program.
    assert cache.path_for(COPY_KERNEL, parts) == cache.path_for(COPY_KERNEL.replace("\n", "\r\n"), parts)
    assert KernelCache(tmp_path).path_for(COPY_KERNEL, parts) == cache.path_for(COPY_KERNEL, parts)


@pytest.mark.parametrize("other", [
    {"fusion": "g", "tiling": "t", "target": "cuda:90"},
    {"fusion": "f", "tiling": "u", "target": "cuda:90"},
    {"fusion": "f", "tiling": "t", "target": "cuda:80"},
    {"fusion": "f", "tiling": "t"},
])
def test_different_key_parts_different_path(tmp_path, other):
    cache = KernelCache(tmp_path)
    base = {"fusion": "f", "tiling": "t", "target": "cuda:90"}
    assert cache.path_for(COPY_KERNEL, base) != cache.path_for(COPY_KERNEL, other)


def test_source_and_template_version_are_part_of_the_key(tmp_path):
    cache = KernelCache(tmp_path)
    assert cache.path_for("x = 1\n") != cache.path_for("x = 2\n")
    assert cache.path_for("x = 1\n") != KernelCache(tmp_path, template_version="other").path_for("x = 1\n")


def test_key_parts_must_be_strings(tmp_path):
    with pytest.raises(TypeError, match="key parts"):
        KernelCache(tmp_path).path_for("x = 1\n", {"tiling": (8, 128)})


def test_environment_variable_moves_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSION_KERNEL_CACHE_DIR", str(tmp_path / "here"))
    path = KernelCache().write("x = 1\n")
    assert path.parent == tmp_path / "here" and path.exists()


@pytest.mark.parametrize("damage", ["truncate", "edit", "empty", "binary"])
def test_corrupt_entry_is_detected_and_rebuilt(tmp_path, damage):
    source = "VALUE = 'intact'\n"
    path = KernelCache(tmp_path).write(source)
    text = path.read_text()
    damaged = {
        "truncate": text[: len(text) // 2].encode(),
        "edit": text.replace("intact", "broken").encode(),
        "empty": b"",
        "binary": b"\xff\xfe" + text.encode(),
    }[damage]
    path.write_bytes(damaged)
    assert not entry_is_valid(path.read_text(errors="replace"))
    module = KernelCache(tmp_path).load(source)  # a fresh cache: nothing memoised
    assert module.VALUE == "intact"
    assert entry_is_valid(path.read_text())


def _write_in_child(args):
    directory, source = args
    return str(KernelCache(directory).write(source))


def test_concurrent_writers_leave_one_valid_file(tmp_path):
    source = COPY_KERNEL + "\n# " + "padding " * 20000 + "\n"  # big enough to interleave
    with multiprocessing.get_context("spawn").Pool(3) as pool:
        paths = pool.map(_write_in_child, [(str(tmp_path), source)] * 6)
    assert len(set(paths)) == 1
    files = [p for p in tmp_path.iterdir()]
    assert [p.name for p in files] == [p.split("/")[-1] for p in paths[:1]]  # no temp files left
    assert entry_is_valid(files[0].read_text())


def test_cached_triton_kernel_runs_in_interpreter(tmp_path):
    module = KernelCache(tmp_path).load(COPY_KERNEL, {"fusion": "double"})
    x = torch.arange(-5, 45, dtype=torch.float32)
    y = torch.empty_like(x)
    module.double[(4,)](x, y, x.numel(), BLOCK=16)
    np.testing.assert_array_equal(y.numpy(), x.numpy() * 2)


def test_distinct_entries_get_distinct_modules(tmp_path):
    cache = KernelCache(tmp_path)
    a, b = cache.load("V = 1\n"), cache.load("V = 2\n")
    assert (a.V, b.V) == (1, 2) and a.__name__ != b.__name__
