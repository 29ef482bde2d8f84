"""Lowering of tiled fusions to ``@triton.jit`` kernels, launching, caching, the CLI.

Imports torch and triton lazily: the CLI's analysis subcommands must start without them.

    compiled = triton_backend.compile_hlo(hlo_text)      # run the ENTRY computation on tensors
    op = triton_backend.driver.torch_op(hlo_text, name="rmsnorm")  # a torch.library custom op
    f = triton_backend.from_jax(jax_fn, *example_args)   # a JAX function as a torch op

``__version__`` is the installed distribution's version (``pyproject.toml`` is its one source).
"""
from __future__ import annotations

import importlib
import importlib.metadata
from typing import Any

#: The name of the distribution on PyPI (``pip install hlo-triton-fusion``).
DISTRIBUTION = "hlo-triton-fusion"


def _installed_version() -> str:
    # pyproject.toml is the one source of truth; an uninstalled checkout has no metadata.
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "0+unknown"


__version__ = _installed_version()

_EXPORTS = {
    "compile_hlo": "triton_backend.driver.module_runner",
    "from_jax": "triton_backend.driver.from_jax",
    "torch_op": "triton_backend.driver.torch_op",
}

# ``triton_backend.driver.torch_op(...)`` must work right after ``import triton_backend``.
_SUBPACKAGES = ("driver",)

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name: str) -> Any:
    # Lazy: importing the package must not import torch or triton (the analysis subcommands).
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    if name in _SUBPACKAGES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module 'triton_backend' has no attribute {name!r}")
