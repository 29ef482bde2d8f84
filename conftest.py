"""Test setup for the whole suite (tests and doctests): run ``@triton.jit`` kernels on the CPU.

Triton 3.9 reads ``TRITON_INTERPRET`` through ``triton.knobs.runtime.interpret`` when a function
is *decorated* (``triton.jit`` returns an ``InterpretedFunction`` instead of a ``JITFunction``),
so it must be set before any kernel module is imported, which conftest guarantees.
``TRITON_DEFAULT_FP_FUSION=0`` is the numerics policy (see ``triton_backend.lowering.numerics_policy``).
Each test session gets its own kernel cache directory so runs never share (or corrupt) files,
and each test its own compiled-module cache (``module_cache``) so no test sees another's compiles.
"""
from __future__ import annotations

import gc
import os
import sys
import tempfile

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "0")
os.environ.setdefault(
    "FUSION_KERNEL_CACHE_DIR", tempfile.mkdtemp(prefix="fusion-kernel-cache-tests-")
)

_MODULE_CACHES = tempfile.mkdtemp(prefix="fusion-module-cache-tests-")


@pytest.fixture(autouse=True)
def _fresh_module_cache(monkeypatch):
    """An empty compiled-module cache per test: a new plan directory, nothing in memory."""
    monkeypatch.setenv("FUSION_MODULE_CACHE_DIR", tempfile.mkdtemp(dir=_MODULE_CACHES))
    cache = sys.modules.get("triton_backend.runtime.module_cache")
    if cache is not None:  # not imported yet: nothing remembered
        cache.forget_remembered()


# The corpus generator switches jax to 64-bit mode when imported; doctest collection would
# import it and leak that mode into every later JAX test of the same worker.
collect_ignore_glob = ["tests/data/*"]

# Hypothesis: the same examples on every run (a red CI is then reproducible, never a fluke of
# the draw), and no per-example deadline (a loaded 2-core machine is not a bug).
from hypothesis import settings as _hypothesis_settings  # noqa: E402

_hypothesis_settings.register_profile("project", derandomize=True, deadline=None,
                                      print_blob=True)
_hypothesis_settings.load_profile("project")


def pytest_collection_finish(session):
    """Move what collection made (torch, jax, triton, every test module: about a million
    objects, alive to the end) out of the garbage collector's sight, and collect the oldest
    generation less often.  A worker's heap grows past 1.5 million objects, and each full
    collection walked all of it: 27 of them, up to 3.5 s each, took 40 of a worker's ~300 s."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(10_000, 20, 50)


def pytest_configure(config):
    """An xdist worker leaves without tearing its heap down: once the session is over and its
    results are sent, the interpreter's finalization (every module of torch, jax and triton
    cleared, millions of objects freed one by one) held the run's end back by about 5 s.
    Registered first, the exit runs after every other exit handler."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import atexit

        atexit.register(_exit_without_finalizing)


def _exit_without_finalizing() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
