"""Every output tiling of a fusion, its cost, and the default a user gets without autotuning.

Candidates: per output dim, the powers of two up to the dim plus the dim itself; for a
fusion that reduces, the reduced dims whole (persistent) or, when they do not fit, looped in
the largest power-of-two chunk that is legal.  Each legal candidate gets, per block (the
first block, a full one): bytes read without reuse (every distinct parameter tile), with
reuse (a parameter read through several maps counts the union of its tiles once), bytes
written and flops; totals multiply by the number of blocks, so a broadcast operand re-read
by every block is counted once per block (``reread_factor`` compares with reading each input
once).  The memory cost (``TilingCandidate.memory_cost``) weighs those re-reads as a GPU
pays them: a parameter that fits in L2 is fetched from DRAM once and its re-reads cost L2
bandwidth (about twice DRAM's), so the cost is the larger of the DRAM bytes and all bytes
at L2 speed.

The default: prefer a coalesced tiling, then the persistent reduction, then a memory cost
and flops within ``COST_TOLERANCE`` (10%) of the least, then a block closest to the target
size, then the least memory cost, then fewer blocks.  Counting every re-read of a small
broadcast operand at full weight (as the ranking once did) made one block always win: a
layernorm's f32[64,256] scale-and-shift went to a single SM of 132.

* Coalesced: every access of a block, the output tiles written AND the parameter tiles
  read, runs contiguously in memory (along its buffer's ``minor_to_major``) over at least
  ``COALESCED_BYTES`` (128: a warp's whole cache lines; 32 f32, 64 bf16) or the whole buffer,
  except accesses moving at most ``UNCOALESCED_TOLERANCE`` of the block's bytes (a row
  reduction's output, a broadcast scale).  A transpose thus gets a 2-D tile (32x32 and up)
  whose reads run along the input's minor dim and whose writes along the output's: Triton
  converts the layout between them through shared memory, as XLA's transpose emitter does.
* Size: the block's largest tile (a reduction's input tile counts its reduced dims) aims at
  1024 elements, less when the work is too small to give every SM of an H100 a block, but
  never under one warp of 128-bit accesses of the narrowest element (``VECTOR_BLOCK_BYTES``:
  128 f32, 256 bf16), the least a block needs to vectorize.

>>> from fusion.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... f {
...   p0 = f32[64,512] parameter(0)
...   ROOT e = f32[64,512] exponential(p0)
... }
... ENTRY main {
...   x = f32[64,512] parameter(0)
...   ROOT r = f32[64,512] fusion(x), kind=kLoop, calls=f
... }''')
>>> report = tiling_candidates(m, m.entry.root)
>>> report.default.tile_sizes, report.default.num_blocks, report.default.bytes_read
((1, 128), 256, 512)
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from math import gcd, log2
from typing import Sequence

from fusion.element_types import ELEMENT_TYPES
from fusion.hero_analysis import ELEMENTWISE_OPCODES
from fusion.hlo_module import HloInstruction, HloModule
from fusion.shape import ArrayShape
from tiling.symbolic_tile import SymbolicTile
from tiling.tiled_fusion import (
    SymbolicNode,
    SymbolicTiledFusion,
    analyze_fusion_tiling,
    leaf_dims,
    next_power_of_two,
)
from tiling.tiling_legality import check_tiling, legal_reduction_chunk, node_sizes, reduced_extent
from tiling.xla_tiling_config import XlaTilingConfig, xla_tiling_of

COALESCED_BYTES = 128
#: Bytes of one warp's 128-bit accesses (32 threads x 16 bytes).
VECTOR_BLOCK_BYTES = 512
#: Fraction of a block's bytes that may move in uncoalesced accesses.
UNCOALESCED_TOLERANCE = 1 / 8
TARGET_TILE_ELEMENTS = 1024
NUM_SMS = 132  # H100 SXM
#: A parameter buffer at most this large stays in L2 (H100: 50 MiB) while the kernel runs, so
#: only its first read comes from DRAM.  A quarter of L2: the streamed operands and the
#: outputs pass through it too.
L2_RESIDENT_BYTES = 50 * 2**20 // 4
#: L2 bandwidth over DRAM bandwidth (H100: roughly 7 TB/s over 3.35 TB/s; 2 is conservative).
L2_TO_DRAM_BANDWIDTH = 2
#: Modeled memory costs within this fraction of the least are treated as equal: the model
#: (first-block costs times the block count, bandwidths as constants) is no more precise, and
#: a block count that leaves SMs idle costs more than such a difference.
COST_TOLERANCE = 0.10
_NO_FLOP_OPCODES = frozenset({"bitcast-convert", "convert", "copy"})


@dataclass(frozen=True)
class TilingCandidate:
    """One legal tiling with its costs (bytes and flops are per block unless ``total_``)."""

    tile_sizes: tuple[int, ...]
    reduction_chunk: int | None
    grid: tuple[int, ...]
    num_blocks: int
    bytes_read: int
    bytes_read_with_reuse: int
    bytes_written: int
    flops: int
    coalesced: bool
    #: Elements of the block's largest tile, padded to powers of two (what a program holds).
    elements: int = 0
    #: Bytes all blocks read from DRAM (``dram_bytes_read``: L2-resident re-reads removed).
    dram_bytes_read: int = 0

    @property
    def memory_cost(self) -> int:
        """Modeled memory time of all blocks, in bytes at DRAM bandwidth: DRAM traffic, or
        every byte through L2 at ``L2_TO_DRAM_BANDWIDTH`` times that speed if that is slower.
        A broadcast operand re-read by every block thus costs L2 bandwidth, not DRAM's."""
        dram = self.dram_bytes_read + self.total_bytes_written
        through_l2 = self.total_bytes_read + self.total_bytes_written
        return max(dram, -(-through_l2 // L2_TO_DRAM_BANDWIDTH))

    @property
    def total_bytes_read(self) -> int:
        return self.bytes_read_with_reuse * self.num_blocks

    @property
    def total_bytes_written(self) -> int:
        return self.bytes_written * self.num_blocks

    @property
    def total_flops(self) -> int:
        return self.flops * self.num_blocks

    def to_json(self) -> dict:
        return {
            "tile_sizes": list(self.tile_sizes), "reduction_chunk": self.reduction_chunk,
            "num_blocks": self.num_blocks, "bytes_read": self.bytes_read,
            "bytes_read_with_reuse": self.bytes_read_with_reuse,
            "bytes_written": self.bytes_written, "flops": self.flops,
            "total_bytes_read": self.total_bytes_read,
            "total_bytes_written": self.total_bytes_written,
            "coalesced": self.coalesced, "elements": self.elements,
            "dram_bytes_read": self.dram_bytes_read, "memory_cost": self.memory_cost,
        }


@dataclass(frozen=True)
class RejectedTiling:
    tile_sizes: tuple[int, ...]
    reduction_chunk: int | None
    reason: str

    def to_json(self) -> dict:
        return {"tile_sizes": list(self.tile_sizes), "reduction_chunk": self.reduction_chunk,
                "reason": self.reason}


@dataclass(frozen=True)
class TilingReport:
    """Legal candidates (ranked best first), rejected ones with reasons, the default choice
    (``None`` when nothing is legal, see ``not_tileable``) and XLA's own choice if any."""

    fusion: str
    output_dims: tuple[int, ...]
    legal: tuple[TilingCandidate, ...]
    rejected: tuple[RejectedTiling, ...]
    default: TilingCandidate | None
    default_reason: str
    input_bytes: int
    xla_tiling: XlaTilingConfig | None = None
    xla_problem: str | None = None
    not_tileable: tuple[str, ...] = field(default=())

    def reread_factor(self, c: TilingCandidate) -> float:
        return c.total_bytes_read / self.input_bytes if self.input_bytes else 0.0


def _bytes_of(instr: HloInstruction) -> int:
    """Bytes per element (summed over the leaves of a variadic op's tuple)."""
    shape = instr.shape
    if isinstance(shape, ArrayShape):
        return ELEMENT_TYPES[shape.dtype].byte_size
    return sum(ELEMENT_TYPES[e.dtype].byte_size for e in getattr(shape, "elements", ())
               if isinstance(e, ArrayShape))


def _axis_values(offset: int, size: int, stride: int, n: int) -> range:
    """``{offset + k*stride : 0 <= k < size} ∩ [0, n)`` as a range."""
    if stride == 0 or size <= 1:
        return range(offset, offset + 1) if 0 <= offset < n and size >= 1 else range(0)
    r = range(offset, offset + size * stride, stride)
    if stride > 0:
        lo = max(0, -(-(0 - offset) // stride))
        hi = min(size, (n - 1 - offset) // stride + 1)
    else:
        lo = max(0, -(-(offset - (n - 1)) // -stride))
        hi = min(size, offset // -stride + 1)
    return r[lo:hi] if hi > lo else range(0)


def _block0_axes(tile: SymbolicTile, tile_sizes, dims) -> list[range]:
    """The tile of the first block, per operand dim, cut to the operand's bounds."""
    p = tile.params(tile_sizes)
    origins = [0] * (tile.num_dims + tile.num_range_vars)
    for l, b in enumerate(tile.source.range_bounds):
        origins[tile.num_dims + l] = b.lower
    rt = [v.feasible_values.lower for v in tile.source.rt_vars]
    axes = []
    for j, (off, size, stride) in enumerate(zip(tile.offsets, tile.sizes, tile.strides)):
        axes.append(_axis_values(off.evaluate(origins, rt), size.evaluate(p),
                                 stride.evaluate(p), dims[j]))
    return axes


def _count(axes: list[range]) -> int:
    out = 1
    for a in axes:
        out *= len(a)
    return out


def _union_count(boxes: list[list[range]]) -> int:
    """Elements in the union of strided boxes (inclusion-exclusion; boxes intersect in
    boxes).  Beyond 4 boxes, the sum (an upper bound)."""
    if len(boxes) > 4:
        return sum(_count(b) for b in boxes)
    total = 0
    for k in range(1, len(boxes) + 1):
        for subset in itertools.combinations(boxes, k):
            inter = 1
            for dim_ranges in zip(*subset):
                common = dim_ranges[0]
                for r in dim_ranges[1:]:
                    common = _intersect(common, r)
                inter *= len(common)
            total += inter if k % 2 else -inter
    return total


def _intersect(a: range, b: range) -> range:
    """``a ∩ b`` as a range, without materializing either: a reduced dim's tile may span
    2^33 elements, far too many for sets.

    >>> _intersect(range(0, 100, 4), range(2, 100, 6)), _intersect(range(0, 9, 2), range(1, 9, 2))
    (range(8, 97, 12), range(0, 0))
    """
    a, b = (r if r.step > 0 else r[::-1] for r in (a, b))
    if not a or not b:
        return range(0)
    lo, hi = max(a[0], b[0]), min(a[-1], b[-1])
    if lo > hi:
        return range(0)
    step = a.step * b.step // gcd(a.step, b.step)
    first = a[0] + -(-(lo - a[0]) // a.step) * a.step
    # The common elements repeat every lcm: the first lies within one lcm of ``first``.
    for x in range(first, min(hi, first + step - 1) + 1, a.step):
        if (x - b[0]) % b.step == 0:
            return range(x, hi + 1, step)
    return range(0)


def _block_costs(analysis: SymbolicTiledFusion, tile_sizes: Sequence[int]):
    """``(bytes read, {parameter: bytes read with reuse}, bytes written, flops)`` of the
    first block."""
    per_param: dict[str, list[list[range]]] = {}
    read = written = flops = 0
    counts: dict[int, int] = {}
    for node in analysis.nodes:
        instr = node.instruction
        dims = leaf_dims(instr) or ()
        axes = _block0_axes(node.tile, tile_sizes, dims)
        counts[node.index] = _count(axes)
        if instr.opcode == "parameter":
            per_param.setdefault(instr.name, []).append(axes)
            read += counts[node.index] * _bytes_of(instr)
        elif instr.opcode in ELEMENTWISE_OPCODES and instr.opcode not in _NO_FLOP_OPCODES:
            flops += counts[node.index]
        elif instr.opcode in ("reduce", "reduce-window") and node.operands:
            flops += counts[node.operands[0]]
        elif instr.opcode == "dot" and node.operands:
            flops += 2 * counts[node.operands[0]] * _free_of_rhs(analysis, node, counts)
    reuse = {name: _union_count(boxes) * _bytes_of(analysis.computation.instruction(name))
             for name, boxes in per_param.items()}
    for r in analysis.roots:
        written += counts[r] * _bytes_of(analysis.nodes[r].instruction)
    return read, reuse, written, flops


def block_costs(analysis: SymbolicTiledFusion, tile_sizes: Sequence[int]) -> tuple[int, int, int, int]:
    """``(bytes read, bytes read with reuse, bytes written, flops)`` of the first block."""
    read, reuse, written, flops = _block_costs(analysis, tile_sizes)
    return read, sum(reuse.values()), written, flops


def dram_bytes_read(analysis: SymbolicTiledFusion, reuse: dict[str, int], num_blocks: int) -> int:
    """Bytes all ``num_blocks`` blocks read from DRAM, given each parameter's bytes read by
    one block (``reuse``): a parameter whose buffer fits ``L2_RESIDENT_BYTES`` is fetched
    from DRAM once, its re-reads by other blocks hit L2; a larger one every time.

    >>> from fusion.parser import parse_hlo
    >>> from tiling.tiled_fusion import analyze_fusion_tiling
    >>> m = parse_hlo('HloModule m\\nf {\\n  p = f32[256] parameter(0)\\n'
    ...               '  ROOT b = f32[64,256] broadcast(p), dimensions={1}\\n}\\n'
    ...               'ENTRY e {\\n  x = f32[256] parameter(0)\\n'
    ...               '  ROOT r = f32[64,256] fusion(x), kind=kLoop, calls=f\\n}')
    >>> dram_bytes_read(analyze_fusion_tiling(m, m.entry.root), {"p": 1024}, 64)  # 64 reads
    1024
    """
    total = 0
    for name, per_block in reuse.items():
        instr = analysis.computation.instruction(name)
        buffer = _bytes_of(instr)
        for n in leaf_dims(instr) or ():
            buffer *= n
        reads = per_block * num_blocks
        total += min(reads, buffer) if buffer <= L2_RESIDENT_BYTES else reads
    return total


def _free_of_rhs(analysis, node: SymbolicNode, counts) -> int:
    """Elements of the dot's output tile per lhs element (``2*M*N*K = 2*|lhs tile|*N``)."""
    lhs = counts[node.operands[0]]
    return max(1, counts[node.index] // max(1, lhs)) if lhs else 0


def _minor_to_major(instr: HloInstruction) -> tuple[int, ...]:
    shape = instr.shape
    if not isinstance(shape, ArrayShape):
        shape = next((e for e in getattr(shape, "elements", ()) if isinstance(e, ArrayShape)), None)
    return tuple(shape.effective_layout.minor_to_major) if shape is not None else ()


def contiguous_run(axes: Sequence[range], dims: Sequence[int], minor_to_major: Sequence[int]) -> int:
    """Elements of a strided box that lie contiguously in memory, walking the layout from
    its minor dim while the box covers each dim whole.

    >>> contiguous_run([range(0, 4), range(0, 8)], (64, 8), (1, 0))
    32
    >>> contiguous_run([range(0, 4), range(0, 2)], (64, 8), (0, 1))
    4
    >>> contiguous_run([range(0, 4, 2), range(0, 1)], (64, 1), (1, 0))
    1
    """
    run = 1
    for d in minor_to_major:
        axis = axes[d]
        if len(axis) > 1 and abs(axis.step) != 1:
            return run
        run *= len(axis)
        if len(axis) < dims[d]:
            return run
    return run


def uncoalesced_fraction(analysis: SymbolicTiledFusion, tile_sizes: Sequence[int]) -> float:
    """The fraction of the first block's bytes (parameter tiles read, output tiles written)
    moved by accesses that run contiguously over fewer than ``COALESCED_BYTES`` (and do not
    cover their whole buffer)."""
    bad = total = 0
    roots = set(analysis.roots)
    for node in analysis.nodes:
        instr = node.instruction
        if instr.opcode != "parameter" and node.index not in roots:
            continue
        dims = leaf_dims(instr) or ()
        if not isinstance(node.tile, SymbolicTile):
            continue
        axes = _block0_axes(node.tile, tile_sizes, dims)
        size = _bytes_of(instr)
        moved = _count(axes) * size
        numel = 1
        for n in dims:
            numel *= n
        needed = min(-(-COALESCED_BYTES // size), numel)
        total += moved
        if contiguous_run(axes, dims, _minor_to_major(instr) or range(len(dims) - 1, -1, -1)) < needed:
            bad += moved
    return bad / total if total else 0.0


def is_coalesced(analysis: SymbolicTiledFusion, tile_sizes: Sequence[int]) -> bool:
    """Whether the block's reads and writes coalesce (see the module docstring)."""
    if not analysis.output_dims:
        return True
    return uncoalesced_fraction(analysis, tile_sizes) <= UNCOALESCED_TOLERANCE


def block_elements(analysis: SymbolicTiledFusion, tile_sizes: Sequence[int],
                   reduction_chunk: int | None = None) -> int:
    """Elements of the block's largest tile, padded to powers of two."""
    largest = 1
    for node in analysis.nodes:
        if isinstance(node.tile, SymbolicTile):
            padded = 1
            for size in node_sizes(node.tile, tile_sizes, reduction_chunk):
                padded *= next_power_of_two(size)
            largest = max(largest, padded)
    return largest


def _narrowest_bytes(analysis: SymbolicTiledFusion) -> int:
    sizes = [_bytes_of(p) for p in analysis.computation.parameters if leaf_dims(p)]
    sizes += [_bytes_of(analysis.nodes[r].instruction) for r in analysis.roots]
    return min((b for b in sizes if b), default=4)


def candidate_sizes(dims: Sequence[int]) -> list[tuple[int, ...]]:
    """Powers of two up to each dim, plus the dim itself.

    >>> candidate_sizes((3, 4))
    [(1, 1), (1, 2), (1, 4), (2, 1), (2, 2), (2, 4), (3, 1), (3, 2), (3, 4)]
    """
    per_dim = []
    for n in dims:
        options = {1 << k for k in range(max(n, 1).bit_length()) if (1 << k) <= n} | {max(n, 1)}
        per_dim.append(sorted(options))
    return list(itertools.product(*per_dim))


def evaluate_candidate(analysis: SymbolicTiledFusion, tile_sizes: Sequence[int],
                       reduction_chunk: int | None = None) -> TilingCandidate | RejectedTiling:
    tile_sizes = tuple(tile_sizes)
    reason = check_tiling(analysis, tile_sizes, reduction_chunk)
    if reason is not None:
        return RejectedTiling(tile_sizes, reduction_chunk, reason)
    read, reuse, written, flops = _block_costs(analysis, tile_sizes)
    grid = tuple(-(-n // t) for n, t in zip(analysis.output_dims, tile_sizes))
    blocks = 1
    for g in grid:
        blocks *= g
    return TilingCandidate(tile_sizes, reduction_chunk, grid, blocks, read, sum(reuse.values()),
                           written, flops, is_coalesced(analysis, tile_sizes),
                           block_elements(analysis, tile_sizes, reduction_chunk),
                           dram_bytes_read(analysis, reuse, blocks))


def _target(work: int, target_elements: int = TARGET_TILE_ELEMENTS,
            minimum: int = 16) -> int:
    """The block size (elements) to aim for: ``target_elements``, less when ``work`` (all
    blocks' elements) cannot give every SM a block, but not under ``minimum``."""
    per_sm = max(1, work // NUM_SMS)
    target = 1 << max(0, per_sm.bit_length() - 1)
    return max(minimum, min(target_elements, target))


def target_for(analysis: SymbolicTiledFusion, target_elements: int = TARGET_TILE_ELEMENTS) -> int:
    """``_target`` for a fusion: its work is the largest tile of one block covering the whole
    output (a row reduction's input, not its output); the floor is one warp of 128-bit
    accesses of its narrowest element."""
    work = block_elements(analysis, analysis.output_dims) if analysis.output_dims else 1
    return _target(work, target_elements, max(16, VECTOR_BLOCK_BYTES // _narrowest_bytes(analysis)))


def _rank_class(c: TilingCandidate) -> tuple[bool, bool]:
    return not c.coalesced, c.reduction_chunk is not None


def _least_costs(legal: Sequence[TilingCandidate]) -> dict[tuple[bool, bool], tuple[int, int]]:
    """Per rank class, the least memory cost and the least total flops."""
    least: dict[tuple[bool, bool], tuple[int, int]] = {}
    for c in legal:
        cost, flops = least.get(_rank_class(c), (c.memory_cost, c.total_flops))
        least[_rank_class(c)] = (min(cost, c.memory_cost), min(flops, c.total_flops))
    return least


def _near_least(c: TilingCandidate, least: tuple[int, int]) -> bool:
    """Whether ``c``'s memory cost and flops are within ``COST_TOLERANCE`` of the least."""
    cost, flops = least
    return (c.memory_cost <= cost * (1 + COST_TOLERANCE)
            and c.total_flops <= flops * (1 + COST_TOLERANCE))


def _rank_key(c: TilingCandidate, target: int, least: tuple[int, int]):
    """Coalesced, persistent, near the least cost (beyond it: the cheaper), closest to the
    target size, cheaper, fewer blocks, larger minor tiles."""
    numel = c.elements
    if not numel:
        numel = 1
        for t in c.tile_sizes:
            numel *= t
    near = _near_least(c, least)
    return (*_rank_class(c), not near, 0 if near else c.memory_cost,
            abs(log2(numel) - log2(target)), c.memory_cost, c.num_blocks,
            tuple(-t for t in reversed(c.tile_sizes)))


def explain_default(analysis: SymbolicTiledFusion, c: TilingCandidate, target: int,
                    near_least: bool) -> str:
    parts = []
    if analysis.output_dims:
        if c.coalesced:
            parts.append(f"every parameter read and output write runs over >= {COALESCED_BYTES}"
                         " contiguous bytes (or its whole buffer), so loads and stores coalesce")
        else:
            parts.append(f"no legal tiling makes every read and write run over >= "
                         f"{COALESCED_BYTES} contiguous bytes; the least uncoalesced one")
    if c.reduction_chunk is None and reduced_extent(analysis):
        parts.append("reduced dims whole (persistent reduction)")
    elif c.reduction_chunk is not None:
        parts.append(f"reduced dims too large to keep whole: looped in chunks of"
                     f" {c.reduction_chunk}")
    traffic = c.total_bytes_read + c.total_bytes_written
    dram = c.dram_bytes_read + c.total_bytes_written
    parts.append(f"{traffic} bytes of total traffic"
                 + (f", {dram} from DRAM (re-reads of operands that fit L2 hit L2)"
                    if dram != traffic else "")
                 + (f" (memory cost within {COST_TOLERANCE:.0%} of the least of the"
                    f" {'coalesced' if c.coalesced else 'legal'} tilings)" if near_least else ""))
    parts.append(f"{c.elements} elements per block (target {target}: the closest within that"
                 f" cost), {c.num_blocks} blocks")
    return "; ".join(parts)


def rank_candidates(analysis: SymbolicTiledFusion, target_elements: int = TARGET_TILE_ELEMENTS,
                    ) -> tuple[list[TilingCandidate], list[RejectedTiling]]:
    legal: list[TilingCandidate] = []
    rejected: list[RejectedTiling] = []
    for sizes in candidate_sizes(analysis.output_dims):
        chunk, reason = legal_reduction_chunk(analysis, sizes)
        result = (evaluate_candidate(analysis, sizes, chunk) if reason is None
                  else RejectedTiling(tuple(sizes), None, reason))
        (legal if isinstance(result, TilingCandidate) else rejected).append(result)
    target = target_for(analysis, target_elements)
    least = _least_costs(legal)
    legal.sort(key=lambda c: _rank_key(c, target, least[_rank_class(c)]))
    return legal, rejected


def tiling_candidates(module: HloModule, fusion_instr: HloInstruction,
                      analysis: SymbolicTiledFusion | None = None,
                      target_elements: int = TARGET_TILE_ELEMENTS) -> TilingReport:
    """Legal tilings ranked, rejected ones with reasons, the default, and XLA's choice.

    See the module docstring for an example.  ``analysis`` (from
    ``tiling.tiled_fusion.analyze_fusion_tiling``) is reused when given.
    ``target_elements`` is the block size the ranking aims for: 1024 suits a GPU; the
    Triton interpreter, which pays a fixed cost per program, wants far larger blocks.
    """
    if analysis is None:
        analysis = analyze_fusion_tiling(module, fusion_instr)
    return report_for(analysis, xla_tiling_of(fusion_instr), target_elements)


def report_for(analysis: SymbolicTiledFusion, xla: XlaTilingConfig | None = None,
               target_elements: int = TARGET_TILE_ELEMENTS) -> TilingReport:
    """``tiling_candidates`` for an analysis already made (e.g. of a single-op wrapper)."""
    input_bytes = 0
    for p in analysis.computation.parameters:
        if isinstance(p.shape, ArrayShape):
            count = 1
            for n in p.shape.dims:
                count *= n
            input_bytes += count * _bytes_of(p)
    not_tileable = tuple(f"{n.name}: {t.reason}" for n, t in analysis.not_tileable())
    legal, rejected = rank_candidates(analysis, target_elements)
    target = target_for(analysis, target_elements)
    default, reason = None, "no legal tiling"
    if not_tileable:
        reason = "not tileable: " + not_tileable[0]
    elif legal:
        default = legal[0]
        reason = explain_default(analysis, default, target,
                                 _near_least(default, _least_costs(legal)[_rank_class(default)]))
    xla_problem = None
    if xla is not None:
        result = evaluate_candidate(analysis, xla.tile_sizes) if xla.tile_sizes else None
        if result is None:
            xla_problem = "block_level_fusion_config has no output tile"
        elif isinstance(result, RejectedTiling):
            xla_problem = result.reason
    return TilingReport(analysis.fusion, analysis.output_dims, tuple(legal), tuple(rejected),
                        default, reason, input_bytes, xla, xla_problem, not_tileable)


def choose_tiling(report: TilingReport, prefer_ours: bool = False) -> tuple[TilingCandidate | None, str]:
    """The tiling to use: XLA's when the fusion carries a legal one (unless ``prefer_ours``),
    else our default; with the reason."""
    if report.xla_tiling is not None and not prefer_ours and report.xla_problem is None:
        sizes = report.xla_tiling.tile_sizes
        for c in report.legal:
            if c.tile_sizes == sizes and c.reduction_chunk is None:
                return c, "XLA's block_level_fusion_config (honored; legal for our backend)"
    if report.xla_tiling is not None and report.xla_problem is not None and not prefer_ours:
        return report.default, (f"XLA's tiling {list(report.xla_tiling.tile_sizes)} rejected"
                                f" ({report.xla_problem}); using ours: {report.default_reason}")
    return report.default, report.default_reason


__all__ = [
    "RejectedTiling", "TilingCandidate", "TilingReport", "candidate_sizes", "choose_tiling",
    "evaluate_candidate", "tiling_candidates",
]
