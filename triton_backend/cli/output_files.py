"""Files the command line writes: checked before any work, written atomically.

An output path is used exactly as given (``np.savez`` would append ``.npz`` to a name without
it, so archives are written through a file object).  The bytes go to a temporary file in the
same directory, which replaces the target only once complete: a failure or Ctrl-C leaves the
old file (or none), never half of a new one (``runtime.atomic_files``, which ``compile -o``
uses too).

>>> import os, tempfile
>>> from triton_backend.runtime.atomic_files import atomic_output
>>> path = os.path.join(tempfile.mkdtemp(), "out.bin")
>>> with atomic_output(path) as handle:
...     _ = handle.write(b"ok")
>>> open(path, "rb").read(), sorted(os.listdir(os.path.dirname(path)))
(b'ok', ['out.bin'])
"""
from __future__ import annotations

import os
from pathlib import Path

from fusion.errors import OutputPathError


def check_output_path(path: str | os.PathLike[str], option: str) -> Path:
    """``path`` as a Path, its parent directory created; a clear error when it is unusable.

    >>> check_output_path("/", "--outputs")
    Traceback (most recent call last):
    ...
    fusion.errors.OutputPathError: --outputs: / is a directory, not a file
    """
    target = Path(path)
    if target.is_dir():
        raise OutputPathError(f"{target} is a directory, not a file", where=option)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise OutputPathError(f"cannot create {target}: a parent is not a directory",
                              where=option) from None
    except OSError as err:
        raise OutputPathError(f"cannot create the directory of {target}: {err.strerror}",
                              where=option) from None
    if not os.access(target.parent, os.W_OK):
        raise OutputPathError(f"cannot write {target}: its directory is not writable",
                              where=option)
    return target


__all__ = ["check_output_path"]
