"""Lowering of tiled fusions to ``@triton.jit`` kernels, launching, caching, the CLI.

Imports torch and triton lazily: the CLI's analysis subcommands must start without them.

    compiled = triton_backend.compile_hlo(hlo_text)      # run the ENTRY computation on tensors
    op = triton_backend.driver.torch_op(hlo_text, name="rmsnorm")  # a torch.library custom op
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "compile_hlo": "triton_backend.driver.module_runner",
    "torch_op": "triton_backend.driver.torch_op",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    # Lazy: importing the package must not import torch or triton (the analysis subcommands).
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'triton_backend' has no attribute {name!r}")
