"""8-bit float reductions combined in XLA:CPU's order, rounding after every combine.

An fp8 sum accumulated in f32 and rounded once differs from XLA's in most results, and so does
a sum in any other order: with 3 or 2 mantissa bits every add rounds.  So an fp8 ``reduce`` or
``reduce-window`` is a loop nest that folds one element at a time into an accumulator started
at the init value, rounded to the fp8 type after each combine, in the order
``fusion.analysis.xla_reduction_order`` describes: sequential over the reduced elements
(row-major), and, when a reduced dim is longer than 32, windows of 32 per reduced dim (low
padding ``pad_low``, padding elements the init value) folded first, level by level (a long fp8 scan arrives
already split into windows of 16 by ``fusion.transforms.scan_tree``).  For
``f8e4m3fn[4,40] -> [4]``::

    r_acc = tl.broadcast_to(init, [4, 1])             # the final fold, over 2 windows
    for p0 in range(2):
        w_acc = tl.broadcast_to(init, [4, 1])         # window p0: 32 elements from p0*32 - 12
        for s0 in range(32):
            pos = p0 * 32 + s0 - 12
            v = tl.where((pos >= 0) & (pos < 40), <x at [i, pos]>, init)
            w_acc = round(combine(w_acc, v))
        r_acc = round(combine(r_acc, w_acc))

Each iteration reads one element per output lane: the same bytes as a tiled reduction, in
more steps; fp8 reductions are rare next to the exactness they need.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import ExitStack

from fusion.analysis.xla_reduction_order import WINDOW, folds_in_xla_order, window_levels
from fusion.ir.hlo_module import HloInstruction
from fusion.ir.shape import ArrayShape
from tiling.maps.affine_expr import AffineExpr
from triton_backend.lowering.emitter.triton_types import render_round
from triton_backend.lowering.emitter.value_emitter import ValueEmitter

ONE = "tl.full([], 1, tl.int8)"


def folds_in_order(instr: HloInstruction, arity: int) -> bool:
    """Whether ``instr`` (a reduce or reduce-window of ``arity`` inputs) folds in XLA's order:
    one 8-bit float output (a variadic reduce keeps its in-order halving steps)."""
    return arity == 1 and isinstance(instr.shape, ArrayShape) and \
        folds_in_xla_order(instr.shape.element_type)


def emit_ordered_fold(em: ValueEmitter, instr: HloInstruction, out_indices: tuple[AffineExpr, ...],
                      extents: Sequence[int], lanes: Callable, init_name: str, combine: str,
                      tree_windows: bool) -> str:
    """Fold ``lanes`` over ``extents`` in XLA:CPU's order; the rounded result's identifier.

    ``lanes(positions)`` gives the input value at scalar positions (one per reduced dim);
    ``tree_windows``: the reduce's long dims are windowed first (a reduce, not a
    reduce-window, whose windows are its own).
    """
    t = instr.shape.element_type
    shape = em.shape_of(out_indices)
    init = em.bind(f"tl.broadcast_to({em.scalar_value(init_name)}, {shape})", f"{instr.name}_init")
    levels, final = window_levels(tuple(extents)) if tree_windows else ((), tuple(extents))

    def fold(sizes: Sequence[int], element: Callable[[list[str]], str], hint: str) -> str:
        acc = em.bind(init, f"{instr.name}_{hint}")
        with ExitStack() as loops:
            positions = []
            for n in sizes:
                position = em.names.fresh(f"{instr.name}_{hint}_p")
                loops.enter_context(em.block(f"for {position} in range({n}):", hoist=True))
                positions.append(position)
            combined = em.names.fresh(f"{instr.name}_{hint}_c")
            em.emit(f"{combined}, _ = {combine}({acc}, {ONE}, {element(positions)}, {ONE})")
            em.emit(f"{acc} = {render_round(combined, t)}")
        return acc

    def element(level: int, positions: list[str]) -> str:
        """The value at ``positions`` of level ``level`` (0: the input itself)."""
        if level == 0:
            values, _ = lanes([em.new_symbol(p, "pos") for p in positions])
            return values[0]
        below = levels[level - 1]

        def window_element(offsets: list[str]) -> str:
            inner = [em.bind(f"{p} * {WINDOW} + {s} - {lo}", "pos")
                     for p, s, lo in zip(positions, offsets, below.pad_low)]
            inside = " & ".join(f"({q} >= 0) & ({q} < {n})" for q, n in zip(inner, below.sizes))
            return em.bind(f"tl.where({inside}, {element(level - 1, inner)}, {init})", "padded")

        return fold([WINDOW] * len(positions), window_element, f"w{level}")

    return fold(final, lambda positions: element(len(levels), positions), "acc")


__all__ = ["emit_ordered_fold", "folds_in_order"]
