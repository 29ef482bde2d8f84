"""The files of the project's caches: where they live, their checked format, and reading and
writing them safely.

The kernel cache's entries (``kernel_cache``), the module cache's plans (``module_cache``) and
the source stamps (``source_stamp``) are all such files.  They are apart from what each cache
keeps in them because the hazards are the same for all: a cache directory is shared between
processes and users, and may hold anything.

* Directory: ``$FUSION_KERNEL_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/hlo-triton-fusion/kernels``,
  else ``~/.cache/hlo-triton-fusion/kernels`` (:func:`default_cache_dir`; the other caches
  live in or beside it, :func:`user_cache_path`).
* Each file starts with ``# content-sha256: <hash of the body>`` (:func:`render_entry`); a
  truncated or edited entry fails that check on read (:func:`read_entry`) and is rewritten by
  its cache, never used as is.
* Writing is atomic (:func:`atomic_write`): a temporary file in the same directory, ``fsync``,
  ``os.replace``; so concurrent processes never see half a file and the last writer wins with
  identical bytes.  A failed write (read-only or full disk, a file or dangling link where the
  directory should be) is a :class:`~fusion.errors.CacheError` naming the path, and leaves no
  temporary file.
* Only regular files are opened (``lstat`` first, then ``O_NOFOLLOW | O_NONBLOCK``:
  :func:`read_own_text`): a FIFO, device, symbolic link or another user's file at an entry's
  path is never read, but replaced by a fresh entry; a directory there is a ``CacheError``.

>>> import tempfile
>>> path = Path(tempfile.mkdtemp()) / "entry.py"
>>> write_entry(path, "x = 1")
>>> read_entry(path).splitlines()[1], entry_is_valid(path.read_text())
('x = 1', True)
"""
from __future__ import annotations

import errno
import hashlib
import os
import re
import stat
import tempfile
from pathlib import Path

from fusion.errors import CacheError

#: The one environment variable that moves the cache.
CACHE_DIR_ENV = "FUSION_KERNEL_CACHE_DIR"
#: Moves the module cache's plans (default: ``modules`` in the kernel cache directory).
PLAN_DIR_ENV = "FUSION_MODULE_CACHE_DIR"

_HEADER_PREFIX = "# content-sha256: "


def default_cache_dir() -> Path:
    """The cache directory chosen by the environment (see the module docstring).

    >>> import os
    >>> os.environ.get(CACHE_DIR_ENV) is None or default_cache_dir() == Path(os.environ[CACHE_DIR_ENV])
    True
    """
    return user_cache_path(CACHE_DIR_ENV, "kernels")


def plan_directory(kernel_dir: Path | None = None) -> Path:
    """Where the plans naming the kernel files of ``kernel_dir`` live (default: the kernel
    cache of the environment): ``$FUSION_MODULE_CACHE_DIR`` for that default kernel cache,
    else ``modules`` inside the kernel directory.

    A kernel directory given explicitly (a test's, a tool's) keeps its own plans beside it:
    the environment's plan directory belongs to the environment's kernel cache, the one
    ``compile_hlo`` pairs it with, so pruning a scratch directory never touches it.

    >>> plan_directory(Path("/scratch/k")).as_posix()
    '/scratch/k/modules'
    """
    default = default_cache_dir()
    if kernel_dir is None or Path(kernel_dir) == default:
        explicit = os.environ.get(PLAN_DIR_ENV)
        if explicit:
            return Path(explicit).expanduser()
        return default / "modules"
    return Path(kernel_dir) / "modules"


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
    text = read_own_text(path)
    if text is None or not entry_is_valid(text):
        return None
    if body_hash is not None and not text.startswith(f"{_HEADER_PREFIX}{body_hash}\n"):
        return None
    return text


def write_entry(path: Path, source: str) -> None:
    """Write ``render_entry(source)`` to ``path`` atomically; ``CacheError`` when it cannot."""
    atomic_write(path, render_entry(source))


def encoded_size(text: str) -> int:
    """Bytes of ``text`` in UTF-8 (a file longer than the entry expected is not read)."""
    return len(text.encode("utf-8"))


def read_own_text(path: Path, limit: int | None = None) -> str | None:
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


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and ``os.replace``; a failure is a
    ``CacheError`` naming the path, and removes the temporary file (``path`` keeps its old
    content)."""
    directory = path.parent
    make_cache_directory(directory, CACHE_DIR_ENV, "kernel cache directory")
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".tmp", dir=directory)
    except OSError as err:
        raise cache_error("cannot create a file in this kernel cache directory", err,
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
            raise cache_error("cannot write this kernel cache entry", err, path) from None
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


def cache_error(what: str, err: OSError, path: Path) -> CacheError:
    """A ``CacheError`` at ``path`` saying ``what`` failed and why, with a hint where moving the
    cache would help."""
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


__all__ = ["CACHE_DIR_ENV", "PLAN_DIR_ENV", "SHA256_HEX", "atomic_write", "cache_error",
           "canonical_source",
           "content_hash", "default_cache_dir", "encoded_size", "entry_is_valid",
           "make_cache_directory", "plan_directory", "read_entry", "read_own_text", "render_entry",
           "user_cache_path", "write_entry"]
