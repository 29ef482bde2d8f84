"""Every output tiling of a fusion, its cost, and the default a user gets without autotuning.

Candidates: per output dim, the powers of two up to the dim plus the dim itself; for a
fusion that reduces, the reduced dims whole (persistent) or, when they do not fit, looped in
the largest power-of-two chunk that is legal.  Each legal candidate gets, per block (the
first block, a full one): bytes read without reuse (every distinct parameter tile), with
reuse (a parameter read through several maps counts the union of its tiles once), bytes
written and flops; totals multiply by the number of blocks, so a broadcast operand re-read
by every block is counted once per block (``reread_factor`` compares with reading each input
once).

The default: prefer a coalesced tiling (the minor-most output dim tiled with >= 128
contiguous elements, or whole when smaller), then the persistent reduction, then the least
total traffic, then a root tile closest to the target size (1024 elements, less when the
output is too small to give every SM of an H100 a block), then fewer blocks.

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
from math import log2
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
)
from tiling.tiling_legality import check_tiling, node_sizes, reduced_extent
from tiling.xla_tiling_config import XlaTilingConfig, xla_tiling_of

COALESCED_ELEMENTS = 128
TARGET_TILE_ELEMENTS = 1024
NUM_SMS = 132  # H100 SXM
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
            "coalesced": self.coalesced,
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
            for dim_sets in zip(*subset):
                common = set(dim_sets[0])
                for s in dim_sets[1:]:
                    common &= set(s)
                inter *= len(common)
            total += inter if k % 2 else -inter
    return total


def block_costs(analysis: SymbolicTiledFusion, tile_sizes: Sequence[int]) -> tuple[int, int, int, int]:
    """``(bytes read, bytes read with reuse, bytes written, flops)`` of the first block."""
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
    reuse = sum(_union_count(boxes) * _bytes_of(analysis.computation.instruction(name))
                for name, boxes in per_param.items())
    for r in analysis.roots:
        written += counts[r] * _bytes_of(analysis.nodes[r].instruction)
    return read, reuse, written, flops


def _free_of_rhs(analysis, node: SymbolicNode, counts) -> int:
    """Elements of the dot's output tile per lhs element (``2*M*N*K = 2*|lhs tile|*N``)."""
    lhs = counts[node.operands[0]]
    return max(1, counts[node.index] // max(1, lhs)) if lhs else 0


def _minor_dim(analysis: SymbolicTiledFusion) -> int:
    root = analysis.nodes[analysis.roots[0]].instruction
    layout = root.shape.layout if isinstance(root.shape, ArrayShape) else None
    if layout is not None and layout.minor_to_major:
        return layout.minor_to_major[0]
    return len(analysis.output_dims) - 1


def is_coalesced(analysis: SymbolicTiledFusion, tile_sizes: Sequence[int]) -> bool:
    if not analysis.output_dims:
        return True
    k = _minor_dim(analysis)
    return tile_sizes[k] >= min(COALESCED_ELEMENTS, analysis.output_dims[k])


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
    read, reuse, written, flops = block_costs(analysis, tile_sizes)
    grid = tuple(-(-n // t) for n, t in zip(analysis.output_dims, tile_sizes))
    blocks = 1
    for g in grid:
        blocks *= g
    return TilingCandidate(tile_sizes, reduction_chunk, grid, blocks, read, reuse, written,
                           flops, is_coalesced(analysis, tile_sizes))


def _chunked(analysis, tile_sizes) -> TilingCandidate | RejectedTiling:
    extent = reduced_extent(analysis)
    chunk = min(4096, extent // 2)
    last: RejectedTiling | None = None
    while chunk >= 1:
        result = evaluate_candidate(analysis, tile_sizes, chunk)
        if isinstance(result, TilingCandidate):
            return result
        last = result
        chunk //= 2
    return last or RejectedTiling(tuple(tile_sizes), None, "no legal reduction chunk")


def _target(output_numel: int, target_elements: int = TARGET_TILE_ELEMENTS) -> int:
    per_sm = max(1, output_numel // NUM_SMS)
    target = 1 << max(0, per_sm.bit_length() - 1)
    return max(16, min(target_elements, target))


def _rank_key(c: TilingCandidate, target: int):
    numel = 1
    for t in c.tile_sizes:
        numel *= t
    return (not c.coalesced, c.reduction_chunk is not None,
            c.total_bytes_read + c.total_bytes_written,
            abs(log2(numel) - log2(target)), c.num_blocks, tuple(-t for t in reversed(c.tile_sizes)))


def explain_default(analysis: SymbolicTiledFusion, c: TilingCandidate, target: int,
                    best_traffic: bool) -> str:
    k = _minor_dim(analysis) if analysis.output_dims else 0
    parts = []
    if analysis.output_dims:
        n, t = analysis.output_dims[k], c.tile_sizes[k]
        if c.coalesced:
            how = "whole" if t == n else f"by {t} contiguous elements"
            parts.append(f"minor dim {k} (size {n}) tiled {how}, so loads and stores coalesce")
        else:
            parts.append(f"no legal tiling covers >= {COALESCED_ELEMENTS} contiguous elements"
                         f" of minor dim {k}")
    if c.reduction_chunk is None and reduced_extent(analysis):
        parts.append("reduced dims whole (persistent reduction)")
    elif c.reduction_chunk is not None:
        parts.append(f"reduced dims too large to keep whole: looped in chunks of"
                     f" {c.reduction_chunk}")
    parts.append(f"{c.total_bytes_read + c.total_bytes_written} bytes of total traffic"
                 + (" (the least of the coalesced tilings)" if best_traffic else ""))
    numel = 1
    for t in c.tile_sizes:
        numel *= t
    parts.append(f"{numel} elements per block (target {target}), {c.num_blocks} blocks")
    return "; ".join(parts)


def rank_candidates(analysis: SymbolicTiledFusion, target_elements: int = TARGET_TILE_ELEMENTS,
                    ) -> tuple[list[TilingCandidate], list[RejectedTiling]]:
    legal: list[TilingCandidate] = []
    rejected: list[RejectedTiling] = []
    for sizes in candidate_sizes(analysis.output_dims):
        result = evaluate_candidate(analysis, sizes)
        if isinstance(result, RejectedTiling) and "persistent limit" in result.reason:
            result = _chunked(analysis, sizes)
        (legal if isinstance(result, TilingCandidate) else rejected).append(result)
    numel = 1
    for n in analysis.output_dims:
        numel *= n
    target = _target(numel, target_elements)
    legal.sort(key=lambda c: _rank_key(c, target))
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
    numel = 1
    for n in analysis.output_dims:
        numel *= n
    target = _target(numel, target_elements)
    default, reason = None, "no legal tiling"
    if not_tileable:
        reason = "not tileable: " + not_tileable[0]
    elif legal:
        default = legal[0]
        best = min(c.total_bytes_read + c.total_bytes_written for c in legal if
                   c.coalesced == default.coalesced)
        reason = explain_default(analysis, default, target,
                                 best == default.total_bytes_read + default.total_bytes_written)
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
