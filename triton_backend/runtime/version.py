"""The installed distribution's name and version (``pyproject.toml`` is the one source).

Kept below every other folder so that the CLI's ``--version`` and the module cache's key read
it without importing the package's facade.

>>> DISTRIBUTION
'hlo-triton-fusion'
"""
from __future__ import annotations

import importlib.metadata

#: The name of the distribution on PyPI (``pip install hlo-triton-fusion``).
DISTRIBUTION = "hlo-triton-fusion"


def _installed_version() -> str:
    # pyproject.toml is the one source of truth; an uninstalled checkout has no metadata.
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


#: ``triton_backend.__version__``.
__version__ = _installed_version()


__all__ = ["DISTRIBUTION", "__version__"]
