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
  A failed write (read-only or full disk, a file or dangling link where the directory should
  be) is a :class:`~fusion.errors.CacheError` naming the path, and leaves no temporary file.
* Only regular files are opened (``lstat`` first, then ``O_NOFOLLOW | O_NONBLOCK``): a FIFO,
  device, symbolic link or another user's file at an entry's path is never read, but replaced
  by a fresh entry; a directory there is a ``CacheError``.
* Each file starts with ``# content-sha256: <hash of the body>``; a truncated or edited entry
  fails that check on load and is rewritten before it is imported, never imported as is.
  ``load`` also requires the entry to be exactly the expected text, and executes the text it
  checked (compiled in memory): Python's ``__pycache__`` bytecode, which the import system
  would trust on a matching mtime and size, is neither read nor written.  The checked lines
  are also pinned in :mod:`linecache` for the file's name, so ``inspect`` (Triton's
  ``JITFunction`` when it decorates, the interpreter when it first launches) reads them, not
  whatever the file holds later; interpreter kernels are rewritten at load for the same reason.
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

import errno
import hashlib
import importlib.metadata
import importlib.util
import json
import linecache
import os
import re
import stat
import sys
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from fusion.errors import CacheError
from fusion.logs import get_logger
from triton_backend.runtime.launch_mode import INTERPRETER_LOCK

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


#: What :func:`content_hash` returns (and any SHA-256 hex digest): for checking stored ones.
SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def content_hash(text: str) -> str:
    """SHA-256 of ``text`` in UTF-8, hex.

    >>> content_hash("")[:12]
    'e3b0c44298fc'
    """
    # surrogatepass: a module's text may hold a lone surrogate (the parser reads it as any
    # other character); valid text hashes exactly as plain UTF-8.
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


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

        A valid existing file is left untouched; a missing or corrupt one (or anything but a
        regular file of ours) is (re)written atomically.  Raises ``CacheError`` when the
        directory cannot hold it.
        """
        path = self.path_for(source, key_parts)
        expected = render_entry(source)
        if _read_text(path, limit=_encoded_size(expected)) != expected:
            _atomic_write(path, expected)
            note_write(self.directory)
        return path

    def load(self, source: str, key_parts: Mapping[str, str] | None = None) -> ModuleType:
        """Write (if needed) and import the entry; the same module object on later calls."""
        path = self.path_for(source, key_parts)
        with self._lock:
            module = self._modules.get(path)
            if module is not None:
                return module
            expected = render_entry(source)
            if _read_text(path, limit=_encoded_size(expected)) != expected:
                _atomic_write(path, expected)
                note_write(self.directory)
            module = import_checked_text(path, expected, f"_fusion_kernel_{path.stem}")
            self._modules[path] = module
            return module


def read_entry(path: Path, body_hash: str | None = None) -> str | None:
    """The text of the entry at ``path`` when it is complete (its body matches its header
    hash) and, given ``body_hash``, its body hashes to that (recorded when it was written, as
    the module cache's plans do); None when missing, truncated, edited or not a regular file
    of ours.

    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "entry.py"
    >>> write_entry(path, "x = 1\\n")
    >>> read_entry(path, content_hash("x = 1\\n")) == render_entry("x = 1")
    True
    >>> read_entry(path, content_hash("x = 2\\n")) is None
    True
    """
    text = _read_text(path)
    if text is None or not entry_is_valid(text):
        return None
    if body_hash is not None and not text.startswith(f"{_HEADER_PREFIX}{body_hash}\n"):
        return None
    return text


def write_entry(path: Path, source: str) -> None:
    """Write ``render_entry(source)`` to ``path`` atomically; ``CacheError`` when it cannot."""
    _atomic_write(path, render_entry(source))


def _encoded_size(text: str) -> int:
    return len(text.encode("utf-8"))


def _read_text(path: Path, limit: int | None = None) -> str | None:
    """The text of ``path`` when it is a regular file of ours that decodes, else None.

    Never opens anything else: a FIFO would block ``open`` forever, a device could be
    anything, a symbolic link points outside the cache.  ``O_NOFOLLOW | O_NONBLOCK`` and the
    ``fstat`` after opening close the gap between the ``lstat`` and the ``open``.  With
    ``limit``, a file longer than ``limit`` bytes is not read (it is not the expected entry).
    """
    try:
        if not _is_own_regular_file(os.lstat(path)):
            return None
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:  # missing, a parent that is no directory, unreadable, a link (ELOOP)
        return None
    try:
        info = os.fstat(fd)
        if not _is_own_regular_file(info) or (limit is not None and info.st_size > limit):
            return None
        chunks, size = [], 0
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
            size += len(chunk)
            if limit is not None and size > limit:
                return None
        # Decoded without newline translation: a stray "\\r" cannot pass for the expected text.
        return b"".join(chunks).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    finally:
        os.close(fd)


def _is_own_regular_file(info: os.stat_result) -> bool:
    return stat.S_ISREG(info.st_mode) and info.st_uid == os.geteuid()


def _atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and ``os.replace``; a failure is a
    ``CacheError`` naming the path, and removes the temporary file (``path`` keeps its old
    content)."""
    directory = path.parent
    make_cache_directory(directory, CACHE_DIR_ENV, "kernel cache directory")
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=directory)
    except OSError as err:
        raise _cache_error("cannot create a file in this kernel cache directory", err,
                           directory) from None
    try:
        try:
            data = text.encode("utf-8")
            written = 0
            while written < len(data):
                written += os.write(fd, data[written:])
            os.fsync(fd)
        finally:
            os.close(fd)
        _replace_entry(tmp_name, path)
    except BaseException as err:
        try:
            os.unlink(tmp_name)
        except OSError:
            pass
        if isinstance(err, OSError):
            raise _cache_error("cannot write this kernel cache entry", err, path) from None
        raise
    _sync_directory(directory)


def _replace_entry(tmp_name: str, path: Path) -> None:
    """``os.replace`` onto ``path``, which may hold a FIFO or a link (replaced, never opened or
    followed); a directory there cannot be replaced and is reported."""
    try:
        info = os.lstat(path)
    except OSError:
        info = None
    if info is not None and stat.S_ISDIR(info.st_mode):
        raise CacheError("this kernel cache entry is a directory, not a regular file; remove it",
                         where=str(path))
    os.replace(tmp_name, path)


def make_cache_directory(directory: Path, env_var: str, what: str) -> None:
    """Create ``directory`` (and its parents); a ``CacheError`` naming it and the component in
    the way (a file, a dangling link) when it cannot be, suggesting ``env_var``.

    >>> import tempfile
    >>> blocker = Path(tempfile.mkdtemp()) / "file"
    >>> _ = blocker.write_text("")
    >>> make_cache_directory(blocker / "kernels", CACHE_DIR_ENV, "kernel cache directory")
    Traceback (most recent call last):
    ...
    fusion.errors.CacheError: .../file/kernels: the kernel cache directory cannot be used: .../file is a file, not a directory; set FUSION_KERNEL_CACHE_DIR to a usable location
    """
    try:
        directory.mkdir(parents=True, exist_ok=True)
        return
    except OSError as err:
        failure = err
    why = failure.strerror or str(failure)
    for part in (directory, *directory.parents):  # the component that is in the way
        if os.path.islink(part) and not part.exists():
            why = f"{part} is a dangling symbolic link (to {os.readlink(part)})"
            break
        if part.exists():
            if not part.is_dir():
                why = f"{part} is a file, not a directory"
            break
    raise CacheError(f"the {what} cannot be used: {why}; set {env_var} to a usable location",
                     where=str(directory)) from None


def _cache_error(what: str, err: OSError, path: Path) -> CacheError:
    reason = err.strerror or str(err)
    hint = ""
    if err.errno in (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT):
        hint = f"; set {CACHE_DIR_ENV} to a writable directory with free space"
    return CacheError(f"{what}: {reason}{hint}", where=str(path))


def _sync_directory(directory: Path) -> None:
    """Make the rename durable (best effort: not every file system can fsync a directory)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


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


# --- size limit: info, clear, prune (``fusion-compile cache``) ---------------------------

#: The cache's size limit in bytes (``512M``, ``2G`` and plain numbers are accepted).
MAX_BYTES_ENV = "FUSION_KERNEL_CACHE_MAX_BYTES"
#: Default limit: a few hundred MB holds thousands of kernels (a kernel file is ~5-20 kB).
DEFAULT_MAX_BYTES = 512 * 2**20
#: Entries a process writes between two checks of the cache's size against the limit.
PRUNE_EVERY_WRITES = 64

# Files this project writes under the cache directory, and only those are ever removed: a
# directory set by mistake to $HOME loses nothing else.  Kernel entries, the module cache's
# plans (``modules/<text hash>/<key hash>.json``) and temporary files of interrupted writes.
_OWN_FILE = re.compile(r"kernel_[0-9a-f]{40}\.py|[0-9a-f]{40}\.json|\..+\.tmp")
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*", re.IGNORECASE)
_writes_since_check = 0
_prune_log = get_logger("triton_backend.kernel_cache")
_prune_lock = threading.Lock()


def parse_size(text: str) -> int:
    """Bytes of a size such as ``"512M"``, ``"2GiB"``, ``"1.5g"`` or ``"1000"`` (powers of 1024).

    >>> parse_size("512M"), parse_size("2GiB"), parse_size("1000")
    (536870912, 2147483648, 1000)
    >>> parse_size("lots")
    Traceback (most recent call last):
    ...
    ValueError: size 'lots': expected a number of bytes with an optional K, M, G or T suffix
    """
    match = _SIZE.fullmatch(str(text))
    if match is None:
        raise ValueError(f"size {text!r}: expected a number of bytes with an optional K, M, G "
                         "or T suffix")
    number, unit = float(match.group(1)), match.group(2).lower()
    return int(number * 1024 ** " kmgt".index(unit or " "))


def max_cache_bytes() -> int:
    """``$FUSION_KERNEL_CACHE_MAX_BYTES`` when set (``parse_size``), else ``DEFAULT_MAX_BYTES``;
    a malformed value is a ``CacheError`` naming the variable."""
    text = os.environ.get(MAX_BYTES_ENV, "").strip()
    if not text:
        return DEFAULT_MAX_BYTES
    try:
        return parse_size(text)
    except ValueError as err:
        raise CacheError(str(err), where=MAX_BYTES_ENV) from None


@dataclass(frozen=True)
class CacheEntry:
    """One file of the cache: path, size in bytes, last use (seconds since the epoch)."""

    path: Path
    size: int
    last_used: float


@dataclass(frozen=True)
class CacheInfo:
    """The cache directory's files and bytes, and its limit."""

    directory: Path
    files: int
    bytes: int
    max_bytes: int

    def to_json(self) -> dict:
        return {"directory": str(self.directory), "files": self.files, "bytes": self.bytes,
                "max_bytes": self.max_bytes}


def cache_entries(directory: str | os.PathLike[str] | None = None) -> list[CacheEntry]:
    """The project's files under the cache directory, least recently used first.

    Last use is the later of access and modification time: a file system mounted with
    ``relatime`` still records a read once a day, one with ``noatime`` falls back to the
    write.  Symbolic links and anything but regular files are never listed (or removed).
    """
    root = Path(directory) if directory is not None else default_cache_dir()
    entries = []
    for folder, _, names in os.walk(root):  # os.walk does not follow links to directories
        for name in names:
            if not _OWN_FILE.fullmatch(name):
                continue
            path = Path(folder) / name
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                entries.append(CacheEntry(path, info.st_size, max(info.st_atime, info.st_mtime)))
    entries.sort(key=lambda e: (e.last_used, str(e.path)))
    return entries


def cache_info(directory: str | os.PathLike[str] | None = None,
               max_bytes: int | None = None) -> CacheInfo:
    """Files and bytes of the cache directory, with the limit in force.

    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> _ = KernelCache(d).write("x = 1\\n")
    >>> info = cache_info(d, max_bytes=10**6)
    >>> info.files, info.bytes > 0
    (1, True)
    """
    root = Path(directory) if directory is not None else default_cache_dir()
    entries = cache_entries(root)
    return CacheInfo(root, len(entries), sum(e.size for e in entries),
                     max_cache_bytes() if max_bytes is None else max_bytes)


def _remove(entries: list[CacheEntry]) -> tuple[int, int]:
    files = freed = 0
    for entry in entries:
        try:
            entry.path.unlink()
        except FileNotFoundError:  # another process pruned it first
            continue
        except OSError as err:
            raise _cache_error(f"cannot remove the kernel cache entry {entry.path}", err,
                               entry.path) from None
        files, freed = files + 1, freed + entry.size
    return files, freed


def _remove_empty_folders(root: Path) -> None:
    for folder, _, _ in sorted(os.walk(root), key=lambda w: -len(w[0])):
        if Path(folder) != root:
            try:
                os.rmdir(folder)  # only succeeds when empty
            except OSError:
                pass


def clear_cache(directory: str | os.PathLike[str] | None = None) -> tuple[int, int]:
    """Remove every file of the project from the cache directory: ``(files, bytes)``."""
    root = Path(directory) if directory is not None else default_cache_dir()
    removed = _remove(cache_entries(root))
    _remove_empty_folders(root)
    _prune_log.info("kernel cache %s cleared: %d files, %d bytes", root, *removed)
    return removed


def prune_cache(directory: str | os.PathLike[str] | None = None,
                max_bytes: int | None = None) -> tuple[int, int]:
    """Remove least recently used files until the cache holds at most ``max_bytes`` (default
    ``max_cache_bytes()``): ``(files, bytes)`` removed.

    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> for n in range(3):
    ...     _ = KernelCache(d).write(f"x = {n}\\n")
    >>> prune_cache(d, max_bytes=0)[0], cache_info(d, max_bytes=0).files
    (3, 0)
    """
    root = Path(directory) if directory is not None else default_cache_dir()
    limit = max_cache_bytes() if max_bytes is None else max_bytes
    entries = cache_entries(root)
    excess = sum(e.size for e in entries) - limit
    victims = []
    for entry in entries:
        if excess <= 0:
            break
        victims.append(entry)
        excess -= entry.size
    removed = _remove(victims)
    if removed[0]:
        _remove_empty_folders(root)
        _prune_log.info("kernel cache %s pruned to %d bytes: removed %d files, %d bytes", root, limit,
                  *removed)
    return removed


def note_write(directory: Path) -> None:
    """Count a written entry; every ``PRUNE_EVERY_WRITES`` writes (and at the first) check the
    size of ``directory`` and prune it to the limit.  A failure to prune is logged, never
    raised: the entry just written is what the caller needs."""
    global _writes_since_check
    with _prune_lock:
        due = _writes_since_check % PRUNE_EVERY_WRITES == 0
        _writes_since_check += 1
    if not due:
        return
    try:
        prune_cache(directory)
    except CacheError as err:
        _prune_log.warning("kernel cache %s not pruned: %s", directory, err.message)
