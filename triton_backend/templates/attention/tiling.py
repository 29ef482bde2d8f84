"""Tiling of an attention kernel: ``BLOCK_M`` query rows per program, keys in ``BLOCK_N`` blocks.

The head dim (the first dot's contraction) and the value dim are held whole, padded to one
power of two ``BLOCK_D`` (at least 16, ``tl.dot``'s smallest fragment).  Blocks are powers of
two from 16 to 128; the default keeps the per-program tiles (q ``BM x BD``, k and v
``BN x BD``, scores ``BM x BN``, accumulator ``BM x BD``) small enough to stay in registers
at 4 warps (8 warps for the largest tiles and for exact f32 dots), which the PTX test pins
(no spills on sm_90 for the f32 and bf16 ``[4,8,512,64]`` attention).

>>> t = default_tiling(queries=512, keys=512, head_dim=64, value_dim=64, operand_bytes=4)
>>> t.tile_sizes, t.block_d, t.num_warps
((64, 32), 64, 8)
>>> default_tiling(16, 16, 8, 8, 4).tile_sizes
(16, 16)
"""
from __future__ import annotations

from dataclasses import dataclass

from fusion.errors import UnsupportedOpError

MIN_BLOCK = 16
MAX_BLOCK = 128


def _pow2_at_least(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())


def _clamp(extent: int, high: int) -> int:
    return min(max(_pow2_at_least(extent), MIN_BLOCK), high)


@dataclass(frozen=True)
class AttentionTiling:
    """Query block, key block, the padded head/value block and the launch options."""

    block_m: int
    block_n: int
    block_d: int
    num_warps: int = 4
    num_stages: int = 1

    @property
    def tile_sizes(self) -> tuple[int, int]:
        return (self.block_m, self.block_n)


def block_d_for(head_dim: int, value_dim: int) -> int:
    """One power of two holding both the head dim and the value dim (>= 16)."""
    return max(MIN_BLOCK, _pow2_at_least(head_dim), _pow2_at_least(value_dim))


def default_tiling(queries: int, keys: int, head_dim: int, value_dim: int,
                   operand_bytes: int, arch: int = 90,
                   computed_operands: bool = False, lean_scores: bool = False) -> AttentionTiling:
    """The forward kernel's default: on sm_90 16-bit operands take ``64 x 64`` blocks at 4
    warps and three stages, whatever the head dim, as measured on an H200
    (``bench/tile_sweep.py``, Triton 3.6): at ``[4,16,2048,128]`` 464 us against 908 us for
    :func:`register_tiling`'s ``64 x 32`` at 8 warps and two stages (276 against 514
    causal), and 17.4 us against 19.7 at two stages for causal ``[4,8,512,64]``.  ``128 x
    128`` at 8 warps and three stages was faster still at head dim 128 (394 and 259 us; at
    head dim 64 it tied or lost), and holds in registers where the scores are *lean*
    (``lean_scores``, ``attention.driver.lean_scores``: a one-pass kernel whose masked
    scores read nothing per (query, key) point but the scores, its mask a band open on one
    side: 209 and 240 registers on sm_90); a two-sided band (a sliding window) spilled 44
    bytes, a 4-warp ``128 x 64`` spilled everywhere, so the wide blocks are for lean kernels
    only.  Where the scores' operands are computed in the kernel (``computed_operands``: RoPE
    fused in front of the scores, as in the Llama block) at head dims past 64, every 4-warp
    tiling spills on sm_90, and so does every other target's kernel: those take
    :func:`register_tiling`.

    >>> default_tiling(2048, 2048, 128, 128, 2, 90)
    AttentionTiling(block_m=64, block_n=64, block_d=128, num_warps=4, num_stages=3)
    >>> default_tiling(2048, 2048, 128, 128, 2, 90, lean_scores=True)
    AttentionTiling(block_m=128, block_n=128, block_d=128, num_warps=8, num_stages=3)
    >>> default_tiling(2048, 2048, 128, 128, 2, 90, computed_operands=True)
    AttentionTiling(block_m=64, block_n=32, block_d=128, num_warps=8, num_stages=2)
    >>> default_tiling(2048, 2048, 128, 128, 2, 80)
    AttentionTiling(block_m=64, block_n=32, block_d=128, num_warps=8, num_stages=2)
    """
    block_d = block_d_for(head_dim, value_dim)
    if arch >= 90 and operand_bytes <= 2 and block_d > 64 and lean_scores \
            and not computed_operands:
        return AttentionTiling(_clamp(queries, 128), _clamp(keys, 128), block_d, 8, 3)
    if arch >= 90 and operand_bytes <= 2 and not (computed_operands and block_d > 64):
        return AttentionTiling(_clamp(queries, 64), _clamp(keys, 64), block_d, 4, 3)
    return register_tiling(queries, keys, head_dim, value_dim, operand_bytes, arch)


def register_tiling(queries: int, keys: int, head_dim: int, value_dim: int,
                    operand_bytes: int, arch: int = 90) -> AttentionTiling:
    """Blocks as large as the problem up to 64 query rows and 64 keys (32 keys for 4-byte
    operands or head dims past 64: the score tile and the k/v tiles share the registers).

    Exact f32 dots run on the FMA units with their operands in registers, so 4-byte operands
    are not software-pipelined (one stage): at two stages the f32[4,8,512,64] kernel spills
    on sm_90 at every block size tried, at one stage ``64 x 32`` does not.

    The attention backward's kernels, which hold more accumulators, take this rule on every
    target (``backward_driver``).

    >>> register_tiling(2048, 2048, 128, 128, 2, 90)
    AttentionTiling(block_m=64, block_n=32, block_d=128, num_warps=8, num_stages=2)
    """
    block_d = block_d_for(head_dim, value_dim)
    block_m = _clamp(queries, 64)
    block_n = _clamp(keys, 32 if operand_bytes >= 4 or block_d > 64 else 64)
    warps = 8 if block_m * block_d >= 64 * 128 else 4
    if (arch < 90 or operand_bytes >= 4) and block_m * block_n >= 64 * 32:
        # Without wgmma, sm_80's mma.sync fragments hold more per thread: at 4 warps the
        # f32 and bf16 [4,8,512,64] kernels spill; at 8 they do not.  Exact f32 dots hold
        # their FMA operands in registers on every target: on sm_90 the f32 [4,8,512,64]
        # kernel at 4 warps took 246 registers on Triton 3.9 and spilled 488 bytes on 3.6
        # (the H200's); at 8 warps 116 and 120 registers, no spills.
        warps = 8
    return AttentionTiling(block_m, block_n, block_d, warps, 1 if operand_bytes >= 4 else 2)


def interpreter_tiling(queries: int, keys: int, head_dim: int, value_dim: int,
                       operand_bytes: int) -> AttentionTiling:
    """The largest blocks (``MAX_BLOCK``) for the Triton interpreter, which pays per program
    and per key-loop step, not per register: the f32[4,8,512,64] kernel ran 256 programs of
    16 steps at the GPU's ``64 x 32``, 128 programs of at most 4 steps here.

    >>> interpreter_tiling(512, 512, 64, 64, 4).tile_sizes
    (128, 128)
    """
    base = default_tiling(queries, keys, head_dim, value_dim, operand_bytes)
    return AttentionTiling(_clamp(queries, MAX_BLOCK), _clamp(keys, MAX_BLOCK), base.block_d,
                           base.num_warps, base.num_stages)


def tiling_from(tile_sizes, queries: int, keys: int, head_dim: int, value_dim: int,
                operand_bytes: int, arch: int = 90,
                computed_operands: bool = False, lean_scores: bool = False) -> AttentionTiling:
    """The default tiling for ``sm_<arch>``, or ``(block_m, block_n)`` from the caller
    (checked; warps and stages those of the default for such blocks: the wide default's 8
    warps only with its own blocks)."""
    base = default_tiling(queries, keys, head_dim, value_dim, operand_bytes, arch,
                          computed_operands, lean_scores)
    if tile_sizes is None:
        return base
    if isinstance(tile_sizes, AttentionTiling):
        tiling = tile_sizes
    else:
        sizes = tuple(int(t) for t in tile_sizes)
        if len(sizes) != 2:
            raise UnsupportedOpError(f"attention tile sizes are (block_m, block_n), got {sizes}",
                                     where="attention tiling")
        if sizes != base.tile_sizes:
            base = default_tiling(queries, keys, head_dim, value_dim, operand_bytes, arch,
                                  computed_operands)
        tiling = AttentionTiling(sizes[0], sizes[1], base.block_d, base.num_warps,
                                 base.num_stages)
    for name, value in (("block_m", tiling.block_m), ("block_n", tiling.block_n)):
        if value < MIN_BLOCK or value > MAX_BLOCK or value & (value - 1):
            raise UnsupportedOpError(f"{name}={value} is not a power of two in "
                                     f"[{MIN_BLOCK}, {MAX_BLOCK}]", where="attention tiling")
    if tiling.block_d < block_d_for(head_dim, value_dim):
        raise UnsupportedOpError(f"block_d={tiling.block_d} does not hold head dim {head_dim} "
                                 f"and value dim {value_dim}", where="attention tiling")
    return tiling


__all__ = ["AttentionTiling", "block_d_for", "default_tiling", "interpreter_tiling",
           "tiling_from"]
