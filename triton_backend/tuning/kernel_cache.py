"""A content-hashed directory of generated kernel ``.py`` files, and loading them as modules.

Triton refuses ``@triton.jit`` functions created by ``exec``: it reads the function's source
with ``inspect``, so every generated kernel must live in a real file.  This module owns those
files.

* Key: the canonical kernel source (line endings normalised to ``\\n``, one final newline),
  the caller's key parts (fusion text, tiling, target, ...), the versions of Triton, torch and
  this project (``importlib.metadata``, so nothing heavy is imported) and
  :data:`TEMPLATE_VERSION`.  Its SHA-256 names the file: ``kernel_<hash[:40]>.py``.
* Directory: ``$FUSION_KERNEL_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/hlo-triton-fusion/kernels``,
  else ``~/.cache/hlo-triton-fusion/kernels``.
* Writing is atomic: a temporary file in the same directory, ``fsync``, ``os.replace``; so
  concurrent processes never see half a file and the last writer wins with identical bytes.
* Each file starts with ``# content-sha256: <hash of the body>``; a truncated or edited entry
  fails that check on load and is rewritten before it is imported, never imported as is.
  ``load`` also requires the entry to be exactly the expected text, and executes the text it
  checked (compiled in memory): Python's ``__pycache__`` bytecode, which the import system
  would trust on a matching mtime and size, is neither read nor written.
* The in-process dict of loaded modules is the only mutable global state of the backend: it is
  pure memoisation (the same path always holds the same text).

>>> import tempfile
>>> cache = KernelCache(tempfile.mkdtemp())
>>> module = cache.load("VALUE = 41 + 1\\n", key_parts={"fusion": "demo"})
>>> module.VALUE
42
>>> cache.load("VALUE = 41 + 1\\n", key_parts={"fusion": "demo"}) is module
True
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

#: Bump when the kernel templates change in a way the source text alone does not show
#: (e.g. a different launch convention read from module attributes).
TEMPLATE_VERSION = "1"

#: The one environment variable that moves the cache.
CACHE_DIR_ENV = "FUSION_KERNEL_CACHE_DIR"

_HEADER_PREFIX = "# content-sha256: "
_PACKAGES = ("triton", "torch", "hlo-triton-fusion")


def default_cache_dir() -> Path:
    """The cache directory chosen by the environment (see the module docstring).

    >>> import os
    >>> os.environ.get(CACHE_DIR_ENV) is None or default_cache_dir() == Path(os.environ[CACHE_DIR_ENV])
    True
    """
    return user_cache_path(CACHE_DIR_ENV, "kernels")


def user_cache_path(env_var: str, name: str) -> Path:
    """``$env_var`` when set, else ``name`` in ``$XDG_CACHE_HOME/hlo-triton-fusion``
    (``~/.cache`` without XDG): where the project's caches live.

    >>> import os
    >>> user_cache_path(CACHE_DIR_ENV, "kernels") == default_cache_dir()
    True
    """
    explicit = os.environ.get(env_var)
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "hlo-triton-fusion" / name


def canonical_source(source: str) -> str:
    """Normalise line endings and the final newline, so equal programs hash equally.

    >>> canonical_source("a = 1\\r\\nb = 2")
    'a = 1\\nb = 2\\n'
    """
    text = source.replace("\r\n", "\n").replace("\r", "\n")
    return text.rstrip("\n") + "\n"


def package_versions() -> dict[str, str]:
    """Versions of the packages whose change must invalidate cached kernels."""
    versions = {}
    for name in _PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not-installed"
    return versions


def content_hash(text: str) -> str:
    """SHA-256 of ``text`` in UTF-8, hex.

    >>> content_hash("")[:12]
    'e3b0c44298fc'
    """
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def render_entry(source: str) -> str:
    """The exact text stored in a cache file: the hash header, then the canonical source.

    >>> render_entry("x = 1").splitlines()[1]
    'x = 1'
    """
    body = canonical_source(source)
    return f"{_HEADER_PREFIX}{content_hash(body)}\n{body}"


def entry_is_valid(text: str) -> bool:
    """True when ``text`` is a complete cache entry whose body matches its header hash.

    >>> entry_is_valid(render_entry("x = 1")), entry_is_valid(render_entry("x = 1")[:-2])
    (True, False)
    """
    header, newline, body = text.partition("\n")
    if not newline or not header.startswith(_HEADER_PREFIX):
        return False
    return header[len(_HEADER_PREFIX):] == content_hash(body)


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
        self._modules: dict[Path, ModuleType] = {}
        self._lock = threading.Lock()

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

        A valid existing file is left untouched; a missing or corrupt one is (re)written
        atomically.
        """
        path = self.path_for(source, key_parts)
        expected = render_entry(source)
        if _read_text(path) != expected:
            _atomic_write(path, expected)
        return path

    def load(self, source: str, key_parts: Mapping[str, str] | None = None) -> ModuleType:
        """Write (if needed) and import the entry; the same module object on later calls."""
        path = self.path_for(source, key_parts)
        with self._lock:
            module = self._modules.get(path)
            if module is not None:
                return module
            expected = render_entry(source)
            if _read_text(path) != expected:
                _atomic_write(path, expected)
            module = _import_text(path, expected)
            self._modules[path] = module
            return module


def _read_text(path: Path) -> str | None:
    try:
        # newline="" keeps a stray "\r" visible, so it cannot pass for the expected text.
        with open(path, encoding="utf-8", newline="") as handle:
            return handle.read()
    except (FileNotFoundError, IsADirectoryError, UnicodeDecodeError):
        return None


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except FileNotFoundError:
            pass
        raise


def _import_text(path: Path, text: str) -> ModuleType:
    """Execute ``text`` (the checked content of ``path``) as the module of that file.

    Compiled from the text itself, so what runs is what was checked: the file could be
    replaced between the check and an import, and ``spec.loader.exec_module`` would run any
    ``__pycache__`` bytecode whose recorded mtime and size match the file's.
    """
    # The module name is unique per file so two kernels never shadow each other in
    # sys.modules; registering it there (and __file__ naming the real file, with the same
    # line numbers) lets inspect, which Triton uses, find the source.
    module_name = f"_fusion_kernel_{path.stem}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None:
        raise ImportError(f"cannot import generated kernel file {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        exec(compile(text, str(path), "exec"), module.__dict__)  # noqa: S102 - our own checked file
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module
