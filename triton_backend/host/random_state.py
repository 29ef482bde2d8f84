"""``rng-get-and-update-state`` on the host: the one op of an ``rng``'s draw with a state.

XLA keeps the state of each such instruction in its executable: a 128-bit counter that
starts at ``0x7012395`` and that every run advances by the instruction's ``delta``
(``fusion.analysis.rng_streams``).  Here it lives in the executor, one per instruction of a
compiled module, so a module's calls draw new values, in the order of its calls, exactly as
the evaluator's first run and XLA's executable do; a fresh compile (or a fresh process)
starts again.  The counter's value goes to the kernels that draw from it as a ``u64[2]``
tensor; a CUDA graph, which would replay one value, is refused
(``driver.cuda_graphs.graph_refusal``).

>>> import torch
>>> from fusion.ir.shape import ArrayShape
>>> op = HloInstruction("s", "rng-get-and-update-state", ArrayShape("u64", (2,)), (),
...                     (("delta", 8),))
>>> run = host_rng_get_and_update_state(HloComputation("c", (op,), "s"), op,
...                                     torch.device("cpu"))
>>> [[int(w) for w in run([], None).view(torch.int64)] for _ in range(2)]
[[117515157, 0], [117515165, 0]]
"""
from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import torch

from fusion.analysis.rng_streams import INITIAL_STATE, advanced
from fusion.ir.hlo_module import HloComputation, HloInstruction

_SIGN = 2**63


def host_rng_get_and_update_state(comp: HloComputation, instr: HloInstruction,
                                  device: torch.device) -> Callable[[Sequence, object], torch.Tensor]:
    """The executor: this run's counter as a ``u64[2]`` tensor, the counter advanced."""
    delta = instr.attr("delta", 0)
    state = [(INITIAL_STATE, 0)]
    lock = threading.Lock()  # two threads calling one module draw distinct values

    def run(operands: Sequence, ctx: object) -> torch.Tensor:
        with lock:
            current = state[0]
            state[0] = advanced(current, delta)
        words = [w - 2 * _SIGN if w >= _SIGN else w for w in current]
        return torch.tensor(words, dtype=torch.int64, device=device).view(torch.uint64)

    return run


RANDOM_HOST_RULES = {"rng-get-and-update-state": host_rng_get_and_update_state}

__all__ = ["RANDOM_HOST_RULES", "host_rng_get_and_update_state"]
