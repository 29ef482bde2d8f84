"""Deterministic sums across programs: the last program to arrive adds the parts in order.

A sum that several programs of one launch contribute to (split-K's partial tiles; any
cross-program reduction, through :func:`last_to_arrive`) is not added
with float atomics, whose order, hence rounding, would change from run to run.  Each program
writes its part to a workspace and counts its arrival with an integer atomic (``acq_rel``: its
part is visible before the count is, and the last arrival sees every part); the program that
arrives last adds the parts in part order ``0, 1, ...``, whichever program it is, so the sum
is the same bits on every run, and sets the counter back to zero for the next launch.  Under
``TRITON_INTERPRET`` programs run one after another, and the last one in grid order adds.

Host side, the kernel file allocates the workspace (``parts * SIZE`` elements per slot) per
launch and the counters (one ``int32`` per slot) zeroed; the kernel leaves them zero again
(``host_template``'s ``SCRATCH_SPECS``).

The kernel uses it as::

    last, total = ordered_sums.sum_across_programs(ws_ptr, counters_ptr, tile, pid_k,
                                                   SPLIT_K, acc, offsets, BM * BN)
    if last:
        ...  # the epilogue, once, on the whole sum
"""
import triton.language as tl

from triton_backend.device_lib.device_function import device_function


@device_function
def last_to_arrive(counters, slot, PARTS: tl.constexpr):
    """Count this program's arrival at ``slot`` (one of ``PARTS``); True in the last one.

    Whatever the program stored before is visible to the last one after this returns (call
    it after storing the part).  The last one sets the counter back to zero: the other
    ``PARTS - 1`` have arrived, so nothing else touches it in this launch.
    """
    # Every thread's stores happen before the one thread doing the atomic releases them.
    tl.debug_barrier()
    arrived = tl.atomic_add(counters + slot, 1, sem="acq_rel", scope="gpu")
    last = arrived == PARTS - 1
    if last:
        tl.store(counters + slot, 0)
    return last


@device_function
def sum_across_programs(workspace, counters, slot, part, PARTS: tl.constexpr, value, offsets,
                        SIZE: tl.constexpr):
    """Add ``value`` (part ``part`` of ``PARTS``) into sum ``slot``; returns ``(last, total)``:
    in the program that arrives last, True and the sum of the parts in part order; elsewhere
    False and zeros.  ``offsets`` (``value``'s shape, ``0 .. SIZE - 1``) place ``value`` in
    its part of the workspace."""
    base = workspace + slot * (PARTS * SIZE)
    tl.store(base + part * SIZE + offsets, value)
    last = last_to_arrive(counters, slot, PARTS)
    total = tl.zeros_like(value)
    if last:
        for p in range(PARTS):  # in part order, whichever program arrived last
            # .cg: read at L2, where the other programs' parts are, never a stale L1 line
            total += tl.load(base + p * SIZE + offsets, cache_modifier=".cg")
    return last, total
