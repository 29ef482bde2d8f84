"""Where generated kernels run: a CUDA GPU, or the Triton interpreter on CPU tensors.

Triton 3.9 reads ``TRITON_INTERPRET`` (``triton.knobs.runtime.interpret``) each time a function
is *decorated* with ``@triton.jit``: set, it returns an ``InterpretedFunction`` that runs on CPU
tensors; unset, a ``JITFunction`` that needs a GPU.  So the choice must be made before any
generated kernel file is imported.  :func:`configure_launch_mode` makes it once per process:
without a CUDA device and with ``TRITON_INTERPRET`` unset it turns the interpreter on.  It also
pins the numerics policy's environment (no FP contraction).

The interpreter keeps its launch state in globals (the grid and program index of its builder,
``triton.language`` functions patched for the launch, the cache of rewritten kernels), so
whatever touches that state, an interpreted launch or a kernel's rewrite, holds
:data:`INTERPRETER_LOCK`; GPU launches take no lock.  (torch is imported only when a function
here needs it, so the kernel cache can take the lock without importing torch.)

>>> configure_launch_mode().type in ("cpu", "cuda")
True
"""
from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

from triton_backend.lowering.numerics_policy import pin_triton_environment

if TYPE_CHECKING:
    import torch

INTERPRET_ENV = "TRITON_INTERPRET"

#: Held by every interpreted launch and every rewrite of a kernel for the interpreter: two
#: at once would read each other's program ids (see the module docstring).  Re-entrant, so a
#: launch may load a helper module.
INTERPRETER_LOCK = threading.RLock()


def interpreting() -> bool:
    """True when kernels decorated now become interpreter functions (CPU tensors)."""
    return os.environ.get(INTERPRET_ENV, "").strip().lower() in ("1", "true", "on", "yes")


def runs_on_interpreter(target: str | None = None) -> bool:
    """True when a kernel compiled now for ``target`` will run under the Triton interpreter:
    no GPU ``target`` is named (``"cuda:90"``: the kernel is meant for it, its PTX and report
    too) and kernels are interpreted.  Templates then shape kernels for the interpreter (few
    large programs, no per-element ``tl.reduce``).

    >>> runs_on_interpreter("cuda:90")
    False
    """
    return target is None and interpreting()


def configure_launch_mode() -> torch.device:
    """Choose the interpreter when there is no GPU; return the device kernels take tensors on.

    An explicit ``TRITON_INTERPRET`` is respected (so a GPU machine can still interpret).
    """
    import torch  # noqa: PLC0415 - heavy; only here, so the lock above comes without it

    pin_triton_environment()
    if INTERPRET_ENV not in os.environ and not torch.cuda.is_available():
        os.environ[INTERPRET_ENV] = "1"
    return torch.device("cpu") if interpreting() else torch.device("cuda")


__all__ = ["INTERPRETER_LOCK", "INTERPRET_ENV", "configure_launch_mode", "interpreting",
           "runs_on_interpreter"]
