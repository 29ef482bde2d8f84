"""The iteration space of one kernel: output tile sizes, reduction axes, grid.

Each program computes one tile of the (common) output shape; tile sizes are powers of two.
Every reduce reachable from the root gets one extra kernel axis per reduced dim, holding the
whole dim padded to a power of two.  ``default_tile_sizes`` is the one place choosing tiles
(swap it for ``tiling.tiling_candidates`` when that lands).

>>> default_tile_sizes((5, 300), budget=256)
(1, 256)
>>> default_tile_sizes((3, 5), budget=1024)
(4, 8)
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from fusion.errors import UnsupportedOpError
from fusion.hlo_module import HloComputation
from fusion.shape import ArrayShape

#: Elements per program: output tile times the padded reduced dims of all reduces.
DEFAULT_TILE_BUDGET = 1024
#: Largest padded reduction (elements) a persistent reduction keeps in registers.
MAX_PERSISTENT_REDUCTION = 1 << 14


def next_power_of_two(n: int) -> int:
    """The smallest power of two at least ``n``.

    >>> [next_power_of_two(n) for n in (1, 3, 8, 9)]
    [1, 4, 8, 16]
    """
    return 1 << max(0, (n - 1).bit_length())


def default_tile_sizes(dims: tuple[int, ...], budget: int = DEFAULT_TILE_BUDGET) -> tuple[int, ...]:
    """Power-of-two tile sizes filling ``budget`` elements from the minor-most dim outwards."""
    sizes = []
    for size in reversed(dims):
        block = min(next_power_of_two(size), max(1, budget))
        sizes.append(block)
        budget //= block
    return tuple(reversed(sizes))


@dataclass(frozen=True)
class KernelPlan:
    """Static shape of a kernel: axes ``[output dims..., reduction axes...]`` and the grid."""

    output_dims: tuple[int, ...]
    tile_sizes: tuple[int, ...]
    axis_blocks: tuple[int, ...]
    reduce_axes: tuple[tuple[str, tuple[int, ...]], ...]
    tiles_per_dim: tuple[int, ...]

    @property
    def grid(self) -> tuple[int]:
        return (math.prod(self.tiles_per_dim),)


def reachable_instructions(computation: HloComputation) -> list[str]:
    """Names reachable from the root, in post order (operands first)."""
    order, seen = [], set()
    stack = [(computation.root_name, False)]
    while stack:
        name, expanded = stack.pop()
        if expanded:
            order.append(name)
            continue
        if name in seen:
            continue
        seen.add(name)
        stack.append((name, True))
        for operand in reversed(computation.instruction(name).operands):
            if operand not in seen:
                stack.append((operand, False))
    return order


def plan_kernel(computation: HloComputation, output_dims: tuple[int, ...],
                tile_sizes: tuple[int, ...] | None = None) -> KernelPlan:
    """The plan for tiles of ``output_dims`` (a rank-0 output is iterated as ``(1,)``)."""
    space = output_dims or (1,)
    reduce_axes, reduce_blocks = [], []
    for name in reachable_instructions(computation):
        instr = computation.instruction(name)
        if instr.opcode != "reduce":
            continue
        operand = computation.instruction(instr.operands[0]).shape
        assert isinstance(operand, ArrayShape)
        blocks = [next_power_of_two(operand.dims[k]) for k in instr.attr("dimensions")]
        first = len(space) + len(reduce_blocks)
        reduce_axes.append((name, tuple(range(first, first + len(blocks)))))
        reduce_blocks.extend(blocks)
    reduction = math.prod(reduce_blocks)
    if reduction > MAX_PERSISTENT_REDUCTION:
        raise UnsupportedOpError(
            f"reductions over {reduction} padded elements exceed the persistent limit "
            f"{MAX_PERSISTENT_REDUCTION} (looped reductions are not emitted yet)",
            where=computation.name)
    if tile_sizes is None:
        tile_sizes = default_tile_sizes(space, max(1, DEFAULT_TILE_BUDGET // reduction))
    tile_sizes = tuple(tile_sizes)
    if len(tile_sizes) != len(space) or any(t < 1 or t & (t - 1) for t in tile_sizes):
        raise UnsupportedOpError(f"tile sizes {list(tile_sizes)} must be {len(space)} powers of two",
                                 where=computation.name)
    tiles = tuple(-(-size // tile) for size, tile in zip(space, tile_sizes))
    return KernelPlan(space, tile_sizes, tile_sizes + tuple(reduce_blocks), tuple(reduce_axes), tiles)
