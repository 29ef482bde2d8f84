"""Which output tilings our Triton backend can emit, and why the others are rejected.

Rules, checked in this order (the first failing one is the reason):

1. every tile size is in ``[1, dim]``;
2. every instruction's tile is exact (``tiling.symbolic.symbolic_tile`` constraints hold);
3. a concatenate's tile along its concatenated dim divides every operand's size there, so
   each block reads exactly one operand;
4. a reduced dim is whole (persistent) when its padded extent fits
   ``MAX_PERSISTENT_REDUCTION``, else looped in power-of-two chunks (checked before the
   tile size, so that a row too wide for any tile, e.g. 2^21 elements, reads "loop over
   chunks" and the candidates try chunking it rather than giving up);
5. every tile, padded to powers of two (``tl.arange`` needs them: 100 is padded to 128 and
   masked), has at most 1,048,576 elements (Triton's max numel);
6. the block holds at least 16 elements unless the whole output is smaller: its root tile,
   or, for a persistent reduction, its largest tile (the reduction's input tile: rows times
   the whole reduced extent, so a 256-wide row reduction may take one row per block).  A
   performance preference (tiny blocks waste a program's fixed cost and cannot vectorize),
   not a correctness rule.  A looped (chunked) reduction, a row past 2^14 elements, keeps
   the root count for now: its rows are long serial loops either way, and the resource
   tests pin its two-row tiling (``test_costing_a_2_33_wide_reduction_materializes_nothing``);
7. the grid (blocks flattened onto CUDA's x axis) has at most 2^31 - 1 blocks.

>>> from fusion.text.parser import parse_hlo
>>> from tiling.symbolic.tiled_fusion import analyze_fusion_tiling
>>> m = parse_hlo('''HloModule m
... f {
...   p0 = f32[4,256] parameter(0)
...   ROOT e = f32[4,256] exponential(p0)
... }
... ENTRY main {
...   x = f32[4,256] parameter(0)
...   ROOT r = f32[4,256] fusion(x), kind=kLoop, calls=f
... }''')
>>> a = analyze_fusion_tiling(m, m.entry.root)
>>> check_tiling(a, (1, 128)) is None
True
>>> why = check_tiling(a, (1, 4))
>>> why.kind, str(why)
(<IllegalKind.SMALL_ROOT_TILE: 'small root tile'>, 'root tile (1, 4) has 4 elements, fewer than 16')
"""
from __future__ import annotations

from math import prod
from typing import Sequence

from tiling.policy.limits import (
    MAX_GRID_X,
    MAX_PERSISTENT_REDUCTION,
    MAX_REDUCTION_CHUNK,
    MAX_TILE_NUMEL,
    MIN_ROOT_TILE_ELEMENTS,
)
from tiling.policy.verdict import Illegal, IllegalKind
from tiling.symbolic.symbolic_tile import SymbolicTile
from tiling.symbolic.tiled_fusion import SymbolicTiledFusion, next_power_of_two


def node_sizes(tile: SymbolicTile, tile_sizes: Sequence[int],
               reduction_chunk: int | None = None) -> tuple[int, ...]:
    """The tile's sizes at concrete tile sizes (cheap: no maps are built)."""
    chunks = None
    if reduction_chunk is not None:
        chunks = tuple(min(reduction_chunk, n) for n in tile.full_range_sizes())
    p = tile.params(tile_sizes, chunks)
    return tuple(s.evaluate(p) for s in tile.sizes)


def reduced_extent(analysis: SymbolicTiledFusion) -> int:
    """The largest padded extent of the reduced dims any tile covers whole (0: none)."""
    return analysis.padded_reduced_extent


def _persistent_block_elements(analysis: SymbolicTiledFusion, tile_sizes: Sequence[int],
                               reduction_chunk: int | None) -> int:
    """Elements of the largest tile of a persistent reduction's block (0: not one)."""
    if reduction_chunk is not None or not reduced_extent(analysis):
        return 0
    return max(prod(node_sizes(n.tile, tile_sizes)) for n in analysis.distinct_tiles
               if isinstance(n.tile, SymbolicTile))


def check_tiling(analysis: SymbolicTiledFusion, tile_sizes: Sequence[int],
                 reduction_chunk: int | None = None) -> Illegal | None:
    """``None`` if the tiling is legal, else why not (the rule broken and one sentence)."""
    # Remembered: ranking asks once for the chunk and once more to cost the tiling.
    key = ("legality.check_tiling", tuple(tile_sizes), reduction_chunk)
    if key not in analysis.memo:
        analysis.memo[key] = _check_tiling(analysis, tuple(tile_sizes), reduction_chunk)
    return analysis.memo[key]


def _check_tiling(analysis: SymbolicTiledFusion, tile_sizes: tuple[int, ...],
                  reduction_chunk: int | None) -> Illegal | None:
    dims = analysis.output_dims
    if len(tile_sizes) != len(dims):
        return Illegal(IllegalKind.RANK,
                       f"{len(tile_sizes)} tile sizes for an output of rank {len(dims)}")
    for i, (t, n) in enumerate(zip(tile_sizes, dims)):
        if not 1 <= t <= max(n, 1):
            return Illegal(IllegalKind.OUT_OF_RANGE,
                           f"tile size {t} of dim {i} is outside [1, {n}]")
    problem = analysis.first_problem(tile_sizes, reduction_chunk)
    if problem is not None:
        return Illegal(IllegalKind.INEXACT, "inexact tile: " + problem)
    for node in analysis.concatenates:
        if node.indexing.is_known_empty:
            # Never read (it feeds an empty operand of a concatenate or pad): its tile is
            # empty, there is nothing to split among its operands.
            continue
        instr = node.instruction
        axis = instr.attr("dimensions")[0]
        size = node_sizes(node.tile, tile_sizes, reduction_chunk)[axis]
        comp = analysis.computation
        parts = [comp.instruction(o).shape.dims[axis] for o in instr.operands]
        if any(p % size for p in parts):
            return Illegal(IllegalKind.CONCATENATE,
                           f"concatenate {instr.name!r}: its tile of {size} along dim {axis} does"
                           f" not divide the operands' sizes {parts} evenly")
    extent = reduced_extent(analysis)
    if reduction_chunk is None and extent > MAX_PERSISTENT_REDUCTION:
        return Illegal(IllegalKind.PERSISTENT_LIMIT,
                       f"reduced dims of padded extent {extent} exceed the persistent limit"
                       f" {MAX_PERSISTENT_REDUCTION}: loop over chunks")
    if reduction_chunk is not None:
        if extent == 0:
            return Illegal(IllegalKind.CHUNK_WITHOUT_REDUCTION,
                           "a reduction chunk was given but the fusion reduces nothing")
        if reduction_chunk != next_power_of_two(reduction_chunk):
            return Illegal(IllegalKind.CHUNK_NOT_POWER_OF_TWO,
                           f"reduction chunk {reduction_chunk} is not a power of two")
    for node in analysis.distinct_tiles:
        sizes = node_sizes(node.tile, tile_sizes, reduction_chunk)
        padded = prod(next_power_of_two(s) for s in sizes)
        if padded > MAX_TILE_NUMEL:
            return Illegal(IllegalKind.TILE_TOO_LARGE,
                           f"{node.name}: tile {sizes} padded to powers of two has {padded}"
                           f" elements, more than Triton's {MAX_TILE_NUMEL}")
    root_numel = prod(tile_sizes)
    if root_numel < min(MIN_ROOT_TILE_ELEMENTS, prod(dims)):
        held = _persistent_block_elements(analysis, tile_sizes, reduction_chunk)
        if held < MIN_ROOT_TILE_ELEMENTS:
            return Illegal(IllegalKind.SMALL_ROOT_TILE,
                           f"root tile {tile_sizes} has {root_numel} elements, fewer than"
                           f" {MIN_ROOT_TILE_ELEMENTS}"
                           + (f" (its reduction's input tile: {held})" if held else ""))
    blocks = prod(-(-n // t) for n, t in zip(dims, tile_sizes))
    if blocks > MAX_GRID_X:
        return Illegal(IllegalKind.GRID_TOO_LARGE,
                       f"{blocks} blocks exceed CUDA's grid x limit {MAX_GRID_X}")
    return None


def legal_reduction_chunk(analysis: SymbolicTiledFusion, tile_sizes: Sequence[int],
                          ) -> tuple[int | None, Illegal | None]:
    """``(chunk, None)`` for the tiling as it can run, else ``(None, why not)``.

    The reduced dims stay whole (chunk ``None``) unless that breaks the persistent limit; then
    they are looped in the largest power-of-two chunk, at most ``MAX_REDUCTION_CHUNK`` and half
    the reduced extent, that is legal.
    """
    reason = check_tiling(analysis, tile_sizes)
    if reason is None or reason.kind is not IllegalKind.PERSISTENT_LIMIT:
        return None, reason
    chunk = min(MAX_REDUCTION_CHUNK, reduced_extent(analysis) // 2)
    reason = Illegal(IllegalKind.NO_LEGAL_CHUNK, "no legal reduction chunk")
    while chunk >= 1:
        reason = check_tiling(analysis, tile_sizes, chunk)
        if reason is None:
            return chunk, None
        chunk //= 2
    return None, reason
