"""A content-hashed directory of generated kernel ``.py`` files, and loading them as modules.

Triton refuses ``@triton.jit`` functions created by ``exec``: it reads the function's source
with ``inspect``, so every generated kernel must live in a real file.  This module owns those
files; ``cache_files`` stores them (the directory, the hash header, atomic writes, regular
files only) and ``cache_pruning`` keeps the cache under its size limit.

* Key: the canonical kernel source (line endings normalised to ``\\n``, one final newline),
  the caller's key parts (fusion text, tiling, target, ...), the versions of Triton, torch and
  this project (``importlib.metadata``, so nothing heavy is imported) and
  :data:`TEMPLATE_VERSION`.  Its SHA-256 names the file: ``kernel_<hash[:40]>.py``.
* ``load`` requires the entry to be exactly the expected text (a truncated or edited one is
  rewritten before it is imported, never imported as is), and executes the text it checked
  (compiled in memory): Python's ``__pycache__`` bytecode, which the import system would trust
  on a matching mtime and size, is neither read nor written.  The checked lines are also
  pinned in :mod:`linecache` for the file's name, so ``inspect`` (Triton's ``JITFunction``
  when it decorates, the interpreter when it first launches) reads them, not whatever the file
  holds later; interpreter kernels are rewritten at load for the same reason.
* The in-process dict of loaded modules (one per process, shared by every ``KernelCache`` of
  the same directory) is pure memoisation: the same path always holds the same text, and a
  module is kept per interpreter mode, the one ``@triton.jit`` decorated it under.  A kernel a
  second compile asks for again (a tuning sweep, another module with the same fusion, the same
  module compiled again without its cached plan) is neither re-executed nor, under the interpreter,
  rewritten again, and on a GPU keeps what Triton compiled for it.

>>> import tempfile
>>> cache = KernelCache(tempfile.mkdtemp())
>>> module = cache.load("VALUE = 41 + 1\\n", key_parts={"fusion": "demo"})
>>> module.VALUE
42
>>> cache.load("VALUE = 41 + 1\\n", key_parts={"fusion": "demo"}) is module
True
>>> KernelCache(cache.directory).load("VALUE = 41 + 1\\n", key_parts={"fusion": "demo"}) is module
True
"""
from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import json
import linecache
import os
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

from triton_backend.runtime.cache_files import (
    atomic_write, canonical_source, content_hash, default_cache_dir, encoded_size, read_own_text,
    render_entry,
)
from triton_backend.runtime.cache_pruning import note_write
from triton_backend.runtime.launch_mode import INTERPRETER_LOCK, interpreting

#: Bump when the kernel templates change in a way the source text alone does not show
#: (e.g. a different launch convention read from module attributes).
TEMPLATE_VERSION = "1"

_PACKAGES = ("triton", "torch", "hlo-triton-fusion")


def package_versions() -> dict[str, str]:
    """Versions of the packages whose change must invalidate cached kernels."""
    return dict(_installed_versions())


@functools.cache
def _installed_versions() -> tuple[tuple[str, str], ...]:
    # Read once per process: ``importlib.metadata`` scans the environment's distributions
    # (about 2 ms), and every kernel key asks; a package upgraded under a running process
    # does not change the modules it has already imported either.
    versions = {}
    for name in _PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not-installed"
    return tuple(versions.items())


class KernelCache:
    """Generated kernel files under one directory, and the modules loaded from them.

    ``key_parts`` is a mapping of strings (e.g. ``{"fusion": hlo_text, "tiling": str(tiling),
    "target": "cuda:90"}``); its order does not matter.
    """

    def __init__(self, directory: str | os.PathLike[str] | None = None,
                 template_version: str | None = None) -> None:
        self.directory = Path(directory) if directory is not None else default_cache_dir()
        # Read at construction, not at import: a bumped TEMPLATE_VERSION must reach new caches.
        self.template_version = TEMPLATE_VERSION if template_version is None else template_version

    def key(self, source: str, key_parts: Mapping[str, str] | None = None) -> str:
        """The SHA-256 (hex) naming the entry for this source and key parts."""
        parts = dict(key_parts or {})
        bad = [k for k, v in parts.items() if not isinstance(k, str) or not isinstance(v, str)]
        if bad:
            raise TypeError(f"kernel cache key parts must map str to str; bad entries: {bad!r}")
        payload = {
            "source": canonical_source(source),
            "parts": sorted(parts.items()),
            "versions": sorted(package_versions().items()),
            "template_version": self.template_version,
        }
        return content_hash(json.dumps(payload, sort_keys=True, ensure_ascii=True))

    def path_for(self, source: str, key_parts: Mapping[str, str] | None = None) -> Path:
        """Where the entry lives (whether or not it has been written yet)."""
        return self.directory / f"kernel_{self.key(source, key_parts)[:40]}.py"

    def write(self, source: str, key_parts: Mapping[str, str] | None = None) -> Path:
        """Make sure a valid entry exists on disk and return its path.

        A valid existing file is left untouched; a missing or corrupt one (or anything but a
        regular file of ours) is (re)written atomically.  Raises ``CacheError`` when the
        directory cannot hold it.
        """
        path = self.path_for(source, key_parts)
        expected = render_entry(source)
        if read_own_text(path, limit=encoded_size(expected)) != expected:
            atomic_write(path, expected)
            note_write(self.directory)
        return path

    def load(self, source: str, key_parts: Mapping[str, str] | None = None) -> ModuleType:
        """Write (if needed) and import the entry; the same module object on later calls."""
        path = self.path_for(source, key_parts)
        key = (path, interpreting())
        with _LOADED_LOCK:
            expected = render_entry(source)
            # The file is checked on every load, a hit too: a user reads (and a cache prune
            # may have removed) it, whatever the process already holds.
            if read_own_text(path, limit=encoded_size(expected)) != expected:
                atomic_write(path, expected)
                note_write(self.directory)
            module = _LOADED.get(key)
            if module is None:
                module = _LOADED[key] = import_checked_text(path, expected,
                                                            f"_fusion_kernel_{path.stem}")
            return module


_LOADED: dict[tuple[Path, bool], ModuleType] = {}
_LOADED_LOCK = threading.Lock()


def import_checked_text(path: Path, text: str, module_name: str) -> ModuleType:
    """Execute ``text`` (the checked content of ``path``) as the module ``module_name`` of that
    file; what runs, now and at any later launch, is ``text``, whatever the file holds.

    Compiled from the text itself: the file could be replaced between the check and an
    import, and ``spec.loader.exec_module`` would run any ``__pycache__`` bytecode whose
    recorded mtime and size match the file's.  Triton reads a kernel's source again with
    ``inspect`` (``JITFunction`` when it decorates, the interpreter at its first launch), and
    ``inspect`` reads through :mod:`linecache`: the checked lines are pinned there (an entry
    without mtime, which ``linecache.checkcache`` keeps), and interpreter kernels are
    rewritten now, while the pin is certainly in place.

    >>> import inspect, tempfile
    >>> path = Path(tempfile.mkdtemp()) / "k.py"
    >>> _ = path.write_text("def f():\\n    return 2\\n")
    >>> module = import_checked_text(path, "def f():\\n    return 1\\n", "_doctest_checked")
    >>> module.f(), inspect.getsource(module.f).split()[-1]
    (1, '1')
    """
    # The module name is unique per file so two kernels never shadow each other in
    # sys.modules; registering it there (and __file__ naming the real file, with the same
    # line numbers) lets inspect, which Triton uses, find the source.
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None:
        raise ImportError(f"cannot import generated kernel file {path}")
    module = importlib.util.module_from_spec(spec)
    filename = str(path)
    linecache.cache[filename] = (len(text), None, text.splitlines(keepends=True), filename)
    sys.modules[module_name] = module
    try:
        exec(compile(text, filename, "exec"), module.__dict__)  # noqa: S102 - our own checked text
        _rewrite_interpreted_kernels(module, filename)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def _rewrite_interpreted_kernels(module: ModuleType, filename: str) -> None:
    """Have the Triton interpreter rewrite the module's kernels now (it caches the result per
    function), so no later launch reads their source again."""
    interpreter = sys.modules.get("triton.runtime.interpreter")
    if interpreter is None:  # no interpreter loaded: no interpreted function exists
        return
    with INTERPRETER_LOCK:  # the rewrite compiles ASTs and fills a class-wide cache
        for value in list(vars(module).values()):
            if isinstance(value, interpreter.InterpretedFunction) \
                    and value.fn.__code__.co_filename == filename:
                value.rewrite()


__all__ = ["TEMPLATE_VERSION", "KernelCache", "import_checked_text", "package_versions"]
