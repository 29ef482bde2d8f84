"""Output files written whole or not at all: a temporary file in the same directory, flushed
and synced, replaces the target only once complete.  A failure midway (a full disk, Ctrl-C)
removes the temporary file and leaves the old target (or none), never half of a new one.

The command line's outputs (``cli.output_files``) and ``compile -o DIR``'s kernel, PTX, cubin
and report files all go through here; the kernel cache has its own entry writer
(``cache_files.atomic_write``), which adds the cache's errors.

>>> import os, tempfile
>>> directory = tempfile.mkdtemp()
>>> write_bytes_atomic(os.path.join(directory, "k.py"), b"x = 1\\n")
>>> sorted(os.listdir(directory))
['k.py']
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from fusion.logs import get_logger

_log = get_logger("triton_backend.files")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike[str], mode: str = "wb") -> Iterator[IO]:
    """A file object whose content replaces ``path`` when the block ends without error.

    >>> import tempfile
    >>> target = Path(tempfile.mkdtemp()) / "out.txt"
    >>> with atomic_output(target, "w") as handle:
    ...     _ = handle.write("ok")
    >>> target.read_text()
    'ok'
    """
    target = Path(path)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp",
                                    dir=target.parent if str(target.parent) else ".")
    try:
        # mkstemp makes the file private (0600); an output gets the usual umask permissions.
        os.chmod(tmp_name, 0o666 & ~_umask())
        with os.fdopen(fd, mode) as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, target)
        _log.debug("wrote %s", target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """``path`` holds ``data`` afterwards, or (on any failure) what it held before."""
    with atomic_output(path, "wb") as handle:
        handle.write(data)


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """``write_bytes_atomic`` of ``text`` in UTF-8."""
    write_bytes_atomic(path, text.encode("utf-8"))


__all__ = ["atomic_output", "write_bytes_atomic", "write_text_atomic"]
