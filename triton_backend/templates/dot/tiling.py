"""Tiling parameters of a dot kernel: output tiles of M and N, a K tile looped inside the kernel.

This follows XLA's tiling specification for dots: the batch dims go on the grid (one program
per batch element and output tile), the free dims of each operand are flattened into M (lhs)
and N (rhs), and the contracting dims into K, which is a tiling parameter of its own (the
kernel loops over K in steps of ``block_k``).  A tiling is legal for ``tl.dot`` when

* every block is a power of two and at least 16 (the MMA fragment size; smaller dims are
  padded to 16 and masked), M and N blocks at most 256, K block at most 256;
* the software pipeline fits shared memory: ``(BM*BK + BK*BN) * bytes * num_stages`` is at
  most 227 KiB on sm_90 and 163 KiB on sm_80 (the per-block limits).

**Split-K.**  When the output tiles cannot fill the device's SMs, K is cut into ``split_k``
slices of whole K steps and each program adds one slice of one tile; the partial sums meet in
a workspace and the last program of a tile adds them in slice order and runs the epilogue
(``device_lib.ordered_sums``), so results are deterministic.  :func:`default_split_k` states
the rule.

:func:`candidate_tilings` lists the legal tilings an autotuner may try; :func:`default_tiling`
picks one without measuring.  :func:`dot_flops` is the work count the cost model uses.

>>> p = DotProblem(batch=2, m=20, n=36, k=28, operand_bytes=4)
>>> t = default_tiling(p, arch=90)
>>> (t.block_m, t.block_n, t.block_k), check_tiling(t, p, 90)
((32, 64, 32), None)
>>> dot_flops(p)
80640
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace

from fusion.errors import UnsupportedOpError
from tiling.policy.devices import DEVICES
from tiling.policy.limits import (
    DOT_MIN_BLOCK,
    MAX_GRID_X,
    MAX_GRID_YZ,
    dot_default_block,
)

#: Shared memory one block may use, per compute capability (bytes).
SHARED_MEMORY_PER_BLOCK = {80: 163 * 1024, 86: 99 * 1024, 89: 99 * 1024, 90: 227 * 1024}

MIN_BLOCK = DOT_MIN_BLOCK
MAX_BLOCK_MN = 256
MAX_BLOCK_K = 256
#: The most ``[BLOCK_M, BLOCK_K, BLOCK_N]`` products a multiply-add dot's K step forms.
MULTIPLY_ADD_TILE = 64 * 16 * 64

#: SMs of the smallest device of each compute capability in the device table (sm_80: A100's
#: 108, sm_90: H100's 132): the programs a launch needs to keep every SM busy.
SM_COUNT = {arch: min(d.sm_count for d in DEVICES.values() if d.compute_capability == arch)
            for arch in {d.compute_capability for d in DEVICES.values()}}

#: Split-K's rule (:func:`default_split_k`): each K slice keeps at least this many K steps, so
#: the software pipeline (3 or 4 stages) still reaches its steady state in every program.
MIN_K_STEPS_PER_SPLIT = 4
#: At most this many slices: past it the workspace traffic (``split`` f32 partial tiles written
#: and read per output tile) outgrows what the extra programs win.
MAX_SPLIT_K = 16


@dataclass(frozen=True)
class DotProblem:
    """The sizes of a dot after flattening: ``batch`` x (M x K) @ (K x N)."""

    batch: int
    m: int
    n: int
    k: int
    operand_bytes: int
    #: The prologue computes transcendental ops on an operand tile inside the K loop (a GELU
    #: feeding the MLP's second matmul): its temporaries share the registers with the
    #: accumulator, so the K tile is kept at 32.
    expensive_prologue: bool = False
    #: The bytes of each product when ``tl.dot`` takes no such operands (integers wider than
    #: 8 bits) and the kernel sums the ``[BLOCK_M, BLOCK_K, BLOCK_N]`` products itself, so its
    #: tiles stay small (:data:`MULTIPLY_ADD_TILE`) and K is not split; 0 for ``tl.dot``.
    multiply_add: int = 0


@dataclass(frozen=True)
class DotTiling:
    """One choice of blocks, program grouping and launch options for a dot kernel."""

    block_m: int
    block_n: int
    block_k: int
    group_m: int = 8
    num_warps: int = 4
    num_stages: int = 3
    #: K slices, each added by its own program (1: no split-K).
    split_k: int = 1

    @property
    def tile_sizes(self) -> tuple[int, ...]:
        """``(BM, BN, BK)``, and ``split_k`` fourth when K is split (what the tuning database
        stores and :func:`tiling_from` reads back)."""
        blocks = (self.block_m, self.block_n, self.block_k)
        return blocks if self.split_k == 1 else (*blocks, self.split_k)


def dot_flops(problem: DotProblem) -> int:
    """Floating-point (or integer) operations of the dot: ``2 * M * N * K * batch``.

    >>> dot_flops(DotProblem(1, 128, 128, 64, 2))
    2097152
    """
    return 2 * problem.m * problem.n * problem.k * problem.batch


def k_steps(tiling: DotTiling, problem: DotProblem) -> int:
    """The K loop's steps over the whole of K: ``ceil(K / block_k)``.

    >>> k_steps(DotTiling(16, 16, 64), DotProblem(1, 16, 16, 1000, 2))
    16
    """
    return max(1, math.ceil(problem.k / tiling.block_k))


def k_slice(tiling: DotTiling, problem: DotProblem) -> int:
    """The K extent of one split-K slice, whole K steps: ``ceil(steps / split_k) * block_k``
    (all of K, rounded up to the step, without split-K).

    >>> k_slice(DotTiling(16, 16, 64, split_k=3), DotProblem(1, 16, 16, 1000, 2))
    384
    """
    return math.ceil(k_steps(tiling, problem) / tiling.split_k) * tiling.block_k


def default_split_k(problem: DotProblem, block_m: int, block_n: int, block_k: int,
                    arch: int = 90) -> int:
    """Split-K's rule: split K only when the output tiles cannot fill the SMs and K is long.

    With ``tiles`` programs (M tiles x N tiles x batch) on ``SM_COUNT[arch]`` SMs, the split
    is the largest ``s`` with ``tiles * s`` programs still in one wave (``s <= SMs // tiles``),
    every slice at least ``MIN_K_STEPS_PER_SPLIT`` K steps long, and ``s <= MAX_SPLIT_K``;
    1 when that leaves less than 2.  The Llama block's 512x1024 dots (32 tiles of 128x128,
    K = 1024 in 16 steps of 64) get 4 slices, 128 programs on 132 SMs:

    >>> default_split_k(DotProblem(1, 512, 1024, 1024, 2), 128, 128, 64, 90)
    4
    >>> default_split_k(DotProblem(1, 4096, 4096, 4096, 2), 128, 128, 64, 90)
    1
    """
    tiles = (math.ceil(problem.m / block_m) * math.ceil(problem.n / block_n)
             * max(problem.batch, 1))
    steps = max(1, math.ceil(problem.k / block_k))
    split = min(SM_COUNT.get(arch, SM_COUNT[90]) // tiles, steps // MIN_K_STEPS_PER_SPLIT,
                MAX_SPLIT_K)
    return split if split >= 2 else 1


def shared_memory_bytes(tiling: DotTiling, operand_bytes: int) -> int:
    """Shared memory of the pipelined operand tiles: ``(BM*BK + BK*BN) * bytes * stages``.

    >>> shared_memory_bytes(DotTiling(128, 128, 64, num_stages=4), 2)
    131072
    """
    per_stage = tiling.block_m * tiling.block_k + tiling.block_k * tiling.block_n
    return per_stage * operand_bytes * tiling.num_stages


def _pow2_at_least(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())


def _smem_limit(arch: int) -> int:
    if arch not in SHARED_MEMORY_PER_BLOCK:
        raise UnsupportedOpError(f"unknown target sm_{arch}; expected one of "
                                 f"{sorted(SHARED_MEMORY_PER_BLOCK)}", where=f"sm_{arch}")
    return SHARED_MEMORY_PER_BLOCK[arch]


def tiling_problems(tiling: DotTiling, problem: DotProblem, arch: int) -> list[str]:
    """Why ``tiling`` is illegal for ``problem`` on ``sm_<arch>`` (empty: legal).

    >>> tiling_problems(DotTiling(8, 64, 24), DotProblem(1, 8, 8, 8, 4), 80)
    ['block_m=8 is not a power of two >= 16', 'block_k=24 is not a power of two >= 16']
    """
    reasons = []
    for name, value, high in (("block_m", tiling.block_m, MAX_BLOCK_MN),
                              ("block_n", tiling.block_n, MAX_BLOCK_MN),
                              ("block_k", tiling.block_k, MAX_BLOCK_K)):
        if value < MIN_BLOCK or value & (value - 1):
            reasons.append(f"{name}={value} is not a power of two >= {MIN_BLOCK}")
        elif value > high:
            reasons.append(f"{name}={value} exceeds {high}")
    if tiling.group_m < 1:
        reasons.append(f"group_m={tiling.group_m} must be >= 1")
    if tiling.num_stages < 1 or tiling.num_warps not in (1, 2, 4, 8, 16):
        reasons.append(f"num_stages={tiling.num_stages}/num_warps={tiling.num_warps} invalid")
    if not 1 <= tiling.split_k <= MAX_SPLIT_K:
        reasons.append(f"split_k={tiling.split_k} is not in 1..{MAX_SPLIT_K}")
    elif not reasons and tiling.split_k > k_steps(tiling, problem):
        reasons.append(f"split_k={tiling.split_k} exceeds the {k_steps(tiling, problem)} K steps "
                       f"of block_k={tiling.block_k}")
    elif tiling.split_k > 1 and _partials(tiling, problem) >= 2 ** 31:
        reasons.append(f"split_k={tiling.split_k}'s {_partials(tiling, problem)} partial sums "
                       "exceed the workspace's 32-bit offsets")
    products = tiling.block_m * tiling.block_k * tiling.block_n
    if problem.multiply_add and (products > MULTIPLY_ADD_TILE or tiling.split_k > 1):
        reasons.append(f"a dot summing its own products takes at most {MULTIPLY_ADD_TILE} "
                       f"products per K step ({products} asked) and no split of K")
    if not reasons:
        used, limit = shared_memory_bytes(tiling, problem.operand_bytes), _smem_limit(arch)
        if used > limit:
            reasons.append(f"shared memory {used} bytes for {tiling.num_stages} stages exceeds "
                           f"sm_{arch}'s {limit} bytes per block")
    return reasons


def _partials(tiling: DotTiling, problem: DotProblem) -> int:
    tiles = math.ceil(problem.m / tiling.block_m) * math.ceil(problem.n / tiling.block_n)
    return tiles * problem.batch * tiling.split_k * tiling.block_m * tiling.block_n


def check_tiling(tiling: DotTiling, problem: DotProblem, arch: int) -> None:
    """Raise ``UnsupportedOpError`` listing every reason ``tiling`` is illegal."""
    reasons = tiling_problems(tiling, problem, arch)
    if reasons:
        raise UnsupportedOpError(f"illegal dot tiling {tiling}: " + "; ".join(reasons),
                                 where="dot tiling")


def _tiles(problem: DotProblem, block_m: int, block_n: int) -> int:
    return math.ceil(problem.m / block_m) * math.ceil(problem.n / block_n) * max(problem.batch, 1)


def _warps_for(block_m: int, block_n: int) -> int:
    return 8 if block_m * block_n >= 128 * 128 else 4


def _fit_stages(tiling: DotTiling, problem: DotProblem, arch: int) -> DotTiling | None:
    for stages in range(tiling.num_stages, 0, -1):
        candidate = replace(tiling, num_stages=stages)
        if not tiling_problems(candidate, problem, arch):
            return candidate
    return None


def default_tiling(problem: DotProblem, arch: int = 90) -> DotTiling:
    """A tiling chosen without measuring: tiles as large as the problem up to 128x128x64
    (``tiling.policy.limits.DOT_MAX_BLOCK_MN``).

    Wide operands (4-byte) take a 32-deep K tile so three pipeline stages still fit; so does
    a dot whose prologue computes transcendental ops (at 64 the sm_80 kernel spills).  K is
    split by :func:`default_split_k`'s rule.

    On sm_90, when ``128 x 128`` tiles of 16-bit operands cannot fill the SMs, ``BLOCK_M``
    halves to 64 (4 warps) before K is split (f32's FMA loops were not measured): on an H200 (``bench/tile_sweep.py``, Triton 3.6) a 1024^3 bf16
    dot took 19.7 us as 128 ``64 x 128`` tiles against 46.1 us as 64 ``128 x 128`` tiles
    with K split in 2, and GPT-2's ``[2048,3072] x [3072,768]`` MLP dot 25.5 us against 33.6.

    >>> default_tiling(DotProblem(1, 4096, 4096, 4096, 2), 80)
    DotTiling(block_m=128, block_n=128, block_k=64, group_m=8, num_warps=8, num_stages=3, split_k=1)
    >>> default_tiling(DotProblem(1, 1024, 1024, 1024, 2), 90)
    DotTiling(block_m=64, block_n=128, block_k=64, group_m=8, num_warps=4, num_stages=4, split_k=1)
    """
    if problem.multiply_add:
        # 32x32x16: 16384 products, 128 registers a thread at 4 warps (32-bit; 64-bit
        # values take two each, so M halves: 32x32 spilled 544 registers on sm_80)
        wide = 16 if problem.multiply_add >= 8 else 32
        return DotTiling(min(dot_default_block(problem.m), wide),
                         min(dot_default_block(problem.n), 32), MIN_BLOCK, 8, 4, 2)
    # The fusion pass reads the same default to count a prologue's recomputation.
    block_m, block_n = dot_default_block(problem.m), dot_default_block(problem.n)
    if arch >= 90 and problem.operand_bytes <= 2 and block_m == 128 and block_n == 128 and \
            _tiles(problem, block_m, block_n) < SM_COUNT.get(arch, SM_COUNT[90]):
        block_m = 64
    k_cap = 32 if problem.operand_bytes >= 4 or problem.expensive_prologue else 64
    block_k = min(max(_pow2_at_least(problem.k), MIN_BLOCK), k_cap)
    # sm_90: 128x128 tiles of 16-bit operands at three stages were 2-14% faster than at four
    # on all five H200 dots that fill the SMs (bench/tile_sweep.py); 64x128 ones were
    # measured at four; f32's FMA loops were not measured.
    wide = problem.operand_bytes <= 2 and block_m * block_n >= 128 * 128
    stages = (3 if wide else 4) if arch >= 90 else 3
    split = default_split_k(problem, block_m, block_n, block_k, arch)
    chosen = _fit_stages(DotTiling(block_m, block_n, block_k, 8, _warps_for(block_m, block_n),
                                   stages, split), problem, arch)
    assert chosen is not None  # 128x128x64 at 4 bytes and 1 stage is 64 KiB: always fits
    return chosen


def candidate_tilings(problem: DotProblem, arch: int = 90) -> tuple[DotTiling, ...]:
    """Legal tilings worth trying for ``problem`` (the default first), for autotuning.

    Blocks larger than the padded problem are left out (they only add masked work).  Each
    block shape whose tiles leave SMs idle comes also with K split in 2, 4, 8 and 16 (the
    legal ones: at least one K step per slice).

    >>> ts = candidate_tilings(DotProblem(1, 20, 36, 28, 4), 90)
    >>> ts[0] == default_tiling(DotProblem(1, 20, 36, 28, 4), 90), len(ts) > 1
    (True, True)
    >>> all(not tiling_problems(t, DotProblem(1, 20, 36, 28, 4), 90) for t in ts)
    True
    """
    def useful(limit: int, options):
        cap = max(_pow2_at_least(limit), MIN_BLOCK)
        return [b for b in options if b <= cap]

    default = default_tiling(problem, arch)
    found = [default]
    for block_m in useful(problem.m, (16, 32, 64, 128, 256)):
        for block_n in useful(problem.n, (16, 32, 64, 128, 256)):
            for block_k in useful(problem.k, (16, 32, 64, 128)):
                for stages in (2, 3, 4, 5):
                    for split in _splits_worth_trying(problem, block_m, block_n, arch):
                        t = DotTiling(block_m, block_n, block_k, 8, _warps_for(block_m, block_n),
                                      stages, split)
                        if t not in found and not tiling_problems(t, problem, arch):
                            found.append(t)
    return tuple(found)


def _splits_worth_trying(problem: DotProblem, block_m: int, block_n: int, arch: int):
    tiles = math.ceil(problem.m / block_m) * math.ceil(problem.n / block_n) * problem.batch
    if tiles >= SM_COUNT.get(arch, SM_COUNT[90]):
        return (1,)
    return (1, 2, 4, 8, 16)


def batch_on_grid_x(problem: DotProblem) -> bool:
    """Whether the batch is folded into grid x (program ``b * tiles + t``) instead of grid y.

    CUDA allows at most 65535 blocks on grid y, so a larger batch shares grid x with the tiles.

    >>> batch_on_grid_x(DotProblem(65535, 16, 16, 16, 4)), batch_on_grid_x(DotProblem(65536, 16, 16, 16, 4))
    (False, True)
    """
    return problem.batch > MAX_GRID_YZ


def grid_size(tiling: DotTiling, problem: DotProblem) -> tuple[int, int]:
    """The launch grid: (M tiles * N tiles * split_k, batch), or (that * batch, 1) past grid
    y's limit.

    >>> grid_size(DotTiling(32, 64, 32), DotProblem(3, 20, 130, 28, 4))
    (3, 3)
    >>> grid_size(DotTiling(16, 16, 16), DotProblem(70000, 16, 32, 16, 4))
    (140000, 1)
    >>> grid_size(DotTiling(32, 64, 32, split_k=2), DotProblem(3, 20, 130, 128, 4))
    (6, 3)
    """
    tiles = (math.ceil(problem.m / tiling.block_m) * math.ceil(problem.n / tiling.block_n)
             * tiling.split_k)
    if not batch_on_grid_x(problem):
        grid = (tiles, problem.batch)
    else:
        grid = (tiles * problem.batch, 1)
    if grid[0] > MAX_GRID_X:
        raise UnsupportedOpError(
            f"dot grid of {tiles} tiles (x split_k) x {problem.batch} batch elements = {tiles * problem.batch} "
            f"blocks exceeds CUDA's grid x limit {MAX_GRID_X}; use larger block_m/block_n",
            where="dot tiling")
    return grid


def interpreter_tiling(problem: DotProblem, arch: int = 90) -> DotTiling:
    """The largest legal tiles for the Triton interpreter, which pays per program and per K
    step, not per register: up to 256x256 and the deepest K tile that fits one stage (the
    GPT-2 block's 2048x2304x768 dot ran 288 programs of 12 steps at 128x128x64, here 72 of 6).

    >>> interpreter_tiling(DotProblem(1, 2048, 2304, 768, 2)).tile_sizes
    (256, 256, 128)
    """
    cap = 64 if problem.multiply_add else MAX_BLOCK_MN  # 64x64x16: MULTIPLY_ADD_TILE
    block_m = min(max(_pow2_at_least(problem.m), MIN_BLOCK), cap)
    block_n = min(max(_pow2_at_least(problem.n), MIN_BLOCK), cap)
    if problem.multiply_add:
        return DotTiling(block_m, block_n, MIN_BLOCK, 8, _warps_for(block_m, block_n), 1)
    k = min(max(_pow2_at_least(problem.k), MIN_BLOCK), MAX_BLOCK_K)
    while k >= MIN_BLOCK:
        tiling = DotTiling(block_m, block_n, k, 8, _warps_for(block_m, block_n), 1)
        if not tiling_problems(tiling, problem, arch):  # one stage of shared memory fits
            return tiling
        k //= 2
    return default_tiling(problem, arch)


def tiling_from(tile_sizes, problem: DotProblem, arch: int) -> DotTiling:
    """A ``DotTiling`` from a user's ``tile_sizes``: a DotTiling, (BM, BN, BK), (BM, BN, BK,
    SPLIT_K) or a mapping of fields.  Explicit sizes that leave ``split_k`` out mean no split
    (the rule of :func:`default_split_k` applies only to the default tiling).

    >>> tiling_from((32, 32, 16, 3), DotProblem(1, 40, 40, 100, 4), 90).split_k
    3
    >>> tiling_from({"block_k": 16}, DotProblem(1, 40, 40, 100, 4), 90).split_k
    1
    """
    if tile_sizes is None:
        return default_tiling(problem, arch)
    if isinstance(tile_sizes, DotTiling):
        tiling = tile_sizes
    elif isinstance(tile_sizes, dict):
        base = replace(default_tiling(problem, arch), split_k=1)
        fields = {**base.__dict__, **tile_sizes}
        unknown = set(tile_sizes) - set(base.__dict__)
        if unknown:
            raise UnsupportedOpError(f"unknown dot tiling keys {sorted(unknown)}", where="dot tiling")
        tiling = DotTiling(**fields)
    else:
        sizes = tuple(tile_sizes)
        if len(sizes) not in (3, 4):
            raise UnsupportedOpError(f"dot tile sizes must be (block_m, block_n, block_k) or "
                                     f"(block_m, block_n, block_k, split_k), got {sizes}",
                                     where="dot tiling")
        base = default_tiling(problem, arch)
        tiling = DotTiling(*sizes[:3], base.group_m, _warps_for(sizes[0], sizes[1]),
                           base.num_stages, sizes[3] if len(sizes) == 4 else 1)
        tiling = _fit_stages(tiling, problem, arch) or tiling
    check_tiling(tiling, problem, arch)
    return tiling
