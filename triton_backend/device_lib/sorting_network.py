"""A bitonic sorting network over a row held in one tile, for sorts whose comparator is any
HLO computation (``templates/sort/network_kernel.py``, ``long_network_kernel.py``).

Triton's own ``tl.sort`` compares with ``>`` on one tensor.  A sort by a comparator (several
keys, 64-bit keys, any order) needs the comparison to be a function of every operand, and
each compare-and-swap to move all operands together: the kernel keeps one tile per operand,
and at each step of the network reads every lane's partner (:func:`partner`, the lane whose
index differs in one bit), asks the comparator which of the two comes first, and keeps its
own value or takes its partner's (:func:`keeps_later` says which of the pair a lane must end
with).  The network is Batcher's bitonic sort: stage ``s`` merges bitonic runs of ``2 ** s``
lanes, in ``s`` steps of decreasing stride.

The steps are a loop, not unrolled: the partner is a gather at a runtime stride.  Unrolled
(a hypercube ``[2] * LOG_N`` and a reduction along one axis per step, as ``tl.sort`` does),
a 512-lane two-key sort took 17 s to compile for sm_90, 10 of them in Triton's coalescing
pass, which grew with the square of the steps; as a loop, under a second.  The kernel uses
it as::

    for stage in range(1, LOG_N + 1):
        for step in range(stage):
            bit = stage - 1 - step
            p = sorting_network.partner(h, lane, bit)  # per operand's bits, the lane indices
            ...  # first = comparator(p..., h...): does the partner come first?
            take = first != sorting_network.keeps_later(lane, LOG_N, stage, bit, 0)
            h = tl.where(take, p, h)
"""
import triton.language as tl

from triton_backend.device_lib.device_function import device_function


@device_function
def partner(values, lane, bit):
    """Every lane's partner's value: the lane whose index differs in ``bit`` (``lane`` is
    ``tl.arange`` over the tile's last axis; a tile of several rows holds one row a line).
    The kernel carries each operand as the integers of its bits, so any value (NaN
    payloads, -0.0) moves exactly."""
    return tl.gather(values, tl.broadcast_to(lane ^ (1 << bit), values.shape),
                     len(values.shape) - 1)


@device_function
def keeps_later(lane, n_dims: tl.constexpr, stage, bit, descending):
    """True in the lanes that end a compare-and-swap with the later of their pair: the upper
    lane of each pair (``bit`` set), reversed in every other run of ``2 ** stage`` lanes (a
    bitonic merge sorts those runs descending).  At the tile's last stage the whole tile is
    one run, reversed where ``descending`` (0 or 1) is set: a row longer than the tile
    (``long_network_kernel``) merges its tiles in runs of alternating direction."""
    run = tl.where(stage < n_dims, (lane >> stage) & 1, descending)
    return (((lane >> bit) & 1) ^ run) != 0
