"""The installed distribution's name and version (``pyproject.toml`` is the one source).

Kept below every other folder so that the CLI's ``--version`` and the module cache's key read
it without importing the package's facade.

>>> DISTRIBUTION
'hlo-triton-fusion'
>>> __version__ == "0+unknown" or __version__[0].isdigit()
True
"""
from __future__ import annotations

import os
import re
import sys

#: The name of the distribution on PyPI (``pip install hlo-triton-fusion``).
DISTRIBUTION = "hlo-triton-fusion"

# A ``.dist-info`` folder of this distribution: PEP 427 spells the name with ``_`` for ``-``;
# other installers may keep the ``-``/``.`` or another case (the name is normalised, PEP 503).
_DIST_INFO = re.compile(r"(?i)hlo[-_.]+triton[-_.]+fusion-([^-]+)\.dist-info")


def _metadata_version(folder: str) -> str | None:
    """The ``Version:`` header of a ``.dist-info`` folder's ``METADATA``, None without one."""
    try:
        with open(os.path.join(folder, "METADATA"), encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("Version:"):
                    return line.partition(":")[2].strip()
                if not line.strip():  # the headers end at the first blank line
                    return None
    except OSError:
        return None
    return None


def _dist_info_version() -> str | None:
    """The version of the first ``.dist-info`` of this distribution on ``sys.path`` (the one
    ``importlib.metadata`` finds), read directly: importing ``importlib.metadata`` (email,
    zipfile, csv) costs about 30 ms, a third of ``fusion-compile --version``."""
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:  # a zip file, a missing folder
            continue
        for name in names:
            if _DIST_INFO.fullmatch(name):
                return _metadata_version(os.path.join(entry or ".", name))
    return None


def _installed_version() -> str:
    # pyproject.toml is the one source of truth; an uninstalled checkout has no metadata.
    found = _dist_info_version()
    if found is not None:
        return found
    import importlib.metadata  # the slow, general path: an egg, a zip, another finder

    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


#: ``triton_backend.__version__``.
__version__ = _installed_version()


__all__ = ["DISTRIBUTION", "__version__"]
