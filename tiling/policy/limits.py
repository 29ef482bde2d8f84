"""Every limit and constant of the tiling choice, once.

Hardware limits (Triton's, CUDA's) bound what may run; the targets and tolerances steer which
legal tiling is preferred.  The device-dependent numbers (SMs, L2) come from the device table
(``tiling.policy.devices``); ``DEFAULT_DEVICE`` is the H100 SXM.

>>> MAX_PERSISTENT_REDUCTION, TARGET_TILE_ELEMENTS, DEFAULT_DEVICE.sm_count
(16384, 1024, 132)
>>> l2_resident_bytes(DEFAULT_DEVICE) == 50 * 2**20 // 4
True
"""
from __future__ import annotations

from collections.abc import Sequence

from tiling.policy.devices import DeviceSpec, device_spec

# -- What Triton and CUDA can run ---------------------------------------------------------
#: Triton's largest tensor (elements, after padding every dim to a power of two).
MAX_TILE_NUMEL = 1 << 20
#: CUDA's grid limits: blocks are flattened onto x; y and z hold at most this many.
MAX_GRID_X = 2**31 - 1
MAX_GRID_YZ = 65535


def grid_limit_problem(grid: Sequence[int]) -> str | None:
    """Why CUDA cannot launch ``grid`` (programs per axis x, y, z), or None when it can.

    >>> grid_limit_problem((2**52,))
    "a grid of 4503599627370496 programs on x exceeds CUDA's grid x limit 2147483647"
    >>> grid_limit_problem((8, 65536)), grid_limit_problem((2**31 - 1, 65535, 65535))
    ("a grid of 65536 programs on y exceeds CUDA's grid y limit 65535", None)
    """
    if len(grid) > 3:
        return f"a grid of {len(grid)} dimensions ({tuple(grid)}); CUDA launches at most 3"
    for axis, (programs, limit) in enumerate(zip(grid, (MAX_GRID_X, MAX_GRID_YZ, MAX_GRID_YZ))):
        if programs > limit:
            name = "xyz"[axis]
            return (f"a grid of {programs} programs on {name} exceeds CUDA's grid {name} "
                    f"limit {limit}")
    return None

# -- Reductions ---------------------------------------------------------------------------
#: Largest padded reduced extent (elements) a persistent reduction keeps whole in registers;
#: past it the reduced dims are looped in chunks.
MAX_PERSISTENT_REDUCTION = 1 << 14
#: Largest padded output tile the fusion pass lets a merged kernel's block hold: its values
#: live in registers.  A [1, 32000] row of a top-p mask (32,768 padded) takes 178 registers
#: and does not spill on sm_90; a batch norm whose every reduced element of 32 features is
#: one block's output tile (32x28x28x32, a million padded) spilled 190 KB.
MAX_MERGED_OUTPUT_TILE = 1 << 15
#: Largest chunk (elements per iteration) the candidates try for a looped reduction.
MAX_REDUCTION_CHUNK = 4096
#: Tile along a scanned dim too long for one tile (``tiling.policy.tile_scans``): each tile
#: also reduces the window before it, so a [64, 32000] f32 cumsum in tiles of 16,384 took
#: 128 registers and spilled on sm_80; in tiles of 8,192 it does not.
CARRIED_SCAN_TILE = 1 << 13
#: Elements of each row a scan down the columns takes at least (its scanned dim not the
#: minor one), as a persistent reduction's elements allow: one lane per row read 4 bytes of
#: each 32-byte sector, a [4096, 4] f32 tile reads 16 bytes a row in one 128-bit load.
SCAN_ROW_ELEMENTS = 8
#: Chunk of a looped reduction nobody chose (the kernel planner's, and explicit tile sizes').
DEFAULT_REDUCTION_CHUNK = 1024

# -- Preferences among legal tilings ------------------------------------------------------
#: Elements per block the choice aims for; also the kernel planner's budget when the tile
#: analysis refuses a fusion (output tile times the padded reduced dims).
TARGET_TILE_ELEMENTS = 1024
#: A block holds at least this many elements unless the whole output is smaller.
MIN_ROOT_TILE_ELEMENTS = 16
#: Bytes a warp's accesses must run contiguously to coalesce (a warp's whole cache lines).
COALESCED_BYTES = 128
#: Bytes of one warp's 128-bit accesses (32 threads x 16 bytes).
VECTOR_BLOCK_BYTES = 512
#: Fraction of a block's bytes that may move in uncoalesced accesses.
UNCOALESCED_TOLERANCE = 1 / 8
#: Modeled memory costs within this fraction of the least are treated as equal: the model
#: (first-block costs times the block count, bandwidths as constants) is no more precise, and
#: a block count that leaves SMs idle costs more than such a difference.
COST_TOLERANCE = 0.10

# -- The device ---------------------------------------------------------------------------
DEFAULT_DEVICE: DeviceSpec = device_spec("h100")
#: SMs of the default device: the target shrinks until every SM gets a block.
NUM_SMS = DEFAULT_DEVICE.sm_count
#: Programs a split reduction aims for (two per SM of the default device): a looped reduction
#: with fewer output tiles than this is split among programs, when each keeps at least
#: ``MIN_SPLIT_ELEMENTS`` reduced elements.
SPLIT_REDUCTION_PROGRAMS = 2 * NUM_SMS
MIN_SPLIT_ELEMENTS = 1 << 14
#: A parameter buffer at most a quarter of L2 stays there while the kernel runs, so only its
#: first read comes from DRAM (the streamed operands and the outputs pass through L2 too).
L2_RESIDENT_FRACTION = 4
#: L2 bandwidth over DRAM bandwidth (H100: roughly 7 TB/s over 3.35 TB/s; 2 is conservative).
L2_TO_DRAM_BANDWIDTH = 2


def l2_resident_bytes(device: DeviceSpec) -> int:
    """The largest parameter buffer whose re-reads hit ``device``'s L2 rather than DRAM."""
    return device.l2_bytes // L2_RESIDENT_FRACTION


#: ``l2_resident_bytes`` of the default device (H100: 50 MiB / 4).
L2_RESIDENT_BYTES = l2_resident_bytes(DEFAULT_DEVICE)

# -- The dot template ---------------------------------------------------------------------
#: The dot template's default output tile is the problem's M and N, each padded to a power of
#: two of at least ``DOT_MIN_BLOCK`` and at most ``DOT_MAX_BLOCK_MN`` (Triton's tutorial's
#: 128x128); ``triton_backend.templates.dot.tiling`` and the fusion pass's prologue rule read it.
DOT_MIN_BLOCK = 16
DOT_MAX_BLOCK_MN = 128


def dot_default_block(extent: int) -> int:
    """The dot template's default block along an output dim of ``extent`` elements.

    >>> dot_default_block(5), dot_default_block(96), dot_default_block(2304)
    (16, 128, 128)
    """
    return _padded_block(extent, DOT_MIN_BLOCK, DOT_MAX_BLOCK_MN)


def _padded_block(extent: int, low: int, high: int) -> int:
    """``extent`` padded to a power of two, clamped to ``[low, high]``."""
    padded = 1 << max(0, (extent - 1).bit_length())
    return min(max(padded, low), high)


# -- The attention template ---------------------------------------------------------------
#: The attention template's default query block: ``BLOCK_M`` query rows per program, the
#: query extent padded to a power of two of at least ``ATTENTION_MIN_BLOCK`` and at most 64
#: (``triton_backend.templates.attention.tiling.default_tiling``); the fusion pass's rule on
#: K/V prologues reads it (each query block's program streams all of K and V).
ATTENTION_MIN_BLOCK = 16
ATTENTION_BLOCK_M = 64


def attention_default_block_m(queries: int) -> int:
    """The attention template's default query block for ``queries`` query rows.

    >>> attention_default_block_m(5), attention_default_block_m(40), attention_default_block_m(512)
    (16, 64, 64)
    """
    return _padded_block(queries, ATTENTION_MIN_BLOCK, ATTENTION_BLOCK_M)
