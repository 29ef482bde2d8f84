"""Every output tiling of a fusion, its cost, and the default a user gets without autotuning.

Candidates: per output dim, the powers of two up to the dim plus the dim itself; for a
fusion that reduces, the reduced dims whole (persistent) or, when they do not fit, looped in
the largest power-of-two chunk that is legal.  Each legal candidate gets the costs of its
first block (``tiling.policy.costs``); totals multiply by the number of blocks, so a
broadcast operand re-read by every block is counted once per block (``reread_factor``
compares with reading each input once).  The memory cost (``TilingCandidate.memory_cost``) weighs those re-reads as a GPU
pays them: a parameter that fits in L2 is fetched from DRAM once and its re-reads cost L2
bandwidth (about twice DRAM's), so the cost is the larger of the DRAM bytes and all bytes
at L2 speed.

The default: prefer a coalesced tiling, then the persistent reduction, then a memory cost
and flops within ``COST_TOLERANCE`` (10%) of the least, then a block closest to the target
size, then the least memory cost, then fewer blocks.  Counting every re-read of a small
broadcast operand at full weight (as the ranking once did) made one block always win: a
layernorm's f32[64,256] scale-and-shift went to a single SM of 132.

* Coalesced (``tiling.policy.costs.is_coalesced``): every read and write of a block runs
  over at least ``COALESCED_BYTES`` contiguous bytes or its whole buffer.  A transpose thus
  gets a 2-D tile (32x32 and up) whose reads run along the input's minor dim and whose writes
  along the output's: Triton converts the layout between them through shared memory, as
  XLA's transpose emitter does.
* Size: the block's largest tile (a reduction's input tile counts its reduced dims) aims at
  1024 elements, less when the work is too small to give every SM of the device (by default
  the H100 SXM, ``tiling.policy.limits.DEFAULT_DEVICE``) a block, but never under one warp
  of 128-bit accesses of the narrowest element (``VECTOR_BLOCK_BYTES``: 128 f32, 256 bf16),
  the least a block needs to vectorize.

>>> from fusion.text.parser import parse_hlo
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
from math import log2, prod
from typing import Sequence

from fusion.ir.hlo_module import HloInstruction, HloModule
from fusion.ir.shape import ArrayShape
from tiling.policy.costs import (
    block_costs_by_parameter,
    block_elements,
    dram_bytes_read,
    element_bytes,
    is_coalesced,
    narrowest_bytes,
)
from tiling.policy.devices import DeviceSpec
from tiling.policy.legality import check_tiling, legal_reduction_chunk, reduced_extent
from tiling.policy.limits import (
    COALESCED_BYTES,
    COST_TOLERANCE,
    DEFAULT_DEVICE,
    L2_TO_DRAM_BANDWIDTH,
    MIN_ROOT_TILE_ELEMENTS,
    TARGET_TILE_ELEMENTS,
    VECTOR_BLOCK_BYTES,
    l2_resident_bytes,
)
from tiling.policy.verdict import Illegal
from tiling.symbolic.tiled_fusion import SymbolicTiledFusion, analyze_fusion_tiling
from tiling.policy.xla_tiling_config import XlaTilingConfig, xla_tiling_of


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
    """A tiling the legality rules refuse, with the verdict (``reason`` is its message)."""

    tile_sizes: tuple[int, ...]
    reduction_chunk: int | None
    verdict: Illegal

    @property
    def reason(self) -> str:
        return self.verdict.message

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
                       reduction_chunk: int | None = None,
                       device: DeviceSpec = DEFAULT_DEVICE) -> TilingCandidate | RejectedTiling:
    """The tiling's costs on ``device``, or why the legality rules refuse it."""
    tile_sizes = tuple(tile_sizes)
    reason = check_tiling(analysis, tile_sizes, reduction_chunk)
    if reason is not None:
        return RejectedTiling(tile_sizes, reduction_chunk, reason)
    read, reuse, written, flops = block_costs_by_parameter(analysis, tile_sizes)
    grid = tuple(-(-n // t) for n, t in zip(analysis.output_dims, tile_sizes))
    blocks = prod(grid)
    return TilingCandidate(tile_sizes, reduction_chunk, grid, blocks, read, sum(reuse.values()),
                           written, flops, is_coalesced(analysis, tile_sizes),
                           block_elements(analysis, tile_sizes, reduction_chunk),
                           dram_bytes_read(analysis, reuse, blocks, l2_resident_bytes(device)))


def _target(work: int, target_elements: int = TARGET_TILE_ELEMENTS,
            minimum: int = MIN_ROOT_TILE_ELEMENTS, sm_count: int = DEFAULT_DEVICE.sm_count) -> int:
    """The block size (elements) to aim for: ``target_elements``, less when ``work`` (all
    blocks' elements) cannot give each of ``sm_count`` SMs a block, but not under ``minimum``."""
    per_sm = max(1, work // sm_count)
    target = 1 << max(0, per_sm.bit_length() - 1)
    return max(minimum, min(target_elements, target))


def target_for(analysis: SymbolicTiledFusion, target_elements: int = TARGET_TILE_ELEMENTS,
               device: DeviceSpec = DEFAULT_DEVICE) -> int:
    """``_target`` for a fusion: its work is the largest tile of one block covering the whole
    output (a row reduction's input, not its output); the floor is one warp of 128-bit
    accesses of its narrowest element."""
    work = block_elements(analysis, analysis.output_dims) if analysis.output_dims else 1
    floor = max(MIN_ROOT_TILE_ELEMENTS, VECTOR_BLOCK_BYTES // narrowest_bytes(analysis))
    return _target(work, target_elements, floor, device.sm_count)


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
                    device: DeviceSpec = DEFAULT_DEVICE,
                    ) -> tuple[list[TilingCandidate], list[RejectedTiling]]:
    """Every candidate of ``candidate_sizes``: the legal ones ranked best first (module
    docstring), the rejected ones with their verdicts."""
    legal: list[TilingCandidate] = []
    rejected: list[RejectedTiling] = []
    for sizes in candidate_sizes(analysis.output_dims):
        chunk, reason = legal_reduction_chunk(analysis, sizes)
        result = (evaluate_candidate(analysis, sizes, chunk, device) if reason is None
                  else RejectedTiling(tuple(sizes), None, reason))
        (legal if isinstance(result, TilingCandidate) else rejected).append(result)
    target = target_for(analysis, target_elements, device)
    least = _least_costs(legal)
    legal.sort(key=lambda c: _rank_key(c, target, least[_rank_class(c)]))
    return legal, rejected


def tiling_candidates(module: HloModule, fusion_instr: HloInstruction,
                      analysis: SymbolicTiledFusion | None = None,
                      target_elements: int = TARGET_TILE_ELEMENTS,
                      device: DeviceSpec = DEFAULT_DEVICE) -> TilingReport:
    """Legal tilings ranked, rejected ones with reasons, the default, and XLA's choice.

    See the module docstring for an example.  ``analysis`` (from
    ``tiling.symbolic.tiled_fusion.analyze_fusion_tiling``) is reused when given.
    ``target_elements`` is the block size the ranking aims for: 1024 suits a GPU; the
    Triton interpreter, which pays a fixed cost per program, wants far larger blocks.
    ``device`` gives the SM count and L2 size the costs and the target assume.
    """
    if analysis is None:
        analysis = analyze_fusion_tiling(module, fusion_instr)
    return report_for(analysis, xla_tiling_of(fusion_instr), target_elements, device)


def report_for(analysis: SymbolicTiledFusion, xla: XlaTilingConfig | None = None,
               target_elements: int = TARGET_TILE_ELEMENTS,
               device: DeviceSpec = DEFAULT_DEVICE) -> TilingReport:
    """``tiling_candidates`` for an analysis already made (e.g. of a single-op wrapper)."""
    input_bytes = 0
    for p in analysis.computation.parameters:
        if isinstance(p.shape, ArrayShape):
            input_bytes += prod(p.shape.dims) * element_bytes(p)
    not_tileable = tuple(f"{n.name}: {t.reason}" for n, t in analysis.not_tileable())
    legal, rejected = rank_candidates(analysis, target_elements, device)
    target = target_for(analysis, target_elements, device)
    default, reason = None, "no legal tiling"
    if not_tileable:
        reason = "not tileable: " + not_tileable[0]
    elif legal:
        default = legal[0]
        reason = explain_default(analysis, default, target,
                                 _near_least(default, _least_costs(legal)[_rank_class(default)]))
    xla_problem = None
    if xla is not None:
        result = (evaluate_candidate(analysis, xla.tile_sizes, device=device) if xla.tile_sizes
                  else None)
        if result is None:
            xla_problem = "block_level_fusion_config has no output tile"
        elif isinstance(result, RejectedTiling):
            xla_problem = result.reason
    return TilingReport(analysis.fusion, analysis.output_dims, tuple(legal), tuple(rejected),
                        default, reason, input_bytes, xla, xla_problem, not_tileable)


__all__ = [
    "RejectedTiling", "TilingCandidate", "TilingReport", "candidate_sizes", "evaluate_candidate",
    "rank_candidates", "report_for", "target_for", "tiling_candidates",
]
