"""The ``reduce-window`` rule: window dims become extra kernel axes, reduced like a reduce.

Output element ``o`` of dim ``k`` reads window position ``w`` (``0 <= w < size``) at
``x = o * stride + w * window_dilation - padding_low`` in the base-dilated, padded operand;
``x`` is a real operand element when ``0 <= x <= (n - 1) * base_dilation`` and
``x % base_dilation == 0`` (then at ``x // base_dilation``); elsewhere (padding, dilation
holes) the element is the init value, as XLA pads the operand with it.  Window dims of size
1 need no axis (``w = 0``).  Each window dim of size > 1 owns a kernel axis
(``kernel_plan``), persistent or looped exactly as a reduce (``reduction_rules``); the
cumulative-sum form (``size = n``, ``padding_low = n - 1``) is just a large window (an fp8
one longer than 16 arrives as ``fusion.transforms.scan_tree``'s tree of windows of 16, the
order XLA:CPU rounds in), unless ``kernel_plan`` names it a scan along the tile
(``tile_scan``): then the tile's lanes are one scan, and its window axes (none when the tile
spans the scanned dim whole) reduce only the window next to the tile.
"""
from __future__ import annotations

from fusion.errors import UnsupportedOpError
from fusion.ir.hlo_module import HloInstruction
from tiling.maps.affine_expr import AffineExpr, DimExpr, const
from triton_backend.lowering.rules.reduction_rules import emit_reduction
from triton_backend.lowering.rules.tile_scan import emit_tile_scan
from triton_backend.lowering.emitter.value_emitter import Value, ValueEmitter, array_shape


def lower_reduce_window(em: ValueEmitter, instr: HloInstruction,
                       indices: tuple[AffineExpr, ...]) -> Value:
    """Emit ``instr`` (a possibly variadic reduce-window) at its output ``indices``."""
    if instr.name in em.tile_scans:  # a scan along the tile (kernel_plan)
        scanned = emit_tile_scan(em, instr, indices)
        if scanned is not None:
            return scanned
    arity = len(instr.operands) // 2
    inputs, inits = instr.operands[:arity], instr.operands[arity:]
    in_shape = array_shape(em.instruction(inputs[0]))
    window = instr.attr("window").dims
    if len(window) != in_shape.rank:
        raise UnsupportedOpError(f"window of rank {len(window)} for an operand of rank "
                                 f"{in_shape.rank}", where=instr.name)
    if any(d.window_reversal for d in window):
        raise UnsupportedOpError("reduce-window with window reversal is not supported",
                                 where=instr.name)
    windowed = [k for k, d in enumerate(window) if d.size > 1]

    def lanes(fresh: list[DimExpr]) -> tuple[list[str], str | None]:
        by_dim = dict(zip(windowed, fresh))
        operand_indices, conditions = [], []
        for k, (o, d, n) in enumerate(zip(indices, window, in_shape.dims)):
            x = o * d.stride + by_dim.get(k, const(0)) * d.window_dilation - d.padding_low
            low, high = em.bounds(x)
            text = em.index_text(x)
            if low < 0:
                conditions.append(f"({text} >= 0)")
            if high > (n - 1) * d.base_dilation:
                conditions.append(f"({text} <= {(n - 1) * d.base_dilation})")
            if d.base_dilation > 1:
                conditions.append(f"(({text}) % {d.base_dilation} == 0)")
                x = x // d.base_dilation
            operand_indices.append(x)
        inside = " & ".join(conditions)
        values = []
        for name, init in zip(inputs, inits):
            value = em.value(name, tuple(operand_indices))
            if not isinstance(value, str):
                raise UnsupportedOpError("reduce-window of a tuple-shaped operand", where=instr.name)
            values.append(f"tl.where({inside}, {value}, {em.scalar_value(init)})" if inside else value)
        return values, None

    types = [array_shape(em.instruction(n)).element_type for n in inputs]
    return emit_reduction(em, instr, indices, [window[k].size for k in windowed], lanes, types, inits)


__all__ = ["lower_reduce_window"]
