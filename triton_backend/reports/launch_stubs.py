"""Kernel launches replaced by no-ops, to measure the host's part of a call on its own
(``bench/host_overhead.py``, the host-plan tests).

A stubbed fusion gets a private copy of its kernel module (its file's checked text executed
again under a name of its own) whose ``KERNEL`` launches nothing: the loaded kernel modules
are shared by every compile in the process (``kernel_cache``), so a stub set on them would
reach every later compile of the same kernel.  A library dot (``LibraryDot``) only allocates
its result, as a stubbed launch does.

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


class InterpretedFunction:
    """A launch that does nothing, named as the interpreter's kernels are, so a call on CPU
    tensors uses the stubbed module as it is (no interpreter copy)."""

    def __getitem__(self, grid):
        return lambda *args, **kwargs: None


_COPIES = itertools.count()


def stub_launches(compiled: Any) -> None:
    """Make every launch of ``compiled`` (a ``CompiledModule``) do nothing: each kernel's
    through a private stubbed module, each library dot's by only allocating its result.  The
    module's prepared calls are dropped, so they are built again with the stubs."""
    for fusion in compiled.fusions.values():
        if getattr(fusion, "module", None) is None:  # a library call (LibraryDot)
            object.__setattr__(fusion, "__class__", _allocating_dot_class(type(fusion)))
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
_SHAPES: dict[tuple, tuple[int, ...]] = {}


def _allocating_dot_class(base: type) -> type:
    """``base`` (a library dot's class) whose call only allocates its result (its shape
    worked out once on the meta device)."""
    if base not in _ALLOCATING:
        import torch

        class _AllocatingDot(base):
            def __call__(self, *tensors, **launch_options):
                operands = [tensors[k] for k in self.operands]
                key = (self.equation, *(tuple(t.shape) for t in operands))
                shape = _SHAPES.get(key)
                if shape is None:
                    meta = torch.einsum(self.equation, *(
                        torch.empty(t.shape, dtype=t.dtype, device="meta") for t in operands))
                    shape = _SHAPES[key] = tuple(meta.permute(self._to_logical).shape)
                return (torch.empty(shape, dtype=operands[0].dtype, device=operands[0].device),)

        _ALLOCATING[base] = _AllocatingDot
    return _ALLOCATING[base]


__all__ = ["InterpretedFunction", "stub_launches"]
