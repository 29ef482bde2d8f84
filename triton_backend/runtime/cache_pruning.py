"""The kernel cache's size limit: its files and bytes, clearing it, pruning it to the limit
(``fusion-compile cache``), and the check every so many writes that keeps it there.

Apart from ``kernel_cache``, which writes entries and loads them as modules: this side only
lists, measures and removes files, the project's own (``kernel_*.py`` entries, the module
cache's ``*.json`` plans, temporary files of interrupted writes), least recently used first.

>>> parse_size("512M") == 512 * 2**20
True
"""
from __future__ import annotations

import os
import re
import stat
import threading
from dataclasses import dataclass
from pathlib import Path

from fusion.errors import CacheError
from fusion.logs import get_logger
from triton_backend.runtime.cache_files import cache_error, default_cache_dir

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
    >>> from triton_backend.runtime.kernel_cache import KernelCache
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
            raise cache_error(f"cannot remove the kernel cache entry {entry.path}", err,
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
    >>> from triton_backend.runtime.kernel_cache import KernelCache
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


__all__ = ["DEFAULT_MAX_BYTES", "MAX_BYTES_ENV", "PRUNE_EVERY_WRITES", "CacheEntry", "CacheInfo",
           "cache_entries", "cache_info", "clear_cache", "max_cache_bytes", "note_write",
           "parse_size", "prune_cache"]
