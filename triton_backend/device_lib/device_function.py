"""The decorator of the device library's helpers: ``triton.jit``, less a cost of the interpreter.

Triton's interpreter runs a ``@triton.jit`` helper called from a kernel through
``InterpretedFunction.__call__``, which first re-patches ``triton.language`` for the helper
(``inspect.getmembers`` over the language modules, about 0.7 ms) although the launch of the
kernel calling it has patched the very same modules already.  The helpers of this library run
only inside launched kernels, and a generated kernel calls several per program instance:
under the interpreter :func:`device_function` calls the helper's rewritten function directly.
Compiled for a GPU (no interpreter) it is exactly ``triton.jit``.
"""
from __future__ import annotations

import triton

try:  # the interpreter's classes (Triton 3.x); without them the decorator is triton.jit
    from triton.runtime.errors import InterpreterError
    from triton.runtime.interpreter import InterpretedFunction
except ImportError:  # pragma: no cover - another Triton layout
    InterpretedFunction = None


class InterpretedDeviceFunction:
    """An interpreted helper called without re-patching ``triton.language`` (module
    docstring); every other attribute is the ``InterpretedFunction``'s."""

    def __init__(self, interpreted) -> None:
        self._interpreted = interpreted

    def __call__(self, *args, **kwargs):
        fn = self._interpreted.rewrite()
        try:
            return fn(*args, **kwargs)
        except Exception as err:  # the interpreter's own wrapping of a helper's failure
            raise InterpreterError(repr(err)) from err

    def __getattr__(self, name: str):
        return getattr(self._interpreted, name)


def device_function(fn):
    """``triton.jit(fn)``; under the interpreter, called without re-patching (module docstring).

    >>> from triton_backend.device_lib import elementwise_math
    >>> elementwise_math.signbit.fn.__name__  # the Python function, either way
    'signbit'
    """
    jitted = triton.jit(fn)
    if InterpretedFunction is not None and isinstance(jitted, InterpretedFunction) \
            and callable(getattr(jitted, "rewrite", None)):
        return InterpretedDeviceFunction(jitted)
    return jitted


__all__ = ["InterpretedDeviceFunction", "device_function"]
