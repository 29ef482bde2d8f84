"""Scans computed along the output tile: cumulative sums in one pass, not a window per output.

A reduce-window that is a scan (``fusion.analysis.xla_reduction_order.scan_window``: a
cumulative sum, product, maximum, ..., forward or reverse, inclusive or exclusive) reduces a
window as long as its dim for each of its outputs: as a reduce-window, ``n`` elements read
and combined per output, ``n^2`` per row (a ``[64, 4096]`` cumsum reads 1G elements for 262K
outputs).  When the tile runs along the scanned dim, lane ``o`` of the tile may instead hold
the operand's element ``o`` and one scan along the tile's axis (``tl.associative_scan``, as
Inductor lowers ``cumsum``) gives every output in ``n log n`` combines at most, the operand
read once when the tile spans the dim whole.  A tile spanning part of it (a row longer than
one tile holds, ``MAX_PERSISTENT_REDUCTION``, or explicit tile sizes) also needs the fold
of the elements before it (after it, in a reverse scan): the scan's own output next to the
tile, one window reduced per program (``kernel_plan`` decides which form).

Padding positions of a window count as its init value, so a scan folds its init once per
padding position it covers (``n - 1 - o`` of them at output ``o`` of a forward one) and once
more; along the tile it is folded in once.  The two agree when the init folded with itself
is itself (0 for a sum, any value for a maximum: ``fusion.transforms.scan_inits``).  It also
needs the scan to be read, wherever the fusion reads it, with its scanned dim indexed by
one output dim ``j`` of the fusion alone (``d_j`` exactly: not shifted, reversed or sliced,
so the tile's lanes are the scan's elements), ``d_j`` walking the scanned dim whole.  8-bit
float scans are left out: their sums round after every add, so they fold in XLA:CPU's order
(``fusion.transforms.scan_tree``).

>>> from fusion.text.parser import parse_hlo
>>> from tiling.symbolic.tiled_fusion import analyze_computation_tiling
>>> m = parse_hlo('''HloModule m
... add {
...   a = f32[] parameter(0)
...   b = f32[] parameter(1)
...   ROOT s = f32[] add(a, b)
... }
... ENTRY e {
...   x = f32[8,300] parameter(0)
...   z = f32[] constant(0)
...   c = f32[8,300] reduce-window(x, z), window={size=1x300 pad=0_0x299_0}, to_apply=add
...   ROOT t = f32[300,8] transpose(c), dimensions={1,0}
... }''')
>>> tile_scans(analyze_computation_tiling(m.entry, "e"), m)
{'c': 0}
"""
from __future__ import annotations

from fusion.analysis.xla_reduction_order import folds_in_xla_order, scan_of
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.ir.shape import ArrayShape, flatten_shape
from fusion.transforms.scan_inits import init_absorbs_itself
from tiling.maps.affine_expr import DimExpr
from tiling.maps.expr_variables import used_variables
from tiling.maps.interval import Interval
from tiling.symbolic.tiled_fusion import SymbolicNode, SymbolicTiledFusion


def tile_scans(analysis: SymbolicTiledFusion, module: HloModule) -> dict[str, int]:
    """Each scan the tile may compute along its own axis -> the output dim it runs along
    (``module`` holds the fused computation's reducers)."""
    return {name: j for name, j in scans_read_along_tile(analysis).items()
            if init_absorbs_itself(analysis.computation.instruction(name),
                                   analysis.computation, module)}


def scans_read_along_tile(analysis: SymbolicTiledFusion) -> dict[str, int]:
    """Each scan of ``analysis`` read, wherever the fusion reads it, with its scanned dim
    indexed by one output dim ``d_j`` walking it whole -> ``j``; whether its init absorbs
    itself is not asked (see ``scan_along_tile_candidate``)."""
    nodes: dict[str, list[SymbolicNode]] = {}
    for node in analysis.nodes:
        if not node.indexing.is_known_empty:
            nodes.setdefault(node.name, []).append(node)
    found = {}
    for name, uses in nodes.items():
        dim = _scan_dim(uses[0].instruction, analysis.computation)
        if dim is None:
            continue
        along = {_output_dim(node, dim, analysis.output_dims) for node in uses}
        if len(along) == 1 and None not in along:
            found[name] = along.pop()
    return found


def scan_along_tile_candidate(instr: HloInstruction, computation: HloComputation,
                              module: HloModule) -> bool:
    """Whether ``instr`` (of ``computation``) is a scan that a tile runs along wherever a
    fusion reads it along its scanned dim: an array-shaped scan, not of 8-bit floats, whose
    init absorbs itself.  What the fusion pass may fuse with elementwise work.

    >>> from fusion.text.parser import parse_hlo
    >>> m = parse_hlo('''HloModule m
    ... add {
    ...   a = f32[] parameter(0)
    ...   b = f32[] parameter(1)
    ...   ROOT s = f32[] add(a, b)
    ... }
    ... ENTRY e {
    ...   x = f32[8,300] parameter(0)
    ...   z = f32[] constant(0)
    ...   c = f32[8,300] reduce-window(x, z), window={size=1x300 pad=0_0x299_0}, to_apply=add
    ...   ROOT w = f32[8,150] reduce-window(c, z), window={size=1x2 stride=1x2}, to_apply=add
    ... }''')
    >>> [scan_along_tile_candidate(m.entry.instruction(n), m.entry, m) for n in ("c", "w")]
    [True, False]
    """
    return (isinstance(instr.shape, ArrayShape) and _scan_dim(instr, computation) is not None
            and init_absorbs_itself(instr, computation, module))


def _scan_dim(instr: HloInstruction, computation: HloComputation) -> int | None:
    """The dim ``instr`` scans when it is a scan a tile may run along, else None."""
    scan = scan_of(instr, computation)
    if scan is None or any(folds_in_xla_order(s.element_type) for s in flatten_shape(instr.shape)):
        return None
    return scan.dim


def _output_dim(node: SymbolicNode, dim: int, output_dims: tuple[int, ...]) -> int | None:
    """The output dim ``j`` whose ``d_j`` alone indexes ``dim`` of ``node``'s instruction,
    walking it whole; None when there is none."""
    results = node.indexing.affine_map.results
    index = results[dim]
    if not isinstance(index, DimExpr):
        return None
    j = index.index
    extent = flatten_shape(node.instruction.shape)[0].dims[dim]
    if output_dims[j] != extent or node.indexing.dim_bounds[j] != Interval(0, extent - 1):
        return None
    if any(j in used_variables(e)[0] for k, e in enumerate(results) if k != dim):
        return None
    return j


__all__ = ["scan_along_tile_candidate", "scans_read_along_tile", "tile_scans"]
