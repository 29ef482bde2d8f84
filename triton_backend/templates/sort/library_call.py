"""Sorts longer than one tile as one library call: ``torch.sort`` (CUB's radix sort on a GPU).

XLA:GPU's ``CubSortRewriter`` sends a sort whose comparator is a plain order on its key to
CUB's radix sort; its own sort emitter is a bitonic network over the whole row, one kernel
launch per stage past a tile.  The ``tl.sort`` template sorts a row held in one tile
(``MAX_SORT_LENGTH``); a longer row (a vocabulary of 32,000 logits to sort for top-p
sampling) runs as :class:`LibrarySort`: the comparator's order (``comparator_order``: LT or
GT on the key, XLA's total order or JAX's canonical NaN order, keys rounded to bf16) made an
integer key whose ascending order is it, one stable ``torch.sort`` of that key along the
sorted dim, and every operand gathered at the sorted indices (an iota along the dim is the
indices themselves).  Stable, with ties in index order, as the template and the evaluator
sort.  No kernel file; called like a ``CompiledFusion`` with the fusion's operand tensors,
it returns a tuple of the sort's results.

>>> import fusion
>>> m = fusion.parse_hlo('''HloModule m
... gt {
...   a = f32[] parameter(0)
...   b = f32[] parameter(1)
...   c = s32[] parameter(2)
...   d = s32[] parameter(3)
...   ROOT r = pred[] compare(a, b), direction=GT
... }
... f {
...   p = f32[2,5000] parameter(0)
...   i = s32[2,5000] iota(), iota_dimension=1
...   ROOT s = (f32[2,5000], s32[2,5000]) sort(p, i), dimensions={1}, to_apply=gt
... }
... ENTRY e {
...   x = f32[2,5000] parameter(0)
...   ROOT r = (f32[2,5000], s32[2,5000]) fusion(x), kind=kLoop, calls=f
... }''')
>>> from triton_backend.templates.sort.driver import compile_sort_fusion
>>> sort = compile_sort_fusion(m, "r")
>>> sort.torch_call, sort.order.descending
('torch.sort (stable) of f32 keys along dim 1', True)
>>> import torch
>>> values, indices = sort(torch.tensor([[3.0, 1.0, 2.0] * 1666 + [0.0, 0.0]] * 2))
>>> values[0, :3].tolist(), indices[0, :3].tolist(), indices[0, -1].item()
([3.0, 3.0, 3.0], [0, 3, 6], 4999)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from fusion.errors import UnsupportedOpError
from fusion.ir.hlo_module import HloInstruction
from fusion.ir.shape import ArrayShape
from triton_backend.lowering.emitter.addressing import is_physical_layout
from triton_backend.runtime.kernel_loading import LibraryCall, TemplateKind
from triton_backend.templates.sort.kernel import SORT_KEY_TYPES, SortOperand, SortOrder


#: The key types ``torch.sort`` orders (``host.library_calls.total_order_key``): the packed
#: kernel's and the 64-bit ones.
LIBRARY_KEY_TYPES = SORT_KEY_TYPES | {"f64", "s64", "u64"}


@dataclass(frozen=True)
class LibraryOperand:
    """Sort operand ``i``: fusion operand ``parameter`` (its number), else an iota along
    ``iota_dimension``, of HLO element type ``dtype``."""

    parameter: int | None
    iota_dimension: int | None
    dtype: str


@dataclass(frozen=True)
class LibrarySort(LibraryCall):
    """A sort fusion run on the host as one stable ``torch.sort`` (module docstring)."""

    fusion_name: str
    dim: int
    order: SortOrder
    operands: tuple[LibraryOperand, ...]
    dims: tuple[int, ...]
    reason: str
    kind: TemplateKind = TemplateKind.SORT
    tile_sizes: tuple[int, ...] = ()
    grid: tuple[int, ...] = ()
    kernel_path: None = None
    tiling_reason: str = ""

    @classmethod
    def of(cls, fusion_instr: HloInstruction, sort: HloInstruction,
           operands: tuple[SortOperand, ...], outputs: tuple[ArrayShape, ...],
           order: SortOrder, reason: str) -> LibrarySort:
        """The library sort of ``sort`` (of fusion ``fusion_instr``), whose operands and
        results the template's driver found; ``UnsupportedOpError`` where the library
        cannot take it (a key type the template does not order, a tiled layout)."""
        key = operands[0]
        if key.parameter is None:
            raise UnsupportedOpError("the sort key (operand 0) must be a fusion parameter",
                                     where=sort.name)
        if key.shape.dtype not in LIBRARY_KEY_TYPES:
            raise UnsupportedOpError(f"sort keys of type {key.shape.dtype} are not supported "
                                     f"(keys of {', '.join(sorted(LIBRARY_KEY_TYPES))})",
                                     where=sort.name)
        if any(is_physical_layout(s) for s in (*[o.shape for o in operands], *outputs)):
            raise UnsupportedOpError(f"sort {sort.name} of a tiled layout is longer than one "
                                     "tile: the library sorts logical tensors", where=sort.name)
        (dim,) = sort.attr("dimensions")
        library = tuple(LibraryOperand(
            None if o.parameter is None else o.parameter.attr("parameter_number"),
            o.iota_dimension, out.dtype) for o, out in zip(operands, outputs))
        return cls(fusion_instr.name, dim, order, library, tuple(key.shape.dims), reason,
                   tiling_reason=f"library call: {reason}")

    def plan_decisions(self) -> dict[str, Any]:
        """The comparator's order, which a module plan records: finding it again takes the
        evaluator over probe keys (``compile_sort_fusion``'s ``order``)."""
        return {"descending": self.order.descending, "float_order": self.order.float_order,
                "key_rounding": self.order.key_rounding}

    @property
    def torch_call(self) -> str:
        key = self.operands[0]
        return f"torch.sort (stable) of {key.dtype} keys along dim {self.dim}"

    def __call__(self, *tensors: Any, **launch_options: Any) -> tuple:
        # Lazy: ``check --triton`` imports the templates without torch.
        import torch  # noqa: PLC0415
        from triton_backend.host.host_packing import torch_dtype_of  # noqa: PLC0415

        key = tensors[self.operands[0].parameter]
        indices = torch.sort(ordered_sort_key(key, self.order), dim=self.dim, stable=True).indices
        results = []
        for operand in self.operands:
            if operand.parameter is not None:
                results.append(_gather_bits(tensors[operand.parameter], self.dim, indices))
                continue
            dtype = torch_dtype_of(operand.dtype)
            if operand.iota_dimension == self.dim:
                results.append(indices.to(dtype))
                continue
            shape = [1] * len(self.dims)
            shape[operand.iota_dimension] = self.dims[operand.iota_dimension]
            iota = torch.arange(self.dims[operand.iota_dimension], device=indices.device)
            results.append(iota.reshape(shape).expand(self.dims).to(dtype).contiguous())
        return tuple(results)


def _gather_bits(x: Any, dim: int, indices: Any) -> Any:
    """``torch.gather`` of ``x``'s bits: torch's CPU gather of bf16 rewrites a NaN's bits
    (0x7FC0 came back 0xFFFF), and a sort moves its operands' bits unchanged."""
    import torch  # noqa: PLC0415

    if not x.is_floating_point() and x.dtype not in (torch.uint16, torch.uint32, torch.uint64):
        return torch.gather(x, dim, indices)
    # (and torch's CPU gather has no kernel for its wide unsigned types)
    carrier = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[x.element_size()]
    return torch.gather(x.view(carrier), dim, indices).view(x.dtype)


def ordered_sort_key(x: Any, order: SortOrder) -> Any:
    """Integers whose ascending order is ``order`` on the keys ``x`` (a torch tensor): the
    template's ``ordered_key_text`` in torch.

    >>> import torch
    >>> x = torch.tensor([1.0, float("nan"), -0.0, 0.0, -2.0])
    >>> torch.argsort(ordered_sort_key(x, SortOrder(False)), stable=True).tolist()
    [4, 2, 3, 0, 1]
    >>> torch.argsort(ordered_sort_key(x, SortOrder(True, "total")), stable=True).tolist()
    [1, 0, 3, 2, 4]
    """
    import torch  # noqa: PLC0415
    from triton_backend.host.library_calls import total_order_key  # noqa: PLC0415

    if order.key_rounding == "bf16":  # the f32 value of the rounding: the same order
        x = x.to(torch.bfloat16).to(x.dtype)
    if x.is_floating_point() and order.float_order == "canonical":
        # JAX's order: every NaN equal and last, -0 equal to +0.
        x = torch.where(torch.isnan(x), torch.full_like(x, float("nan")), x)
        x = torch.where(x == 0, torch.zeros_like(x), x)
    key = total_order_key(x)
    return torch.bitwise_not(key) if order.descending else key


__all__ = ["LIBRARY_KEY_TYPES", "LibraryOperand", "LibrarySort", "ordered_sort_key"]
