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
here needs it, so the kernel cache can take the lock without importing torch.)  Where
needed, an interpreted launch holds :data:`INTERPRETED_LAUNCH` instead
(:func:`interpreted_launch_lock`), which is that lock and one thing more: Triton decorates
its own library functions (``tl.zeros``, ``tl.sum``, ``tl.sort`` ...) once,
when ``triton.language`` is imported, so in a process that imported Triton before the
interpreter was chosen they are ``JITFunction``s, which the interpreter refuses to call
("Cannot call @triton.jit'd outside of the scope of a kernel"); for the launch they are
swapped for interpreter functions of the same code, and back after.

>>> configure_launch_mode().type in ("cpu", "cuda")
True
"""
from __future__ import annotations

import functools
import os
import threading
from typing import TYPE_CHECKING, Any

from triton_backend.lowering.numerics_policy import pin_triton_environment

if TYPE_CHECKING:
    import torch

INTERPRET_ENV = "TRITON_INTERPRET"

#: Held by every interpreted launch and every rewrite of a kernel for the interpreter: two
#: at once would read each other's program ids (see the module docstring).  Re-entrant, so a
#: launch may load a helper module.
INTERPRETER_LOCK = threading.RLock()


class _InterpretedLaunch:
    """``with INTERPRETED_LAUNCH:`` (module docstring); re-entrant like the lock it holds."""

    def __init__(self) -> None:
        self._depth = 0

    def __enter__(self) -> "_InterpretedLaunch":
        INTERPRETER_LOCK.acquire()
        self._depth += 1
        if self._depth == 1:
            for module, name, _, twin in _library_twins():
                setattr(module, name, twin)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._depth -= 1
        if self._depth == 0:
            for module, name, original, _ in _library_twins():
                setattr(module, name, original)
        INTERPRETER_LOCK.release()


#: Held by an interpreted launch where Triton's library was decorated for a GPU (module
#: docstring).
INTERPRETED_LAUNCH = _InterpretedLaunch()


@functools.lru_cache(maxsize=None)
def _library_twins() -> tuple[tuple[Any, str, Any, Any], ...]:
    """``(module, name, function, interpreter twin)`` for each ``JITFunction`` of
    ``triton.language`` and its ``standard`` module; none when Triton was imported in
    interpreter mode.  Found once, by :func:`interpreted_launch_lock`, before any swap."""
    import triton.language as tl
    from triton.language import standard
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    try:  # gluon wraps these functions when first imported (by a launch) and wants them as is
        import triton.experimental.gluon  # noqa: F401
    except ImportError:
        pass
    twins: dict[int, Any] = {}  # one twin for a function a module names twice
    return tuple((module, name, value, twins.setdefault(id(value), InterpretedFunction(value.fn)))
                 for module in (tl, standard) for name, value in list(vars(module).items())
                 if isinstance(value, JITFunction))


def interpreted_launch_lock() -> Any:
    """What an interpreted launch holds: :data:`INTERPRETED_LAUNCH` when Triton's library
    functions were decorated for a GPU (module docstring), else :data:`INTERPRETER_LOCK`
    alone (a lock taken in C: no Python calls on the launch path)."""
    return INTERPRETED_LAUNCH if _library_twins() else INTERPRETER_LOCK


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


__all__ = ["INTERPRETED_LAUNCH", "INTERPRETER_LOCK", "INTERPRET_ENV", "configure_launch_mode",
           "interpreted_launch_lock", "interpreting", "runs_on_interpreter"]
