"""Plain dot fusions run as one library call (``torch.einsum``: cuBLAS on a GPU), XLA:GPU's first path.

XLA:GPU's ``GemmRewriter`` turns a dot into a cuBLAS custom call before any Triton emitter
sees it; Triton takes a dot only when autotuning picks it or there is something to fuse into
it.  We do the same for a *plain dot fusion*: a fusion whose computation is parameters, one
``dot`` of two of them (any batch and contracting dims, any untiled layouts) and nothing
else, its root the dot; operand and result element types all equal and one of bf16, f16, f32;
no ``algorithm``.  Anything more (a convert or transpose prologue, a bias or activation
epilogue, mixed types, fp8, int8, an algorithm) is not plain, and stays a Triton dot kernel:
the fused work is what a library call cannot do.

A plain dot chosen for the library is compiled to :class:`LibraryDot`: no kernel file; called
like a ``CompiledFusion`` with the operand tensors, it returns ``(torch.einsum(...),)`` with
the equation of the dot's dimension numbers (result dims in HLO order: batch, lhs free, rhs
free), computed in the result layout's dim order and returned as the logical view.

**The rule** (``compile_hlo(dot_library=...)``, decided statically, without a GPU):

* ``"auto"`` (the default): the library only when kernels run on a GPU (the compile's device
  is ``cuda``, not the Triton interpreter), the dot is plain, no explicit ``tiling`` names the
  fusion, its type is bf16 or f16 (:data:`AUTO_LIBRARY_TYPES`), and its M, N and K (per
  batch: lhs free, rhs free and contracting elements) are each at least
  :data:`MIN_LIBRARY_DIM` (128): tensor-core sized.  There cuBLAS's GEMMs are the
  reference that Triton's own matmul tutorial matches at best, and XLA:GPU's GemmRewriter
  sends such dots to cuBLAS unless autotuning picks Triton.  Smaller dots stay Triton (a
  library call's launch overhead and fixed tiles buy nothing there).  Under the interpreter
  ``"auto"`` means never, so the Triton dot template stays what CPU runs exercise.
* ``"always"``: every plain dot, on the CPU too (torch's CPU matmul); the tests use it.
* ``"never"``: every dot is a Triton kernel.

Numerics: bf16/f16 products are accumulated in f32 by cuBLAS and torch's CPU kernels and
rounded once to the result type, like the Triton template (torch's
``allow_bf16/fp16_reduced_precision_reduction`` let cuBLAS's split-K reduce partial sums in
16 bits; turn them off for XLA's numerics); f32 (``"always"`` only) follows torch's
``float32_matmul_precision`` (default ``"highest"``: exact, no TF32).

>>> import fusion
>>> m = fusion.parse_hlo('''HloModule m
... f {
...   a = f32[2,8,4] parameter(0)
...   b = f32[2,4,6] parameter(1)
...   ROOT d = f32[2,8,6] dot(a, b), lhs_batch_dims={0}, rhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_contracting_dims={1}
... }
... ENTRY e {
...   x = f32[2,8,4] parameter(0)
...   y = f32[2,4,6] parameter(1)
...   ROOT r = f32[2,8,6] fusion(x, y), kind=kCustom, calls=f
... }''')
>>> plain_dot_sizes(m, m.entry.root), einsum_equation(m, m.entry.root)
((8, 6, 4), 'abc,acd->abd')
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from fusion.errors import BadArgumentError
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.ir.shape import ArrayShape
from triton_backend.lowering.emitter.addressing import is_physical_layout, minor_to_major
from triton_backend.runtime.kernel_loading import LibraryCall, TemplateKind

#: ``compile_hlo(dot_library=...)`` values (module docstring).
DOT_LIBRARY_OPTIONS = ("auto", "never", "always")

#: ``"auto"``: the least M, N and K (per batch) of a dot the library runs (tensor-core sized).
MIN_LIBRARY_DIM = 128

#: Element types a plain dot has (all operands and the result the same).
LIBRARY_DOT_TYPES = frozenset({"bf16", "f16", "f32"})

#: The types ``"auto"`` sends to the library: not f32, whose torch matmul follows the
#: process-wide ``allow_tf32``/``float32_matmul_precision`` rather than the module's own
#: ``f32_dot_precision``.
AUTO_LIBRARY_TYPES = frozenset({"bf16", "f16"})

_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def check_dot_library(value: Any) -> str:
    """``value`` when it is one of :data:`DOT_LIBRARY_OPTIONS`, else ``BadArgumentError``."""
    if value not in DOT_LIBRARY_OPTIONS:
        raise BadArgumentError(f"dot_library is {value!r}; expected one of "
                               f"{', '.join(map(repr, DOT_LIBRARY_OPTIONS))}",
                               where="dot_library")
    return value


def _plain_dot(module: HloModule, fusion_instr: HloInstruction
               ) -> tuple[HloComputation, HloInstruction] | None:
    """The fused computation and its dot when ``fusion_instr`` is a plain dot fusion."""
    called = fusion_instr.attr("calls", None)
    if fusion_instr.opcode != "fusion" or not isinstance(called, str) \
            or not module.has_computation(called):
        return None
    comp = module.computation(called)
    root = comp.root
    others = [i for i in comp.instructions if i.opcode != "parameter" and i is not root]
    if root.opcode != "dot" or others or len(root.operands) != 2 or root.has_attr("algorithm"):
        return None
    operands = [comp.instruction(o) for o in root.operands]
    shapes = [o.shape for o in operands] + [root.shape, fusion_instr.shape]
    if any(o.opcode != "parameter" for o in operands) \
            or not all(isinstance(s, ArrayShape) for s in shapes) \
            or len({s.dtype for s in shapes}) != 1 or shapes[0].dtype not in LIBRARY_DOT_TYPES \
            or any(is_physical_layout(s) for s in shapes):
        return None
    return comp, root


def plain_dot_sizes(module: HloModule, fusion_instr: HloInstruction) -> tuple[int, int, int] | None:
    """``(M, N, K)`` per batch of a plain dot fusion's dot; None when the fusion is not plain."""
    found = _plain_dot(module, fusion_instr)
    if found is None:
        return None
    comp, dot = found
    lhs, rhs = (comp.instruction(o).shape.dims for o in dot.operands)
    lb, rb = dot.attr("lhs_batch_dims", ()), dot.attr("rhs_batch_dims", ())
    lc, rc = dot.attr("lhs_contracting_dims", ()), dot.attr("rhs_contracting_dims", ())
    m = math.prod(n for d, n in enumerate(lhs) if d not in lb and d not in lc)
    n = math.prod(n for d, n in enumerate(rhs) if d not in rb and d not in rc)
    return m, n, math.prod(lhs[d] for d in lc)


def einsum_equation(module: HloModule, fusion_instr: HloInstruction) -> str:
    """The ``torch.einsum`` equation of a plain dot fusion, result dims in HLO order."""
    comp, dot = _plain_dot(module, fusion_instr)
    lhs, rhs = (comp.instruction(o).shape.rank for o in dot.operands)
    lb, rb = tuple(dot.attr("lhs_batch_dims", ())), tuple(dot.attr("rhs_batch_dims", ()))
    lc, rc = tuple(dot.attr("lhs_contracting_dims", ())), tuple(dot.attr("rhs_contracting_dims", ()))
    letters = iter(_LETTERS)
    left = [next(letters) for _ in range(lhs)]
    right = [""] * rhs
    for a, b in zip(lb + lc, rb + rc):
        right[b] = left[a]
    right = [r or next(letters) for r in right]
    out = [left[d] for d in lb] + [left[d] for d in range(lhs) if d not in lb + lc] \
        + [right[d] for d in range(rhs) if d not in rb + rc]
    return f"{''.join(left)},{''.join(right)}->{''.join(out)}"


def _matmul_plan(operands: list[str], out: str, shapes) -> tuple:
    """``LibraryDot.matmul`` for the einsum ``operands -> out`` (``einsum_equation``'s:
    ``out`` is batch, lhs free, rhs free letters) of operands of ``shapes``.

    >>> _matmul_plan(["ab", "cb"], "ac", [(16, 32), (24, 32)])
    (None, (1, 0), (16, 32), (32, 24), (16, 24))
    >>> _matmul_plan(["abc", "acd"], "abd", [(3, 16, 32), (3, 32, 8)])
    (None, None, (3, 16, 32), (3, 32, 8), (3, 16, 8))
    """
    lhs, rhs = operands
    size = {c: n for letters, dims in zip(operands, shapes) for c, n in zip(letters, dims)}
    batch = [c for c in out if c in lhs and c in rhs]
    free_l = [c for c in out if c in lhs and c not in rhs]
    free_r = [c for c in out if c in rhs and c not in lhs]
    contracted = [c for c in lhs if c in rhs and c not in out]
    lhs_perm = tuple(lhs.index(c) for c in batch + free_l + contracted)
    rhs_perm = tuple(rhs.index(c) for c in batch + contracted + free_r)
    b, m, k, n = (math.prod(size[c] for c in group)
                  for group in (batch, free_l, contracted, free_r))
    lead = (b,) if batch else ()
    return (None if lhs_perm == tuple(range(len(lhs))) else lhs_perm,
            None if rhs_perm == tuple(range(len(rhs))) else rhs_perm,
            (*lead, m, k), (*lead, k, n), tuple(size[c] for c in out))


def library_dot_reason(module: HloModule, fusion_instr: HloInstruction, option: str,
                       on_gpu: bool, explicit_tiling: bool = False) -> str | None:
    """Why ``fusion_instr`` runs as a library call under ``option`` (the rule of the module
    docstring), or None when it is a Triton kernel."""
    if option == "never":
        return None
    sizes = plain_dot_sizes(module, fusion_instr)
    if sizes is None:
        return None
    if option == "always":
        return "a plain dot (nothing fused), dot_library='always'"
    if not on_gpu or explicit_tiling or min(sizes) < MIN_LIBRARY_DIM \
            or fusion_instr.shape.dtype not in AUTO_LIBRARY_TYPES:
        return None
    return (f"a plain dot (nothing fused) with M, N, K = {', '.join(map(str, sizes))}, each at "
            f"least {MIN_LIBRARY_DIM} (tensor-core sized: cuBLAS's GEMM, as XLA:GPU's "
            "GemmRewriter chooses), on a GPU; dot_library='auto'")


@dataclass(frozen=True)
class LibraryDot(LibraryCall):
    """A plain dot fusion run on the host as one ``torch.einsum`` call (no kernel file):
    called like a ``CompiledFusion`` with the operand tensors, returns a 1-tuple.

    ``operands``: the fusion operand each einsum operand reads; ``physical_order``: the result
    dims major to minor (the einsum's output order), ``reason``: why the library runs it."""

    fusion_name: str
    equation: str
    operands: tuple[int, int]
    physical_order: tuple[int, ...]
    reason: str
    #: ``(lhs permutation, rhs permutation, lhs shape, rhs shape, result shape)`` when the dot
    #: runs as one ``torch.matmul`` of its operands viewed as ``[batch,] M x K`` and
    #: ``[batch,] K x N`` (a permutation None when it is the identity); None: ``torch.einsum``.
    matmul: tuple | None = None
    kind: TemplateKind = TemplateKind.DOT
    tile_sizes: tuple[int, ...] = ()
    grid: tuple[int, ...] = ()
    kernel_path: None = None
    tiling_reason: str = ""

    @classmethod
    def of(cls, module: HloModule, fusion_instr: HloInstruction, reason: str) -> LibraryDot:
        comp, dot = _plain_dot(module, fusion_instr)
        operands = tuple(comp.instruction(o).attr("parameter_number") for o in dot.operands)
        order = tuple(reversed(minor_to_major(fusion_instr.shape)))
        inputs, out = einsum_equation(module, fusion_instr).split("->")
        shapes = [comp.instruction(o).shape.dims for o in dot.operands]
        matmul = _matmul_plan(inputs.split(","), out, shapes) \
            if order == tuple(range(len(order))) else None
        return cls(fusion_instr.name, f"{inputs}->{''.join(out[d] for d in order)}", operands,
                   order, reason, matmul, tiling_reason=f"library call: {reason}")

    @property
    def torch_call(self) -> str:
        return (f"torch.matmul ('{self.equation}')" if self.matmul is not None
                else f"torch.einsum('{self.equation}')")

    def __call__(self, *tensors, **launch_options):
        import torch  # noqa: PLC0415 - lazy: `check --triton` imports the templates without torch

        x, y = (tensors[k] for k in self.operands)
        if self.matmul is not None:
            # torch.einsum parses its equation and plans on every call: 20 us on the host
            # for a 2-D product, against about 2 for torch.matmul of the same operands.
            lhs_perm, rhs_perm, lhs_shape, rhs_shape, shape = self.matmul
            x = x if lhs_perm is None else x.permute(lhs_perm)
            y = y if rhs_perm is None else y.permute(rhs_perm)
            return (torch.matmul(x.reshape(lhs_shape), y.reshape(rhs_shape)).reshape(shape),)
        result = torch.einsum(self.equation, x, y)
        return (result.permute(self._to_logical),)

    @cached_property
    def _to_logical(self) -> tuple[int, ...]:
        """The permutation of the einsum's result (physical order) to the logical dims,
        derived once rather than on every call."""
        return tuple(sorted(range(len(self.physical_order)), key=self.physical_order.__getitem__))


__all__ = ["AUTO_LIBRARY_TYPES", "DOT_LIBRARY_OPTIONS", "LIBRARY_DOT_TYPES", "LibraryDot", "MIN_LIBRARY_DIM",
           "check_dot_library", "einsum_equation", "library_dot_reason", "plain_dot_sizes"]
