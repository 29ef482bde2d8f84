"""Where generated kernels run: a CUDA GPU, or the Triton interpreter on CPU tensors.

Triton 3.9 reads ``TRITON_INTERPRET`` (``triton.knobs.runtime.interpret``) each time a function
is *decorated* with ``@triton.jit``: set, it returns an ``InterpretedFunction`` that runs on CPU
tensors; unset, a ``JITFunction`` that needs a GPU.  So the choice must be made before any
generated kernel file is imported.  :func:`configure_launch_mode` makes it once per process:
without a CUDA device and with ``TRITON_INTERPRET`` unset it turns the interpreter on.  It also
pins the numerics policy's environment (no FP contraction).

>>> configure_launch_mode().type in ("cpu", "cuda")
True
"""
from __future__ import annotations

import os

import torch

from triton_backend.lowering.numerics_policy import pin_triton_environment

INTERPRET_ENV = "TRITON_INTERPRET"


def interpreting() -> bool:
    """True when kernels decorated now become interpreter functions (CPU tensors)."""
    return os.environ.get(INTERPRET_ENV, "").strip().lower() in ("1", "true", "on", "yes")


def configure_launch_mode() -> torch.device:
    """Choose the interpreter when there is no GPU; return the device kernels take tensors on.

    An explicit ``TRITON_INTERPRET`` is respected (so a GPU machine can still interpret).
    """
    pin_triton_environment()
    if INTERPRET_ENV not in os.environ and not torch.cuda.is_available():
        os.environ[INTERPRET_ENV] = "1"
    return torch.device("cpu") if interpreting() else torch.device("cuda")


__all__ = ["INTERPRET_ENV", "configure_launch_mode", "interpreting"]
