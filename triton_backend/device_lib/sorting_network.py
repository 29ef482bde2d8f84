"""A bitonic sorting network over a row held as a hypercube ``[2] * LOG_N``, for sorts whose
comparator is any HLO computation (``templates/sort/network_kernel.py``).

Triton's own ``tl.sort`` compares with ``>`` on one tensor.  A sort by a comparator (several
keys, 64-bit keys, any order) needs the comparison to be a function of every operand, and
each compare-and-swap to move all operands together: the kernel keeps one hypercube per
operand, and at each step of the network reads every lane's partner along one axis
(:func:`partner`), asks the comparator which of the two comes first, and keeps its own value
or takes its partner's (:func:`keeps_later` says which of the pair a lane must end with).
The network is Batcher's bitonic sort, as ``tl.sort`` runs it: stage ``s`` merges bitonic
runs of ``2 ** s`` lanes, in ``s`` steps along axes of decreasing stride.

The kernel uses it as::

    for stage in tl.static_range(1, LOG_N + 1):
        for step in tl.static_range(stage):
            axis = LOG_N - stage + step
            p = sorting_network.partner(h, axis, LOG_N)  # per operand's bits, the lane indices
            ...  # first = comparator(p..., h...): does the partner come first?
            take = first != sorting_network.keeps_later(LOG_N, stage, step, 0)
            h = tl.where(take, p, h)
"""
import triton.language as tl
from triton import knobs

from triton_backend.device_lib.device_function import device_function

INTERPRETED = bool(knobs.runtime.interpret)


@device_function
def indicator(n_dims: tl.constexpr, j: tl.constexpr):
    """``[0, 1]`` along axis ``n_dims - 1 - j`` of the hypercube (stride ``2 ** j``): 1 in the
    lanes whose index has bit ``j`` set."""
    return tl.reshape(tl.arange(0, 2), [1] * (n_dims - j - 1) + [2] + [1] * j)


@device_function
def keeps_later(n_dims: tl.constexpr, stage: tl.constexpr, step: tl.constexpr, descending):
    """True in the lanes that end a compare-and-swap with the later of their pair: the
    upper lane of each pair, reversed in every other run of ``2 ** stage`` lanes (a bitonic
    merge sorts those runs descending).  At the tile's last stage the whole tile is one run,
    reversed where ``descending`` (0 or 1) is set: a row longer than the tile
    (``long_network_kernel``) merges its tiles in runs of alternating direction."""
    later = indicator(n_dims, stage - 1 - step)
    if stage < n_dims:
        later = later ^ indicator(n_dims, stage)
    else:
        later = later ^ descending
    return later != 0


if INTERPRETED:
    @device_function
    def partner(bits, axis: tl.constexpr, n_dims: tl.constexpr):
        """Every lane's partner along ``axis`` (of extent 2) of an ``n_dims`` hypercube: the
        pair swapped.  The interpreter's reductions cost about 0.1 s a call on 4096 lanes (a
        4096-lane sort took 43 s), a split and a join of NumPy views nothing."""
        y = tl.permute(tl.reshape(bits, [1 << axis, 2, 1 << (n_dims - axis - 1)]), (0, 2, 1))
        low, high = tl.split(y)
        return tl.reshape(tl.permute(tl.join(high, low), (0, 2, 1)), [2] * n_dims)
else:
    @device_function
    def partner(bits, axis: tl.constexpr, n_dims: tl.constexpr):
        """Every lane's partner along ``axis`` (of extent 2) of an ``n_dims`` hypercube of
        integers: the xor of the pair, xor this lane (as ``tl.sort`` does: warp shuffles, no
        data through shared memory).  The kernel carries each operand as the integers of
        its bits, so any value (NaN payloads, -0.0) moves exactly."""
        return bits ^ tl.xor_sum(bits, axis, keep_dims=True)
