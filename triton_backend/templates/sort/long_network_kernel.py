"""Render the kernel file of a sort by any comparator whose rows are longer than one tile: the
bitonic network of ``network_kernel`` over the whole row, tile by tile through scratch memory.

A row of ``n`` lanes (padded to ``N``, a power of two) is sorted by one program, as XLA's
own sort emitter sorts a row with no library to send it to, in three kinds of passes over
the row:

- each tile of ``TILE`` lanes is loaded from the operands and sorted in registers by the
  network's first ``log2(TILE)`` stages, ascending or descending as the tile's run in the
  whole network says, and written to scratch (each carried operand's bits, and each lane's
  source index in the row);
- each later stage ``s`` first compares lanes ``2 ** j >= TILE`` apart (``j`` from ``s - 1``
  down), pair by pair straight in scratch, one pass each;
- and then finishes in registers, tile by tile: the stage's last ``log2(TILE)`` steps are
  the last stage of a tile's network (``sorting_network.keeps_later``), in the direction of
  the tile's run.  The last stage gathers every operand at the sorted source indices into
  the outputs instead of writing scratch.

Programs meet only themselves: a barrier between passes makes one pass's stores visible to
the next one's loads.  Ties break by source index and padding lanes sort last, as in one tile,
so the sort is stable.  The scratch is the file's ``SCRATCH_SPECS`` (written before read).
"""
from __future__ import annotations

import math

from fusion.ir.hlo_module import HloInstruction, HloModule
from fusion.ir.shape import ArrayShape
from triton_backend.lowering.host_template import TORCH_DTYPES
from triton_backend.templates.sort.kernel import SortOperand, sort_kernel_source
from triton_backend.templates.sort.network_kernel import (NETWORK_IMPORTS, ComparatorNetwork,
                                                          network_warps)

def long_sort_passes(n: int, tile: int) -> int:
    """Passes over a row of ``n`` lanes sorted in tiles of ``tile``: the first tile sorts, and
    per later stage its far compares and its finish in registers.

    >>> long_sort_passes(32000, 2048), long_sort_passes(5000, 4096)
    (15, 3)
    """
    log_n, log_t = (n - 1).bit_length(), (tile - 1).bit_length()
    return 1 + sum(stage - log_t + 1 for stage in range(log_t + 1, log_n + 1))


def render_long_network_sort_kernel(module: HloModule, fusion_instr: HloInstruction,
                                    sort: HloInstruction, operands: tuple[SortOperand, ...],
                                    outputs: tuple[ArrayShape, ...], tile: int
                                    ) -> tuple[str, tuple[int, ...]]:
    """The kernel file source sorting ``sort``'s rows, longer than ``tile`` (a power of two),
    by its comparator through scratch memory (module docstring), and its grid."""
    network = ComparatorNetwork.of(module, fusion_instr, sort, operands)
    n = network.n
    log_t, log_n = (tile - 1).bit_length(), (n - 1).bit_length()
    padded = 1 << log_n
    carriers = network.carriers()
    dims = operands[0].shape.dims
    rows = math.prod(dims) // n
    # each carried operand's bits (its carrier ``tl.intN`` is HLO's sN) and the source lanes
    scratch = tuple((f"scratch{i}", TORCH_DTYPES["s" + c.removeprefix("tl.int")], rows * padded)
                    for i, c in carriers.items())
    scratch += (("scratch_source", TORCH_DTYPES["s32"], rows * padded),)

    def at_scratch(prefix: str, at: str) -> list[str]:
        lines = [f"{prefix}{i} = tl.load(scratch{i}_ptr + row_start + {at})" for i in carriers]
        return lines + [f"{prefix}_source = tl.load(scratch_source_ptr + row_start + {at})"]

    def to_scratch(prefix: str, at: str) -> list[str]:
        lines = [f"tl.store(scratch{i}_ptr + row_start + {at}, {prefix}{i})" for i in carriers]
        return lines + [f"tl.store(scratch_source_ptr + row_start + {at}, {prefix}_source)"]

    def sorting(read, gather) -> list[str]:
        lines = [f"row_start = pid.to(tl.int64) * {padded}",
                 "# 1. each tile sorted in registers, into runs of alternating direction",
                 f"for chunk in range({padded // tile}):",
                 f"    at = chunk * {tile} + lane",
                 f"    valid = at < {n}"]
        body = network.registers(lambda i: read(i, "at"), "at")
        body += network.stages(1, log_t, "chunk & 1") + to_scratch("h", "at")
        lines += ["    " + line for line in body] + ["tl.debug_barrier()"]
        lines += [f"for stage in range({log_t + 1}, {log_n + 1}):",
                  "    # 2. lanes at least a tile apart, pair by pair in scratch",
                  f"    for k in range(stage - {log_t}):",
                  "        j = stage - 1 - k",
                  f"        for half in range({padded // tile // 2}):",
                  f"            t = half * {tile} + lane",
                  "            lo = ((t >> j) << (j + 1)) | (t & ((1 << j) - 1))",
                  "            hi = lo + (1 << j)"]
        far = at_scratch("a", "lo") + at_scratch("b", "hi") + network.first("b", "a")
        # the lower lane takes the upper one's values as a lane of a tile does its partner's
        far.append(f"swap = first != sorting_network.keeps_later(lo, {log_n}, stage, j, 0)")
        for prefix, other, where in (("a", "b", "lo"), ("b", "a", "hi")):
            far += [f"tl.store(scratch{i}_ptr + row_start + {where}, "
                    f"tl.where(swap, {other}{i}, {prefix}{i}))" for i in carriers]
            far.append(f"tl.store(scratch_source_ptr + row_start + {where}, "
                       f"tl.where(swap, {other}_source, {prefix}_source))")
        lines += ["            " + line for line in far]
        lines += ["        tl.debug_barrier()",
                  "    # 3. the stage's steps within a tile, in registers",
                  f"    for chunk in range({padded // tile}):",
                  f"        at = chunk * {tile} + lane"]
        finish = [f"h{i} = tl.load(scratch{i}_ptr + row_start + at)" for i in carriers]
        finish.append("h_source = tl.load(scratch_source_ptr + row_start + at)")
        finish += network.stages(log_t, log_t, f"(chunk >> (stage - {log_t})) & 1")
        finish += [f"if stage == {log_n}:",
                   f"    valid = at < {n}",
                   "    source = h_source"]
        finish += ["    " + line for line in gather("at")]
        finish.append("else:")
        finish += ["    " + line for line in to_scratch("h", "at")]
        lines += ["        " + line for line in finish] + ["    tl.debug_barrier()"]
        return lines

    return sort_kernel_source(
        module, fusion_instr, sort, operands, outputs, tile, sorting,
        f"a bitonic network asking comparator {network.comparator.name}, over rows padded to "
        f"{padded} in tiles of {tile} through scratch ({long_sort_passes(n, tile)} passes)",
        network.functions(), NETWORK_IMPORTS, network_warps(tile), scratch)


__all__ = ["long_sort_passes", "render_long_network_sort_kernel"]
