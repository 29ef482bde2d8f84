"""Runtime reliability (issue 18): only checked kernel code runs, concurrent calls, special files
and unusable paths in the caches, and CUDA's grid limits.

Truths: the reference evaluator (``fusion.evaluator``) and NumPy for values; the file system
(``os.lstat``) for what the cache left behind.
"""
from __future__ import annotations

import errno
import inspect
import os
import re
import stat
import threading

import numpy as np
import pytest
import torch

import triton
from fusion.errors import CacheError, UnsupportedOpError
from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo
from tiling.policy.limits import MAX_GRID_X, MAX_GRID_YZ, grid_limit_problem
from triton_backend import compile_hlo
from triton_backend.driver.compiled_fusion import compile_fusion
from triton_backend.runtime.kernel_loading import CompiledFusion
from triton_backend.integrations.torch_op import torch_op
from triton_backend.runtime import cache_files as cache_files_module
from triton_backend.runtime.kernel_cache import KernelCache
from triton_backend.runtime.cache_files import render_entry
from triton_backend.runtime.tuning_db import TuningDb, fusion_key

NEGATE = """HloModule m
f {
  p = f32[40] parameter(0)
  ROOT n = f32[40] negate(p)
}
ENTRY e {
  x = f32[40] parameter(0)
  ROOT r = f32[40] fusion(x), kind=kLoop, calls=f
}"""

SOFTMAX_ISH = """HloModule softmax_ish
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[4,16] parameter(0)
  y = f32[16] parameter(1)
  yb = f32[4,16] broadcast(y), dimensions={1}
  m = f32[4,16] multiply(x, yb)
  zero = f32[] constant(0)
  s = f32[4] reduce(m, zero), dimensions={1}, to_apply=add
  sb = f32[4,16] broadcast(s), dimensions={0}
  ROOT d = f32[4,16] subtract(m, sb)
}"""

DOUBLE_KERNEL = '''import triton
import triton.language as tl


@triton.jit
def double(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * 2, mask=mask)
'''


def _in_thread(work, timeout: float = 60.0):
    """``work()`` in a daemon thread: its result or exception, or a failure when it hangs
    (a FIFO opened for reading blocks forever; the test must fail, not hang)."""
    outcome: dict = {}

    def target():
        try:
            outcome["value"] = work()
        except BaseException as err:  # noqa: BLE001 - handed back to the test
            outcome["error"] = err

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        pytest.fail(f"blocked for more than {timeout} s")
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def _tamper(path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, "the generated kernel changed; update the tampering"
    path.write_text(text.replace(old, new))


# -- 1. Only the checked text runs ------------------------------------------------------------

def test_kernel_file_rewritten_after_compile_does_not_run(tmp_path):
    compiled = compile_fusion(parse_hlo(NEGATE), "r", cache=KernelCache(tmp_path))
    _tamper(compiled.kernel_path, "n = -(p)", "n = p + 1000.0")
    x = torch.linspace(-3, 3, 40)
    np.testing.assert_array_equal(compiled(x)[0].numpy(), -x.numpy())


def test_kernel_file_replaced_by_raising_code_does_not_run(tmp_path):
    compiled = compile_fusion(parse_hlo(NEGATE), "r", cache=KernelCache(tmp_path))
    path = compiled.kernel_path
    lines = path.read_text().splitlines(keepends=True)
    body = next(i for i, line in enumerate(lines) if line.startswith("def ")) + 1
    lines[body] = "    raise RuntimeError('unchecked code ran')\n"
    path.write_text("".join(lines))
    x = torch.arange(40, dtype=torch.float32)
    np.testing.assert_array_equal(compiled(x)[0].numpy(), -x.numpy())


def test_source_readers_see_the_checked_text(tmp_path):
    """JITFunction (the GPU path) reads the source with ``inspect`` when it is built: after the
    file changes, a new reader still sees the checked text."""
    module = KernelCache(tmp_path).load(DOUBLE_KERNEL, {"fusion": "double"})
    path = KernelCache(tmp_path).path_for(DOUBLE_KERNEL, {"fusion": "double"})
    _tamper(path, "* 2", "* 3")
    fn = module.double.fn
    assert "* 2" in inspect.getsource(fn) and "* 3" not in inspect.getsource(fn)
    assert "* 2" in triton.runtime.jit.JITFunction(fn).src
    x = torch.arange(20, dtype=torch.float32)
    y = torch.empty_like(x)
    module.double[(2,)](x, y, 20, BLOCK=16)
    np.testing.assert_array_equal(y.numpy(), x.numpy() * 2)


def test_interpreted_copy_of_a_gpu_module_runs_the_checked_text(tmp_path):
    """A module imported for the GPU (``JITFunction``) called with CPU tensors is re-imported
    under the interpreter: from the checked text too, not from the file."""
    hlo = parse_hlo(NEGATE)
    with triton.knobs.runtime.scope():
        triton.knobs.runtime.interpret = False
        compiled = compile_fusion(hlo, "r", cache=KernelCache(tmp_path), target="gpu-copy-test")
    assert type(compiled.module.KERNEL).__name__ == "JITFunction"
    _tamper(compiled.kernel_path, "n = -(p)", "n = p + 1000.0")
    x = torch.linspace(-1, 1, 40)
    np.testing.assert_array_equal(compiled(x)[0].numpy(), -x.numpy())


# -- 2. Concurrent calls ----------------------------------------------------------------------

def _run_threads(count: int, work) -> list:
    results: list = [None] * count
    errors: list = []

    def target(k):
        try:
            results[k] = work(k)
        except BaseException as err:  # noqa: BLE001 - collected for the assertion
            errors.append(err)

    threads = [threading.Thread(target=target, args=(k,)) for k in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not errors, f"{len(errors)} thread(s) failed, first: {errors[0]!r}"
    return results


def test_compiled_module_called_from_threads():
    module = parse_hlo(SOFTMAX_ISH)
    compiled = compile_hlo(SOFTMAX_ISH)
    rng = np.random.default_rng(0)
    cases = [(rng.standard_normal((4, 16), dtype=np.float32),
              rng.standard_normal(16, dtype=np.float32)) for _ in range(24)]

    def work(k):
        out = []
        for x, y in cases[6 * k: 6 * k + 6]:
            out.append(compiled(torch.from_numpy(x), torch.from_numpy(y))[0].numpy().copy())
        return out

    results = _run_threads(4, work)
    for k, outs in enumerate(results):
        for (x, y), out in zip(cases[6 * k: 6 * k + 6], outs):
            np.testing.assert_allclose(out, evaluate(module, x, y)[0], rtol=1e-5, atol=1e-5)


def test_torch_op_called_from_threads():
    text = SOFTMAX_ISH.replace("HloModule softmax_ish", "HloModule reliability_threads")
    module = parse_hlo(text)
    op = torch_op(text)
    rng = np.random.default_rng(1)
    cases = [(rng.standard_normal((4, 16), dtype=np.float32),
              rng.standard_normal(16, dtype=np.float32)) for _ in range(8 * 5)]

    def work(k):
        return [op(torch.from_numpy(x), torch.from_numpy(y)).numpy().copy()
                for x, y in cases[5 * k: 5 * k + 5]]

    results = _run_threads(8, work)
    for k, outs in enumerate(results):
        for (x, y), out in zip(cases[5 * k: 5 * k + 5], outs):
            np.testing.assert_allclose(out, evaluate(module, x, y)[0], rtol=1e-5, atol=1e-5)


# -- 3. Special files at a kernel path --------------------------------------------------------

def test_fifo_at_kernel_path_is_replaced_not_opened(tmp_path):
    cache = KernelCache(tmp_path)
    path = cache.path_for("VALUE = 7\n")
    os.mkfifo(path)
    module = _in_thread(lambda: cache.load("VALUE = 7\n"))
    assert module.VALUE == 7
    assert stat.S_ISREG(os.lstat(path).st_mode)
    assert path.read_text() == render_entry("VALUE = 7\n")


def test_fifo_at_kernel_path_of_write_is_replaced(tmp_path):
    cache = KernelCache(tmp_path)
    path = cache.path_for("VALUE = 8\n")
    os.mkfifo(path)
    assert _in_thread(lambda: cache.write("VALUE = 8\n")) == path
    assert stat.S_ISREG(os.lstat(path).st_mode)


@pytest.mark.parametrize("target", ["valid_entry", "fifo", "missing"])
def test_symlink_at_kernel_path_is_not_followed(tmp_path, target):
    """Even a link to a file holding exactly the expected text is not used: the cache reads
    only regular files in its own directory, and replaces the link (never its target)."""
    cache = KernelCache(tmp_path / "cache")
    source = "VALUE = 9\n"
    path = cache.path_for(source)
    path.parent.mkdir()
    elsewhere = tmp_path / "elsewhere"
    if target == "valid_entry":
        elsewhere.write_text(render_entry(source))
    elif target == "fifo":
        os.mkfifo(elsewhere)
    os.symlink(elsewhere, path)
    module = _in_thread(lambda: cache.load(source))
    assert module.VALUE == 9
    assert stat.S_ISREG(os.lstat(path).st_mode)
    if target == "valid_entry":
        assert elsewhere.read_text() == render_entry(source)
    elif target == "fifo":
        assert stat.S_ISFIFO(os.lstat(elsewhere).st_mode)
    else:
        assert not os.path.lexists(elsewhere)


def test_directory_at_kernel_path_is_a_clear_error(tmp_path):
    cache = KernelCache(tmp_path)
    path = cache.path_for("VALUE = 10\n")
    path.mkdir()
    with pytest.raises(CacheError, match="not a regular file") as info:
        _in_thread(lambda: cache.load("VALUE = 10\n"))
    assert str(path) in str(info.value)


# -- 8. Unusable cache paths ------------------------------------------------------------------

def _leftovers(directory) -> list[str]:
    return sorted(p.name for p in directory.iterdir()) if directory.is_dir() else []


def test_file_where_the_cache_directory_should_be(tmp_path):
    blocker = tmp_path / "kernels"
    blocker.write_text("not a directory")
    with pytest.raises(CacheError) as info:
        KernelCache(blocker).load("VALUE = 1\n")
    assert str(blocker) in str(info.value) and "FUSION_KERNEL_CACHE_DIR" in str(info.value)
    assert blocker.read_text() == "not a directory"


def test_file_above_the_cache_directory(tmp_path):
    blocker = tmp_path / "cache"
    blocker.write_text("x")
    with pytest.raises(CacheError) as info:
        KernelCache(blocker / "kernels").write("VALUE = 1\n")
    assert str(blocker / "kernels") in str(info.value)


def test_dangling_symlink_as_cache_directory(tmp_path):
    link = tmp_path / "kernels"
    os.symlink(tmp_path / "gone", link)
    with pytest.raises(CacheError, match="dangling") as info:
        KernelCache(link).load("VALUE = 1\n")
    assert str(link) in str(info.value)


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only directories")
def test_read_only_cache_directory(tmp_path):
    directory = tmp_path / "kernels"
    directory.mkdir()
    directory.chmod(0o500)
    try:
        with pytest.raises(CacheError) as info:
            KernelCache(directory).load("VALUE = 1\n")
        assert str(directory) in str(info.value)
    finally:
        directory.chmod(0o700)
    assert _leftovers(directory) == []


def test_permission_denied_on_create_is_a_clear_error(tmp_path, monkeypatch):
    """A read-only directory as root sees it: creating the temporary file is refused."""
    def refuse(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    monkeypatch.setattr(cache_files_module.tempfile, "mkstemp", refuse)
    with pytest.raises(CacheError, match="Permission denied") as info:
        KernelCache(tmp_path).load("VALUE = 1\n")
    assert str(tmp_path) in str(info.value)
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("failing", ["write", "fsync", "replace"])
def test_full_disk_leaves_nothing_half_written(tmp_path, monkeypatch, failing):
    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cache_files_module.os, failing, full)
    cache = KernelCache(tmp_path)
    with pytest.raises(CacheError, match="No space left") as info:
        cache.load("VALUE = 1\n")
    assert str(cache.path_for("VALUE = 1\n")) in str(info.value)
    assert _leftovers(tmp_path) == []
    monkeypatch.undo()
    assert cache.load("VALUE = 1\n").VALUE == 1  # nothing was memoised from the failure


def test_full_disk_keeps_an_existing_entry_intact(tmp_path, monkeypatch):
    cache = KernelCache(tmp_path)
    path = cache.write("VALUE = 2\n")
    path.write_text("garbage")  # corrupt: load must rewrite it

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(cache_files_module.os, "write", full)
    with pytest.raises(CacheError):
        KernelCache(tmp_path).load("VALUE = 2\n")
    assert path.read_text() == "garbage"  # the old file, untouched: never half a new one
    assert _leftovers(tmp_path) == [path.name]


def test_tuning_db_under_a_file_is_a_clear_error(tmp_path):
    blocker = tmp_path / "cache"
    blocker.write_text("x")
    db = TuningDb(blocker / "tuning.sqlite")
    key = fusion_key(parse_hlo(NEGATE), "r", "h100")
    with pytest.raises(CacheError) as info:
        db.put(key, {"tile_sizes": [8]})
    assert f"{blocker} is a file" in str(info.value) and "FUSION_TUNING_DB" in str(info.value)


def test_tuning_db_that_is_not_a_database_is_a_clear_error(tmp_path):
    path = tmp_path / "tuning.sqlite"
    path.write_bytes(b"this is not an SQLite file" * 40)
    db = TuningDb(path)
    key = fusion_key(parse_hlo(NEGATE), "r", "h100")
    with pytest.raises(CacheError) as info:
        db.put(key, {"tile_sizes": [8]})
    assert str(path) in str(info.value)
    assert path.read_bytes() == b"this is not an SQLite file" * 40


def test_tuning_db_that_is_a_fifo_is_a_clear_error(tmp_path):
    path = tmp_path / "tuning.sqlite"
    os.mkfifo(path)
    key = fusion_key(parse_hlo(NEGATE), "r", "h100")
    with pytest.raises(CacheError, match="not a regular file"):
        _in_thread(lambda: TuningDb(path).put(key, {"tile_sizes": [8]}), timeout=20)


# -- 10. Grid limits --------------------------------------------------------------------------

HUGE = """HloModule m
ENTRY e {
  p = f32[4611686018427387904] parameter(0)
  ROOT n = f32[4611686018427387904] negate(p)
}"""


def test_grid_above_cuda_limit_is_refused_at_compile_time(tmp_path, monkeypatch):
    monkeypatch.setenv("FUSION_KERNEL_CACHE_DIR", str(tmp_path))
    with pytest.raises(UnsupportedOpError, match="grid") as info:
        compile_hlo(HUGE)
    message = str(info.value)
    # The tile (hence the program count) depends on the target's tile budget; the count named
    # must be the real one: programs x tile elements cover the 2^62 elements.
    programs = int(re.search(r"a grid of (\d+) programs", message).group(1))
    tile = int(re.search(r"of \[(\d+)\] over", message).group(1))
    assert str(MAX_GRID_X) in message and programs > MAX_GRID_X and programs * tile == 2**62
    assert message.splitlines()[0].split(":")[0].isdigit()  # located: line:column
    assert _leftovers(tmp_path) == []  # refused before any kernel file was written


@pytest.mark.parametrize("grid, ok", [
    ((MAX_GRID_X,), True), ((MAX_GRID_X + 1,), False), ((2**52,), False),
    ((1, MAX_GRID_YZ), True), ((1, MAX_GRID_YZ + 1), False), ((1, 1, MAX_GRID_YZ + 1), False),
    ((1, 1, 1, 1), False), ((0,), True),
])
def test_grid_limit_problem(grid, ok):
    assert (grid_limit_problem(grid) is None) == ok


def test_compiled_fusion_refuses_a_grid_over_the_limits(tmp_path):
    """Templates build their ``CompiledFusion`` themselves: the record refuses a grid no
    device can launch, whichever template made it."""
    good = compile_fusion(parse_hlo(NEGATE), "r", cache=KernelCache(tmp_path))
    for grid in [(MAX_GRID_X + 1,), (4, MAX_GRID_YZ + 1)]:
        with pytest.raises(UnsupportedOpError, match="grid"):
            CompiledFusion(good.fusion_name, good.kind, good.kernel_path, good.source, grid,
                           good.tile_sizes, good.module)
