"""A kernel launched straight through its compiled launcher, without Triton's per-call binding.

``KERNEL[GRID](*args)`` goes through ``JITFunction.run`` on every call: it binds the arguments
to the signature, computes each one's specialization (dtype, 16-byte alignment, integer
values), builds the cache key, looks the kernel up, checks the kernel's globals, builds the
launch metadata and only then calls the compiled launcher.  On an H200 host that was about
40-60 us per launch (a GPT-2 block's 7 kernels: 348 us per call against 103 us of GPU time),
where the launcher itself (``CompiledKernel.run``) costs a few.

:func:`direct_launcher` keeps the first call's compiled kernel and launches it directly
afterwards, for as long as what that kernel was specialized on still holds:

* every argument is a tensor (no integer or float scalars, whose values Triton specializes
  on, no constexpr parameters), so the specialization is the pointers' dtypes (fixed by the
  call site) and their alignment;
* each pointer that was 16-byte aligned at the first call still is (a pointer that was not
  got a kernel that assumes nothing, which any pointer may use);
* the current device is the first call's, and no launch hook is installed (a profiler's
  hooks see every launch through Triton's own path).

Anything else goes through ``JITFunction.run`` as before, which compiles another
specialization when it must.

>>> class Compiled:  # what JITFunction.run returns: a launcher and its handles
...     function, packed_metadata, calls = "f", "m", []
...     def run(self, *args):
...         self.calls.append(args[9:])
>>> class Jit:  # a JIT function of two pointer parameters
...     params = [type("P", (), {"is_constexpr": False})()] * 2
...     slow = 0
...     def run(self, *args, grid, warmup, **options):
...         self.slow += 1
...         kernel.run(*grid, None, None, None, None, None, None, *args)
...         return kernel
>>> class Tensor:
...     def __init__(self, address): self.address = address
...     def data_ptr(self): return self.address
>>> kernel, jit = Compiled(), Jit()
>>> launch = direct_launcher(jit, (4, 1, 1), device_index=lambda: 0, stream=lambda d: 7,
...                          is_tensor=lambda a: isinstance(a, Tensor))
>>> a, b = Tensor(256), Tensor(512)
>>> launch(a, b); launch(a, b); launch(a, b)
>>> jit.slow, len(kernel.calls)      # the first through JITFunction.run, then directly
(1, 3)
>>> launch(Tensor(258), b); jit.slow  # no longer aligned as the kernel assumes: Triton's path
2
"""
from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

#: Triton specializes a pointer on being a multiple of this many bytes.
ALIGNMENT = 16


def enabled() -> bool:
    """Whether kernel files launch directly: yes unless ``FUSION_DIRECT_LAUNCH=0`` (every
    launch through ``JITFunction.run``, to compare or to rule this path out).

    >>> enabled() == (os.environ.get("FUSION_DIRECT_LAUNCH", "1") != "0")
    True
    """
    return os.environ.get("FUSION_DIRECT_LAUNCH", "1").strip() != "0"


def _quiet(hook: Any) -> bool:
    """No launch hook: None (older Triton) or an empty ``HookChain``."""
    return hook is None or getattr(hook, "calls", None) == []


def _eligible(jit_function: Any, compiled: Any, args: tuple, is_tensor: Callable) -> bool:
    params = getattr(jit_function, "params", None)
    return (params is not None and len(params) == len(args)
            and not any(getattr(p, "is_constexpr", True) for p in params)
            and all(is_tensor(a) for a in args)
            and all(hasattr(compiled, name) for name in ("run", "function", "packed_metadata")))


def direct_launcher(jit_function: Any, grid: tuple, *, device_index: Callable | None = None,
                    stream: Callable | None = None, is_tensor: Callable | None = None,
                    hooks: Callable | None = None) -> Callable:
    """``jit_function[grid]`` that launches its compiled kernel directly from the second call
    on, while the first call's specialization holds (module docstring); ``launch(*args,
    **options)`` with the same options at each call site (``num_warps``, ``num_stages``: each
    set has its own compiled kernel).  ``device_index``, ``stream``, ``is_tensor`` and
    ``hooks`` (``() -> (enter, exit)``) default to Triton's and torch's own (tests pass
    stand-ins)."""
    if device_index is None or stream is None or hooks is None:
        from triton import knobs  # noqa: PLC0415 - only on a GPU path
        from triton.runtime.driver import driver  # noqa: PLC0415

        device_index = device_index or driver.active.get_current_device
        stream = stream or driver.active.get_current_stream
        hooks = hooks or (lambda: (knobs.runtime.launch_enter_hook,
                                   knobs.runtime.launch_exit_hook))
    if is_tensor is None:
        import torch  # noqa: PLC0415

        def is_tensor(value):
            return isinstance(value, torch.Tensor)

    grid_0, grid_1, grid_2 = (tuple(grid) + (1, 1))[:3]
    #: options -> (compiled kernel, device, indices of the aligned pointers), or None where
    #: the launch can never be direct.
    kernels: dict[tuple, tuple | None] = {}

    def launch(*args, **options):
        key = tuple(options.items())
        entry = kernels.get(key)
        if entry is not None:
            compiled, device, aligned = entry
            enter, leave = hooks()
            if device_index() == device and _quiet(enter) and _quiet(leave):
                for i in aligned:
                    if args[i].data_ptr() % ALIGNMENT:
                        break
                else:
                    compiled.run(grid_0, grid_1, grid_2, stream(device), compiled.function,
                                 compiled.packed_metadata, None, None, None, *args)
                    return None
        compiled = jit_function.run(*args, grid=grid, warmup=False, **options)
        if key not in kernels:
            kernels[key] = (compiled, device_index(),
                            tuple(i for i, a in enumerate(args)
                                  if a.data_ptr() % ALIGNMENT == 0)) \
                if _eligible(jit_function, compiled, args, is_tensor) else None
        return None

    return launch
