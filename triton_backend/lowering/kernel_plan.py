"""The iteration space of one kernel: output tile sizes, reduction axes, grid, index width.

Each program computes one tile of the (common) iteration shape.  A tile size may be any
size in ``[1, dim]`` (the tiling analysis proposes whole dims such as 100) or a power of two
(``tiling.policy.choice.default_tile_sizes``, the tiling choice without a tile analysis);
its kernel axis holds the next power of two (``tl.arange`` needs
one) and lanes past the tile are masked.  Every reduce and reduce-window reachable from the
root gets one extra kernel axis per reduced (window) dim: the whole dim padded to a power of
two (a *persistent* reduction), or, when the padded extent exceeds
``MAX_PERSISTENT_REDUCTION`` or a ``reduction_chunk`` is given, a chunk of it that the
kernel loops over with an accumulator (a *looped* reduction).  The limits are the tiling
policy's (``tiling.policy.limits``).

Launch options (``launch_options``): ``num_warps`` gives every thread at least one 128-bit
vector of the narrowest buffer element when the tile is large enough, like Inductor's
``num_warps = numel // 256`` for f32 but counted in bytes (a bf16 tile needs 8 elements per
thread for ``ld.global.v4``, an f32 one 4):
``num_warps = clamp(pow2_floor(tile_elements * element_bytes / (16 * 32)), 1, 8)``.
``num_stages`` is 1 unless a reduction is looped (nothing else is software-pipelined; a
single stage allocates no staging buffers), 2 for a looped one (double buffering).

>>> launch_options(tile_elements=128, element_bytes=4)
(1, 1)
>>> launch_options(tile_elements=1024, element_bytes=2), launch_options(1 << 16, 4, looped=True)
((4, 1), (8, 2))
"""
from __future__ import annotations

import math
from functools import lru_cache
from dataclasses import dataclass

from fusion.errors import FusionCompilerError, UnsupportedOpError
from fusion.ir.hlo_module import HloComputation, HloModule
from fusion.ir.instruction_order import operands_first
from fusion.analysis.reduction_kind import kept_and_reduced
from fusion.ir.shape import ArrayShape
from fusion.opcodes import traits
from tiling.policy.choice import choose_tiling
from tiling.policy.legality import reduced_extent
from tiling.policy.tile_scans import tile_scans
from tiling.policy.limits import (
    CARRIED_SCAN_TILE,
    DEFAULT_REDUCTION_CHUNK,
    MAX_PERSISTENT_REDUCTION,
    MIN_SPLIT_ELEMENTS,
    SCAN_ROW_ELEMENTS,
    SPLIT_REDUCTION_PROGRAMS,
    TARGET_TILE_ELEMENTS,
)
from triton_backend.lowering.rules.ordered_reduction import folds_in_order
from triton_backend.lowering.rules.reduction_rules import reduced_extents
from triton_backend.lowering.rules.split_reduction import splittable
from tiling.symbolic.tiled_fusion import (
    SymbolicTiledFusion,
    analyze_computation_tiling,
    next_power_of_two,
)

#: Block size the default tiling aims for under the Triton interpreter: it pays milliseconds per
#: program and per op (NumPy does the lanes), so the GPU's 1024-element blocks would make the
#: seed's 12.6M-element GELU take minutes; at 2^16 the f32[4096,8192] cross-entropy's row
#: reductions still ran 512 programs (about 40 s), at 2^18 128 programs (about 6 s).
INTERPRETER_TILE_ELEMENTS = 1 << 18
#: Buffers with more elements than this need 64-bit offsets.
MAX_INT32_ELEMENTS = 2**31 - 1
#: Bytes one thread should move per access (``ld.global.v4.b32``) and threads per warp.
VECTOR_BYTES = 16
WARP_SIZE = 32
MAX_NUM_WARPS = 8


def launch_options(tile_elements: int, element_bytes: int, *, looped: bool = False) -> tuple[int, int]:
    """``(num_warps, num_stages)`` for a program over ``tile_elements`` (padded) elements whose
    narrowest buffer element has ``element_bytes`` bytes (rule in the module docstring)."""
    warps = max(1, tile_elements * max(1, element_bytes) // (VECTOR_BYTES * WARP_SIZE))
    warps = min(MAX_NUM_WARPS, 1 << (warps.bit_length() - 1))
    return warps, 2 if looped else 1


def index_bits_for(element_counts) -> int:
    """32 unless some buffer has more than 2^31 - 1 elements (then offsets need 64 bits).

    >>> index_bits_for([10, 2**31 - 1]), index_bits_for([2**31])
    (32, 64)
    """
    return 64 if any(n > MAX_INT32_ELEMENTS for n in element_counts) else 32


@dataclass(frozen=True)
class SplitReduction:
    """The outermost reduced dim of ``reduce`` walked by ``parts`` programs per output tile,
    ``span`` elements each (a whole number of the axis' blocks): a reduction whose output
    tiles are too few to fill the GPU (a sum to a scalar, a loss's mean over rows) is spread
    over the SMs as XLA's tree-reduction rewriter does, but in one kernel.  Each program
    reduces its span; the tile's last program to finish combines the parts in part order
    (``rules.split_reduction``), so the result is the same on every run."""

    reduce: str
    parts: int
    span: int


@dataclass(frozen=True)
class KernelPlan:
    """Static shape of a kernel: axes ``[output dims..., reduction axes...]`` and the grid.

    ``reduce_axes`` maps each reduce/reduce-window to its axes (one per reduced or window
    dim, in the op's dim order); ``reduce_extents`` gives the sizes those axes walk.  With a
    ``reduction_chunk`` every reduction is looped in chunks of (at most) that many elements
    per axis.  ``tile_scans``: the scans (``tiling.policy.tile_scans``) computed along the
    output dim they name: with no reduction axes where the tile spans that dim whole, else
    *carried*: their window axes reduce the one window next to the tile.
    """

    output_dims: tuple[int, ...]
    tile_sizes: tuple[int, ...]
    axis_blocks: tuple[int, ...]
    reduce_axes: tuple[tuple[str, tuple[int, ...]], ...]
    tiles_per_dim: tuple[int, ...]
    reduction_chunk: int | None = None
    index_bits: int = 32
    split: SplitReduction | None = None
    tile_scans: tuple[tuple[str, int], ...] = ()

    @property
    def scan_forms(self) -> tuple[tuple[str, int, str], ...]:
        """``(scan, output dim, "whole" or "carried")`` for each of ``tile_scans``."""
        carried = dict(self.reduce_axes)
        return tuple((name, j, "carried" if name in carried else "whole")
                     for name, j in self.tile_scans)

    @property
    def tiles(self) -> int:
        """Output tiles (each one program, or ``split.parts`` programs)."""
        return math.prod(self.tiles_per_dim)

    @property
    def grid(self) -> tuple[int]:
        return (self.tiles * (self.split.parts if self.split else 1),)


def program_elements(computation: HloComputation, plan: KernelPlan) -> int:
    """Elements of the largest tensor one program holds: the output tile, or a reduce's input
    tile (its kept output axes times its reduction axes; a multi-output reduction's reduce
    keeps only some axes of the iteration space)."""
    out_blocks = plan.axis_blocks[:len(plan.output_dims)]
    largest = math.prod(out_blocks)
    scans = dict(plan.tile_scans)
    for name, axes in plan.reduce_axes:
        instr = computation.instruction(name)
        kept = math.prod(out_blocks)
        if name in scans:  # a carried scan's window is reduced once, next to the tile
            kept //= out_blocks[scans[name]]
        if instr.opcode == "reduce":
            operand = computation.instruction(instr.operands[0]).shape
            if isinstance(operand, ArrayShape) and operand.dims == plan.output_dims \
                    and len(instr.shape.dims if isinstance(instr.shape, ArrayShape) else ()) \
                    < len(plan.output_dims):
                kept_dims, _ = kept_and_reduced(len(out_blocks), instr.attr("dimensions"))
                kept = math.prod(out_blocks[k] for k in kept_dims)
        largest = max(largest, kept * math.prod(plan.axis_blocks[a] for a in axes))
    return largest


def reachable_instructions(computation: HloComputation) -> list[str]:
    """Names reachable from the root, in post order (operands first)."""
    return list(operands_first(computation, (computation.root_name,)))


@lru_cache(maxsize=64)
def _tile_analysis(computation: HloComputation) -> SymbolicTiledFusion | None:
    # Cached: a kernel file plans twice when it realigns its tiles, and a fusion compiled
    # again (a tuning sweep, another target) plans the same computation.
    try:
        return analyze_computation_tiling(computation, computation.name)
    except FusionCompilerError:
        return None  # an op without an indexing rule: plan structurally


def persistent_extent(analysis: SymbolicTiledFusion | None, extents: list[tuple[int, ...]]) -> int:
    """The most reduced elements one program holds at once if no reduction is looped: the
    tile analysis' ``reduced_extent`` (a reduction nested in another's operand at the outer
    reduction's index multiplies; sibling reductions over the same rows, softmax's max and
    sum, do not).  Without an analysis every reduction counts as nested."""
    if analysis is None:
        return math.prod(next_power_of_two(e) for ext in extents for e in ext)
    return reduced_extent(analysis)


def nested_reductions(analysis: SymbolicTiledFusion | None, reducers: list[str]) -> set[str]:
    """The reductions whose value is read at another reduction's reduced index (their tensors
    span both reductions' axes).  The others are computed once per output element and may
    share their reduction axes (softmax's max and sum both walk the row on one axis)."""
    if analysis is None:
        return set(reducers)
    return {n.name for n in analysis.nodes
            if n.name in reducers and n.indexing.num_range_vars}


def plan_kernel(computation: HloComputation, output_dims: tuple[int, ...],
                tile_sizes: tuple[int, ...] | None = None, *,
                reduction_chunk: int | None = None, index_bits: int = 32,
                target_elements: int = TARGET_TILE_ELEMENTS,
                split_parts: int | None = None, module: HloModule | None = None) -> KernelPlan:
    """The plan for tiles of ``output_dims`` (a rank-0 output is iterated as ``(1,)``).

    ``module`` (holding the reducers) lets scans run along the tile (``_scans_along_tile``);
    without it every reduce-window reduces its windows.

    Without ``reduction_chunk``, reductions whose padded extent exceeds
    ``MAX_PERSISTENT_REDUCTION`` are looped in chunks of ``DEFAULT_REDUCTION_CHUNK``.  Without
    ``tile_sizes``, a program holds about ``target_elements`` elements (a GPU's block, or
    ``INTERPRETER_TILE_ELEMENTS`` for the interpreter).  A looped reduction whose output
    tiles cannot fill the GPU is split among programs (``_split``; ``split_parts`` 1: never,
    n: into n parts).  A program holds at most ``MAX_PERSISTENT_REDUCTION`` elements of any
    tensor where it can: a persistent reduction whose output tile makes it larger is looped
    (a bias gradient's column sums over 8192 rows kept 64 x 8192 elements per program and
    spilled 47 KB), and a looped one's outer chunk shrinks.

    The interpreter's blocks (``target_elements`` past a persistent reduction) keep the chunk
    per reduced dim and are not split: the interpreter pays milliseconds per program and per
    loop trip, not per element, so a sum of 1000 x 1000 is one program of one trip there.
    """
    gpu_blocks = target_elements <= MAX_PERSISTENT_REDUCTION
    # Decided once: the scans depend on the computation alone, not on the chunks tried below.
    scans = _scans_along_tile(computation, module, output_dims or (1,))
    plan = _plan(computation, output_dims, tile_sizes, reduction_chunk, index_bits,
                 target_elements, split_parts, None, gpu_blocks, scans)
    if not gpu_blocks or not plan.reduce_axes or program_elements(computation, plan) <= _limit(plan):
        return plan
    chunk = plan.reduction_chunk or DEFAULT_REDUCTION_CHUNK
    cap = chunk
    while True:
        plan = _plan(computation, output_dims, tile_sizes, chunk, index_bits, target_elements,
                     split_parts, cap, True, scans)
        if cap == 1 or program_elements(computation, plan) <= _limit(plan):
            return plan
        cap //= 2


def _limit(plan: KernelPlan) -> int:
    """The most elements a program's reductions may hold at once: a persistent reduction's,
    or the output tile's where that is larger (a softmax over rows of 32,000 in one tile:
    its loops keep chunks of 4,096, where shrinking them could not make the program
    smaller and walked the row one element at a time)."""
    return max(MAX_PERSISTENT_REDUCTION, math.prod(plan.axis_blocks[:len(plan.output_dims)]))


def _plan(computation: HloComputation, output_dims: tuple[int, ...],
          tile_sizes: tuple[int, ...] | None, reduction_chunk: int | None, index_bits: int,
          target_elements: int, split_parts: int | None, outer_cap: int | None,
          budgets: bool, scans: dict[str, int]) -> KernelPlan:
    """``plan_kernel``'s plan with the outer reductions' chunks at most ``outer_cap``
    elements (None: the chunk); without ``budgets``, a looped reduction's every dim gets the
    chunk and nothing is split (the interpreter's blocks).  ``scans``: the scans along the
    tile (``_scans_along_tile``)."""
    space = output_dims or (1,)
    reducers = [n for n in reachable_instructions(computation)
                if traits(computation.instruction(n).opcode).reduction]
    analysis = _tile_analysis(computation) if reducers else None
    reducers = [n for n in reducers if n not in _whole(scans, space, tile_sizes)]
    extents = [reduced_extents(computation, n) for n in reducers]
    persistent = persistent_extent(analysis, extents) if reducers else 1
    if reduction_chunk is None and persistent > MAX_PERSISTENT_REDUCTION:
        reduction_chunk = DEFAULT_REDUCTION_CHUNK
    if reduction_chunk is not None and (reduction_chunk < 1 or reduction_chunk & (reduction_chunk - 1)):
        raise UnsupportedOpError(f"reduction chunk {reduction_chunk} must be a power of two",
                                 where=computation.name)
    reduce_axes, reduce_blocks = [], []
    nested = nested_reductions(analysis, reducers) if reducers else set()
    blocks_of = {name: _looped_blocks(computation, name, ext, reduction_chunk,
                                      _chunk_budget(reduction_chunk, ext) if budgets else None)
                 for name, ext in zip(reducers, extents) if name in nested}
    # A chunk of an outer reduction holds its nested ones' blocks too (a loss's mean over
    # rows: each row's logsumexp): together at most a persistent reduction's elements.
    inner = max((math.prod(b) for b in blocks_of.values()), default=1)
    for name, ext in zip(reducers, extents):
        if name not in nested:
            budget = reduction_chunk if inner == 1 or reduction_chunk is None \
                else max(1, min(reduction_chunk, MAX_PERSISTENT_REDUCTION // inner))
            if budget is not None and outer_cap is not None:
                budget = min(budget, outer_cap)
            budget = budget if budgets else None
            blocks_of[name] = _looped_blocks(computation, name, ext, reduction_chunk, budget)
    shared: dict[tuple, tuple[int, ...]] = {}
    for name, ext in zip(reducers, extents):
        blocks = blocks_of[name]
        # Reductions computed once per output element over the same extents share axes:
        # fewer, smaller tensors (a 4-D space for three row reductions took minutes to lower).
        key = (tuple(ext), tuple(blocks))
        can_share = computation.instruction(name).opcode == "reduce" and name not in nested
        if can_share and key in shared:
            reduce_axes.append((name, shared[key]))
            continue
        first = len(space) + len(reduce_blocks)
        axes = tuple(range(first, first + len(blocks)))
        reduce_axes.append((name, axes))
        reduce_blocks.extend(blocks)
        if can_share:
            shared[key] = axes
    reduction = math.prod(reduce_blocks)
    if tile_sizes is None:
        tile_sizes = _default_tile_sizes(space, set(scans.values()), target_elements // reduction)
    tile_sizes = tuple(int(t) for t in tile_sizes)
    if len(tile_sizes) != len(space) or any(t < 1 for t in tile_sizes):
        raise UnsupportedOpError(f"tile sizes {list(tile_sizes)} must be {len(space)} positive sizes",
                                 where=computation.name)
    for t, n in zip(tile_sizes, space):
        if t & (t - 1) and t > n:
            raise UnsupportedOpError(f"tile sizes {list(tile_sizes)}: a tile that is not a power of "
                                     f"two must not exceed its dim ({t} > {n})", where=computation.name)
    tiles = tuple(-(-size // tile) for size, tile in zip(space, tile_sizes))
    blocks = tuple(next_power_of_two(t) for t in tile_sizes)
    split = None
    if budgets and reduction_chunk is not None and split_parts != 1:
        split = _split(computation, reducers, extents, nested, blocks_of, math.prod(tiles),
                       math.prod(blocks), split_parts)
    return KernelPlan(space, tile_sizes, blocks + tuple(reduce_blocks), tuple(reduce_axes), tiles,
                      reduction_chunk, index_bits, split, tuple(sorted(scans.items())))


def _scans_along_tile(computation: HloComputation, module: HloModule | None,
                      space: tuple[int, ...]) -> dict[str, int]:
    """The scans computed along the tile (``tiling.policy.tile_scans``), each with the output
    dim it runs along.  Scans along several dims make the tile span each of them: dims are
    taken minor-most first (the coalesced one in a row-major layout) while their spans
    together fit a persistent reduction's elements, the scans along the others reduce
    windows (a cumsum down and one across a 300 x 300 matrix would have made every program
    hold 512 x 512 elements)."""
    if module is None or not any(traits(computation.instruction(n).opcode).reduction
                                 for n in reachable_instructions(computation)):
        return {}
    analysis = _tile_analysis(computation)
    if analysis is None or analysis.output_dims != space:
        return {}
    scans = tile_scans(analysis, module)
    kept, elements = set(), 1
    for j in sorted(set(scans.values()), reverse=True):
        span = next_power_of_two(_scan_span(space[j]))
        if elements * span <= MAX_PERSISTENT_REDUCTION:
            kept.add(j)
            elements *= span
    return {name: j for name, j in scans.items() if j in kept}


def _scan_span(extent: int) -> int:
    """The default tile along a scanned dim of ``extent``: all of it, or ``CARRIED_SCAN_TILE``
    when too long for one tile."""
    return extent if next_power_of_two(extent) <= MAX_PERSISTENT_REDUCTION else CARRIED_SCAN_TILE


def _whole(scans: dict[str, int], space: tuple[int, ...],
           tile_sizes: tuple[int, ...] | None) -> dict[str, int]:
    """The ``scans`` the tile spans whole: the given tile's, or the default's (``_scan_span``:
    the others are carried across tiles)."""
    def tile(j: int) -> int:
        return _scan_span(space[j]) if tile_sizes is None else tile_sizes[j]

    return {name: j for name, j in scans.items() if tile(j) >= space[j]}


def _default_tile_sizes(space: tuple[int, ...], scanned: set[int], budget: int) -> tuple[int, ...]:
    """Powers of two filling ``budget`` elements from the minor-most dim (``choose_tiling``'s
    fallback), the ``scanned`` dims (scans run along them) taken first: whole, or in tiles
    of ``CARRIED_SCAN_TILE`` when too long for one; a scan down the columns also takes
    ``SCAN_ROW_ELEMENTS`` of each row where a persistent reduction's elements allow."""
    spans = {j: _scan_span(space[j]) for j in scanned}
    spanned = math.prod(next_power_of_two(t) for t in spans.values())
    rest = tuple(1 if j in spans else n for j, n in enumerate(space))
    if spans and len(space) - 1 not in spans:  # down the columns: take rows, not lanes
        budget = max(budget, spanned * min(SCAN_ROW_ELEMENTS, MAX_PERSISTENT_REDUCTION // spanned))
    sizes = choose_tiling(None, output_dims=rest, budget=max(1, budget // spanned)).tile_sizes
    return tuple(spans.get(j, t) for j, t in enumerate(sizes))


def _chunk_budget(reduction_chunk: int | None, extents: tuple[int, ...]) -> int | None:
    """Elements per chunk of a nested reduction: all of it when it fits a persistent
    reduction (no loop inside the outer one's), else the chunk."""
    whole = math.prod(next_power_of_two(e) for e in extents)
    if reduction_chunk is None or whole <= MAX_PERSISTENT_REDUCTION:
        return whole
    return reduction_chunk


def _looped_blocks(computation: HloComputation, name: str, extents: tuple[int, ...],
                   reduction_chunk: int | None, budget: int | None) -> list[int]:
    """The blocks of one reduction's axes (in its dim order): whole dims, padded to powers of
    two, when persistent; looped, at most ``budget`` elements per chunk in all, given to the
    most minor dims first (a sum over both dims of a row-major matrix walks rows of 1024, not
    1024 x 1024 blocks).  A reduce-window's window dims each get the chunk."""
    whole = [next_power_of_two(e) for e in extents]
    if reduction_chunk is None:
        return whole
    instr = computation.instruction(name)
    if instr.opcode != "reduce" or budget is None:
        return [min(reduction_chunk, w) for w in whole]
    operand = computation.instruction(instr.operands[0]).shape
    reduced = kept_and_reduced(operand.rank, instr.attr("dimensions"))[1]
    position = {dim: k for k, dim in enumerate(reduced)}
    minor_first = [position[dim] for dim in operand.layout.minor_to_major if dim in position] \
        if isinstance(operand, ArrayShape) and operand.layout is not None \
        else list(reversed(range(len(extents))))
    blocks, left = [1] * len(extents), budget
    for k in minor_first:
        blocks[k] = min(left, whole[k])
        left = max(1, left // blocks[k])
    return blocks


def _split(computation: HloComputation, reducers: list[str], extents: list[tuple[int, ...]],
           nested: set[str], blocks_of: dict[str, list[int]], tiles: int, tile_elements: int,
           split_parts: int | None) -> SplitReduction | None:
    """How the outer reduction's first reduced dim is split among programs, or None.

    Only a lone outer ``reduce`` (every other reduction nested in its operand) whose result
    does not fold in XLA's order (fp8) is split: the parts join after its loop, so nothing
    else may need its result before then.  The default (``split_parts`` None) splits when the
    output tiles are fewer than ``SPLIT_REDUCTION_PROGRAMS`` and each part keeps at least
    ``MIN_SPLIT_ELEMENTS`` elements to reduce (its output tile times its share of the reduced
    elements); ``split_parts`` asks for that many parts (fewer when the dim has fewer
    blocks).
    """
    outer = [(name, ext) for name, ext in zip(reducers, extents) if name not in nested]
    if len(outer) != 1:
        return None
    name, ext = outer[0]
    instr = computation.instruction(name)
    arity = len(instr.operands) // 2
    if instr.opcode != "reduce" or not ext or folds_in_order(instr, arity) \
            or not all(splittable(computation.instruction(o).shape)
                       for o in instr.operands[:arity]):
        return None
    block = blocks_of[name][0]
    steps = -(-ext[0] // block)
    if split_parts is None:
        work = tile_elements * math.prod(ext) * max(
            (math.prod(e) for n, e in zip(reducers, extents) if n in nested), default=1)
        split_parts = min(-(-SPLIT_REDUCTION_PROGRAMS // tiles), work // MIN_SPLIT_ELEMENTS)
    per_part = -(-steps // max(1, min(split_parts, steps)))
    parts = -(-steps // per_part)
    return SplitReduction(name, parts, per_part * block) if parts > 1 else None
