"""Kernel launches replaced by no-ops, to measure the host's part of a call on its own
(``bench/host_overhead.py``, the host-plan tests).

A stubbed fusion gets a private copy of its kernel module (its file's checked text executed
again under a name of its own) whose ``KERNEL`` launches nothing: the loaded kernel modules
are shared by every compile in the process (``kernel_cache``), so a stub set on them would
reach every later compile of the same kernel.  A library call (``LibraryCall``: a plain dot,
a long sort) only allocates its results, as a stubbed launch does.

>>> import torch
>>> from triton_backend import compile_hlo
>>> text = '''HloModule m
... ENTRY e {
...   x = f32[4] parameter(0)
...   ROOT n = f32[4] negate(x)
... }'''
>>> stubbed = compile_hlo(text)
>>> stub_launches(stubbed)
>>> _ = stubbed(torch.ones(4))  # nothing launched: the output is whatever torch.empty held
>>> compile_hlo(text, cache=False)(torch.ones(4))[0].tolist()  # the shared kernel still runs
[-1.0, -1.0, -1.0, -1.0]
"""
from __future__ import annotations

import itertools
from typing import Any

from triton_backend.runtime.cache_files import render_entry
from triton_backend.runtime.kernel_cache import import_checked_text
from triton_backend.runtime.kernel_loading import LibraryCall


class InterpretedFunction:
    """A launch that does nothing, named as the interpreter's kernels are, so a call on CPU
    tensors uses the stubbed module as it is (no interpreter copy)."""

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


_COPIES = itertools.count()


def stub_launches(compiled: Any) -> None:
    """Make every launch of ``compiled`` (a ``CompiledModule``) do nothing: each kernel's
    through a private stubbed module, each library call's by only allocating its results.  The
    module's prepared calls are dropped, so they are built again with the stubs."""
    for fusion in compiled.fusions.values():
        if isinstance(fusion, LibraryCall):
            object.__setattr__(fusion, "__class__", _allocating_class(type(fusion)))
            continue
        private = import_checked_text(fusion.kernel_path, render_entry(fusion.source),
                                      f"_fusion_kernel_stub_{next(_COPIES)}")
        private.KERNEL = InterpretedFunction()
        object.__setattr__(fusion, "module", private)
        for prepared in ("_launchers", "_runners"):
            fusion.__dict__.pop(prepared, None)
    for prepared in ("_plans", "_entry_call"):
        compiled.__dict__.pop(prepared, None)


_ALLOCATING: dict[type, type] = {}


def _allocating_class(base: type) -> type:
    """``base`` (a library call's class) whose call only allocates its results (their shapes
    and dtypes worked out once, by the call itself on the meta device)."""
    if base not in _ALLOCATING:
        import torch

        class _Allocating(base):
            def __call__(self, *tensors, **launch_options):
                known = self.__dict__.setdefault("_stub_results", {})  # frozen: not a field
                key = tuple((tuple(t.shape), t.dtype) for t in tensors)
                results = known.get(key)
                if results is None:
                    meta = base.__call__(self, *(torch.empty(t.shape, dtype=t.dtype,
                                                             device="meta") for t in tensors))
                    results = known[key] = tuple((tuple(r.shape), r.dtype) for r in meta)
                device = tensors[0].device
                return tuple(torch.empty(shape, dtype=dtype, device=device)
                             for shape, dtype in results)

        _ALLOCATING[base] = _Allocating
    return _ALLOCATING[base]


__all__ = ["InterpretedFunction", "stub_launches"]
