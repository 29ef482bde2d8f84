"""What one block of a tiling costs: bytes read and written, flops, and whether it coalesces.

Per block (the first block, a full one): bytes read without reuse (every distinct parameter
tile), with reuse (a parameter read through several maps counts the union of its tiles once),
bytes written and flops.  A parameter that fits in L2 is fetched from DRAM once and its
re-reads by other blocks hit L2 (``dram_bytes_read``).

Coalesced: every access of a block, the output tiles written AND the parameter tiles read,
runs contiguously in memory (along its buffer's ``minor_to_major``) over at least
``COALESCED_BYTES`` (128: a warp's whole cache lines; 32 f32, 64 bf16) or the whole buffer,
except accesses moving at most ``UNCOALESCED_TOLERANCE`` of the block's bytes (a row
reduction's output, a broadcast scale).

>>> from fusion.text.parser import parse_hlo
>>> from tiling.symbolic.tiled_fusion import analyze_fusion_tiling
>>> m = parse_hlo('''HloModule m
... f {
...   p0 = f32[64,512] parameter(0)
...   ROOT e = f32[64,512] exponential(p0)
... }
... ENTRY main {
...   x = f32[64,512] parameter(0)
...   ROOT r = f32[64,512] fusion(x), kind=kLoop, calls=f
... }''')
>>> a = analyze_fusion_tiling(m, m.entry.root)
>>> block_costs(a, (1, 128)), is_coalesced(a, (1, 128))
((512, 512, 512, 128), True)
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from math import gcd
from typing import Sequence

from fusion.ir.element_types import ELEMENT_TYPES
from fusion.ir.hlo_module import HloInstruction
from fusion.opcodes import traits
from fusion.ir.shape import ArrayShape
from tiling.policy.legality import node_sizes
from tiling.policy.limits import COALESCED_BYTES, L2_RESIDENT_BYTES, UNCOALESCED_TOLERANCE
from tiling.symbolic.symbolic_tile import SymbolicTile
from tiling.symbolic.tiled_fusion import (
    SymbolicNode,
    SymbolicTiledFusion,
    leaf_dims,
    next_power_of_two,
)


def element_bytes(instr: HloInstruction) -> int:
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


@dataclass(frozen=True)
class _BlockPlan:
    """What the costs of any tiling of one analysis need, worked out once: the nodes grouped
    by (tile, dims) -- a block's box depends on nothing else, so an elementwise body of
    hundreds of nodes is one group -- and the nodes that read, write or compute."""

    groups: tuple[tuple[SymbolicNode, tuple[int, ...]], ...]
    group_of: tuple[int, ...]  # per node index
    sizes: tuple[int, ...]  # bytes per element, per node index
    parameters: tuple[tuple[int, str], ...]  # (node index, parameter name)
    flops: tuple[tuple[str, int, int], ...]  # (kind, node index, operand node index)


def _plan(analysis: SymbolicTiledFusion) -> _BlockPlan:
    hit = analysis.memo.get("costs.plan")
    if hit is not None:
        return hit
    groups: dict[tuple[int, tuple[int, ...]], int] = {}
    reps: list[tuple[SymbolicNode, tuple[int, ...]]] = []
    group_of, sizes, parameters, flops = [], [], [], []
    for node in analysis.nodes:
        instr = node.instruction
        dims = leaf_dims(instr) or ()
        key = (id(node.tile), dims)
        if key not in groups:
            groups[key] = len(reps)
            reps.append((node, dims))
        group_of.append(groups[key])
        sizes.append(element_bytes(instr))
        if instr.opcode == "parameter":
            parameters.append((node.index, instr.name))
        elif traits(instr.opcode).elementwise and not traits(instr.opcode).flop_free:
            flops.append(("elementwise", node.index, node.index))
        elif traits(instr.opcode).reduction and node.operands:
            flops.append(("reduce", node.index, node.operands[0]))
        elif instr.opcode == "dot" and node.operands:
            flops.append(("dot", node.index, node.operands[0]))
    plan = _BlockPlan(tuple(reps), tuple(group_of), tuple(sizes), tuple(parameters),
                      tuple(flops))
    analysis.memo["costs.plan"] = plan
    return plan


def _group_axes(analysis: SymbolicTiledFusion, tile_sizes: tuple[int, ...]) -> list[list[range]]:
    """Per group of ``_plan``, the first block's box at ``tile_sizes`` (shared by the costs
    and the coalescing check of one tiling)."""
    key = ("costs.axes", tile_sizes)
    hit = analysis.memo.get(key)
    if hit is None:
        hit = analysis.memo[key] = [_block0_axes(node.tile, tile_sizes, dims)
                                    for node, dims in _plan(analysis).groups]
    return hit


def block_costs_by_parameter(analysis: SymbolicTiledFusion, tile_sizes: Sequence[int]):
    """``(bytes read, {parameter: bytes read with reuse}, bytes written, flops)`` of the
    first block."""
    plan = _plan(analysis)
    axes = _group_axes(analysis, tuple(tile_sizes))
    group_counts = [_count(a) for a in axes]
    counts = [group_counts[g] for g in plan.group_of]
    per_param: dict[str, list[list[range]]] = {}
    param_bytes: dict[str, int] = {}
    read = written = flops = 0
    for index, name in plan.parameters:
        per_param.setdefault(name, []).append(axes[plan.group_of[index]])
        param_bytes[name] = plan.sizes[index]
        read += counts[index] * plan.sizes[index]
    for kind, index, operand in plan.flops:
        if kind == "elementwise":
            flops += counts[index]
        elif kind == "reduce":
            flops += counts[operand]
        else:
            flops += 2 * counts[operand] * _free_of_rhs(analysis, analysis.nodes[index], counts)
    reuse = {name: _union_count(boxes) * param_bytes[name] for name, boxes in per_param.items()}
    for r in analysis.roots:
        written += counts[r] * plan.sizes[r]
    return read, reuse, written, flops


def block_costs(analysis: SymbolicTiledFusion, tile_sizes: Sequence[int]) -> tuple[int, int, int, int]:
    """``(bytes read, bytes read with reuse, bytes written, flops)`` of the first block."""
    read, reuse, written, flops = block_costs_by_parameter(analysis, tile_sizes)
    return read, sum(reuse.values()), written, flops


def dram_bytes_read(analysis: SymbolicTiledFusion, reuse: dict[str, int], num_blocks: int,
                    resident_bytes: int = L2_RESIDENT_BYTES) -> int:
    """Bytes all ``num_blocks`` blocks read from DRAM, given each parameter's bytes read by
    one block (``reuse``): a parameter whose buffer fits ``resident_bytes`` (by default a
    quarter of the default device's L2) is fetched from DRAM once, its re-reads by other
    blocks hit L2; a larger one every time.

    >>> from fusion.text.parser import parse_hlo
    >>> from tiling.symbolic.tiled_fusion import analyze_fusion_tiling
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
        buffer = element_bytes(instr)
        for n in leaf_dims(instr) or ():
            buffer *= n
        reads = per_block * num_blocks
        total += min(reads, buffer) if buffer <= resident_bytes else reads
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
    plan = _plan(analysis)
    group_axes = _group_axes(analysis, tuple(tile_sizes))
    for node in analysis.nodes:
        instr = node.instruction
        if instr.opcode != "parameter" and node.index not in roots:
            continue
        if not isinstance(node.tile, SymbolicTile):
            continue
        dims = plan.groups[plan.group_of[node.index]][1]
        size = plan.sizes[node.index]
        axes = group_axes[plan.group_of[node.index]]
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
    for node in analysis.distinct_tiles:
        if isinstance(node.tile, SymbolicTile):
            padded = 1
            for size in node_sizes(node.tile, tile_sizes, reduction_chunk):
                padded *= next_power_of_two(size)
            largest = max(largest, padded)
    return largest


def narrowest_bytes(analysis: SymbolicTiledFusion) -> int:
    sizes = [element_bytes(p) for p in analysis.computation.parameters if leaf_dims(p)]
    sizes += [element_bytes(analysis.nodes[r].instruction) for r in analysis.roots]
    return min((b for b in sizes if b), default=4)


__all__ = [
    "block_costs", "block_costs_by_parameter", "block_elements", "contiguous_run",
    "dram_bytes_read", "element_bytes", "is_coalesced", "narrowest_bytes", "uncoalesced_fraction",
]
