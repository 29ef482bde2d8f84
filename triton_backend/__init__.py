"""Lowering of tiled fusions to ``@triton.jit`` kernels, launching, caching, the CLI.

Imports torch and triton lazily: the CLI's analysis subcommands must start without them.

    compiled = triton_backend.compile_hlo(hlo_text)      # run the ENTRY computation on tensors
    op = triton_backend.torch_op(hlo_text, name="rmsnorm")  # a torch.library custom op
    f = triton_backend.from_jax(jax_fn, *example_args)   # a JAX function as a torch op

``__version__`` is the installed distribution's version (``pyproject.toml`` is its one source).
Folders, in import order (each imports only the folders listed before it;
``tests/test_import_graph.py`` checks it):

* ``device_lib/``: the ``@triton.jit`` helpers generated kernels import;
* ``host/``: host-side work around launches (host ops, packing, input and output checks);
* ``lowering/emitter/``: the index-expression emitter every op rule writes into;
* ``lowering/rules/``: every op's lowering rule;
* ``lowering/``: one tiled fusion to the text of a kernel file;
* ``runtime/``: kernel and module caches, kernel loading, launch mode, tuning database;
* ``templates/``: the dot, attention, conv, scatter, select-and-scatter and sort templates
  (``templates/dot/`` first: ``attention`` and ``conv`` build on it);
* ``driver/``: ``compile_hlo``, compiling one fusion, op coverage;
* ``tuning/``: autotuning and the cost model;
* ``integrations/``: the PyTorch custom op and JAX functions as torch ops;
* ``reports/``: what ``compile`` reports (per kernel, PTX and cubin);
* ``cli/``: the ``fusion-compile`` command line.
"""
from __future__ import annotations

import importlib
from typing import Any

from triton_backend.runtime.version import DISTRIBUTION, __version__

_EXPORTS = {
    "compile_hlo": "triton_backend.driver.module_compiler",
    "from_jax": "triton_backend.integrations.from_jax",
    "torch_op": "triton_backend.integrations.torch_op",
}

__all__ = sorted(_EXPORTS) + ["DISTRIBUTION", "__version__"]


def __getattr__(name: str) -> Any:
    # Lazy: importing the package must not import torch or triton (the analysis subcommands).
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'triton_backend' has no attribute {name!r}")
