"""A scan computed along the tile: one ``tl.associative_scan`` instead of a window per output.

``kernel_plan`` names the scan reduce-windows it computes along the tile
(``tiling.policy.tile_scans``); each is read at indices whose scanned dim is an output
tile's dim variable ``o``.  Lane ``o`` holds the operand's element ``o - shift`` (``shift`` 1
for a forward exclusive scan, whose output ``o`` folds the elements before ``o``; 0
otherwise) and the scan along the tile's axis, forward or reverse, folds each lane with those
before (after) it.  Lanes outside the operand (the exclusive scan's first or last, the padding
of a block past ``n_out``, in a reverse scan the next tile's) must not count: a sum gets the
additive identity (``-0.0``) there and scans with ``tl.cumsum`` (under the interpreter, a
float one in XLA's blocks of 16: ``_cumsum``); any other reducer scans values and validity
flags with the masked combiner, or with the plain one where every lane counts (a forward
scan's padding comes after every real lane).

Then what comes before the tile is folded in once, as a reduction folds its init
(``reduction_rules.fold_in``; 16-bit inputs fold in fp32 and results are rounded): the init
value where the tile spans the scanned dim whole (the plan gave the scan no axes), else the
scan's own output next to the tile (at ``start - 1``, reverse: ``start + tile``), one window
reduced on the plan's window axes as any reduce-window's: a row of ``n`` in tiles of ``T``
reads ``n / T`` windows, not ``n``.  Outside the row that window is all padding, the init
(which the plan made sure absorbs itself).
"""
from __future__ import annotations

from fusion.analysis.xla_reduction_order import SCAN_BASE, Scan, scan_of
from fusion.autodiff.combiner_kind import CombinerKind, combiner_kind
from fusion.errors import UnsupportedOpError
from fusion.ir.hlo_module import HloInstruction
from tiling.maps.affine_expr import AffineExpr, DimExpr
from triton_backend.lowering.emitter.value_emitter import (
    Value,
    ValueEmitter,
    element_type_of,
)
from triton_backend.lowering.rules.reduction_rules import combine_function, fold_in


def emit_tile_scan(em: ValueEmitter, instr: HloInstruction,
                   indices: tuple[AffineExpr, ...]) -> Value | None:
    """Emit the scan ``instr`` along the tile at ``indices``; None when they are not the
    tile's lanes (a carried scan's window next to the tile is reduced as any reduce-window)."""
    arity = len(instr.operands) // 2
    inputs, inits = instr.operands[:arity], instr.operands[arity:]
    scan = scan_of(instr, em.computation)
    lane = _tile_lane(em, scan, indices)
    whole = instr.name not in em.reduce_axes
    if lane is None or (whole and em.dims[lane.index].upper != em.dims[lane.index].block - 1):
        if whole:
            raise UnsupportedOpError(f"scan read at ({', '.join(map(str, indices))}), not along "
                                     "a tile that spans its dim whole", where=instr.name)
        return None
    var = em.dims[lane.index]
    shift = int(scan.exclusive and not scan.reverse)
    position = lane - shift if shift else lane
    operand_indices = tuple(position if k == scan.dim else e for k, e in enumerate(indices))
    shape = em.shape_of(indices)
    valid = [em.in_bounds((position,), (scan.length,))]
    if scan.reverse and not whole and var.tile != var.block:  # the next tile's lanes
        valid.append(f"({var.name} - {var.start} < {var.tile})")
    valid = " & ".join(f"({v})" for v in valid if v) or None
    values = [em.bind(f"tl.broadcast_to({_single(em.value(name, operand_indices), instr)}, "
                      f"{shape})", f"{instr.name}_in") for name in inputs]
    scanned = _scanned(em, instr, scan, values, valid, var.axis, shape)
    if whole:
        starts = [em.scalar_value(name) for name in inits]
    else:  # the scan's own output next to the tile: the fold of every element before it
        before = em.new_symbol(f"{var.start} + {var.tile}" if scan.reverse
                               else f"{var.start} - 1", f"{instr.name}_next_to")
        carried = em.value(instr.name, tuple(before if k == scan.dim else e
                                             for k, e in enumerate(indices)))
        starts = list(carried) if isinstance(carried, tuple) else [carried]
    return fold_in(em, instr, shape, scanned, starts,
                   combine_function(em, instr.attr("to_apply"), arity))


def _scanned(em: ValueEmitter, instr: HloInstruction, scan: Scan, values: list[str],
             valid: str | None, axis: int, shape: tuple[int, ...]) -> list[str]:
    """``values`` scanned along ``axis``, the lanes where ``valid`` is false left out; the
    scanned identifiers, then their validity flags."""
    arity = len(values)
    reverse = ", reverse=True" if scan.reverse else ""
    if _sums(em, instr, arity):
        identity = "-0.0" if element_type_of(instr).is_float else "0"
        summed = values[0] if valid is None else em.bind(
            f"tl.where({valid}, {values[0]}, {identity})", f"{instr.name}_in")
        scanned = [_cumsum(em, summed, shape, axis, scan.reverse, f"{instr.name}_scan",
                           blocked=em.tree_reductions and element_type_of(instr).is_float)]
    elif valid is None or not (scan.reverse or scan.exclusive):
        plain = combine_function(em, instr.attr("to_apply"), arity, masked=False)
        scanned = _scan(em, instr, values, axis, plain, reverse)
    else:
        flag = em.bind(f"tl.broadcast_to(({valid}).to(tl.int8), {shape})", f"{instr.name}_lane")
        masked = combine_function(em, instr.attr("to_apply"), arity)
        return _scan(em, instr, [*values, flag], axis, masked, reverse)
    return [*scanned, em.bind(f"tl.full({shape}, 1, tl.int8)", f"{instr.name}_valid")]


def _tile_lane(em: ValueEmitter, scan: Scan | None,
               indices: tuple[AffineExpr, ...]) -> DimExpr | None:
    """The output tile's dim variable indexing the scanned dim, walking its ``n_out``
    outputs, or None."""
    if scan is None:
        return None
    lane = indices[scan.dim]
    if not isinstance(lane, DimExpr):
        return None
    var = em.dims[lane.index]
    if var.extent != scan.length + scan.exclusive or var.tile is None:
        return None
    return lane


def _single(value: Value, instr: HloInstruction) -> str:
    if not isinstance(value, str):
        raise UnsupportedOpError("reduce-window of a tuple-shaped operand", where=instr.name)
    return value


def _sums(em: ValueEmitter, instr: HloInstruction, arity: int) -> bool:
    """Whether ``instr`` is one sum whose type ``tl.cumsum`` keeps (floats, 32/64-bit
    integers: it widens narrower ones)."""
    if arity != 1:
        return False
    t = element_type_of(instr)
    if not (t.is_float or (t.is_integer and t.bits >= 32)):
        return False
    return combiner_kind(em.module, instr.attr("to_apply"), integers=True) is CombinerKind.ADD


def _cumsum(em: ValueEmitter, x: str, shape: tuple[int, ...], axis: int, reverse: bool,
            hint: str, blocked: bool) -> str:
    """``tl.cumsum`` of ``x`` (of ``shape``) along ``axis``; ``blocked``: as XLA's tree of
    ``SCAN_BASE``-wide scans, each block's scan plus the scan of the block totals before it.

    A GPU's scan is a tree (each thread folds a few lanes, then warps and warps' totals
    combine in log steps); the interpreter's is ``np.cumsum``, one f32 add after another,
    whose rounding took a 4,096-long f32 cumsum 5 to 18 times further from the exact sums
    than the evaluator (XLA's tree) on 16 to 64 rows, past ``--check``'s 4 times.  Blocked,
    the interpreter adds at most 16 values in a row per level, as XLA's
    ``ReduceWindowRewriter`` does.
    """
    flag = ", reverse=True" if reverse else ""
    n = shape[axis]
    if not blocked or n <= SCAN_BASE:
        return em.bind(f"tl.cumsum({x}, {axis}{flag})", hint)
    blocks = n // SCAN_BASE
    split = shape[:axis] + (blocks, SCAN_BASE) + shape[axis + 1:]
    totals_shape = shape[:axis] + (blocks,) + shape[axis + 1:]
    tiles = em.bind(f"tl.reshape({x}, {split})", hint)
    within = em.bind(f"tl.cumsum({tiles}, {axis + 1}{flag})", hint)
    totals = em.bind(f"tl.reshape(tl.sum({tiles}, {axis + 1}), {totals_shape})", hint)
    through = _cumsum(em, totals, totals_shape, axis, reverse, hint, blocked)
    before = em.bind(f"tl.reshape({through} - {totals}, {split[:axis + 1] + (1,) + split[axis + 2:]})",
                     hint)
    return em.bind(f"tl.reshape({within} + {before}, {shape})", hint)


def _scan(em: ValueEmitter, instr: HloInstruction, tensors: list[str], axis: int,
          combine: str, reverse: str) -> list[str]:
    """``tl.associative_scan`` of ``tensors`` along ``axis``; the scanned identifiers."""
    scanned = [em.names.fresh(f"{instr.name}_scan") for _ in tensors]
    # One tensor goes in bare: a 1-tuple in gives a 1-tuple out.
    operand = tensors[0] if len(tensors) == 1 else f"({', '.join(tensors)},)"
    em.emit(f"{', '.join(scanned)} = tl.associative_scan({operand}, {axis}, {combine}{reverse})")
    return scanned


__all__ = ["emit_tile_scan"]
