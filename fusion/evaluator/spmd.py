"""N copies of one module evaluated in lockstep, collectives resolved across them.

A module partitioned by XLA's SPMD partitioner (``num_partitions=N``, or ``replica_count=N``)
is one program that N devices run, each on its shard.  :func:`evaluate_spmd` runs N
evaluators, one thread each; when one reaches a collective it deposits its operands with a
:class:`Rendezvous` and waits until every device of its group has deposited, then computes
the value XLA defines for its place in the group: ``all-reduce`` reduces the group's values
element by element with ``to_apply``; ``all-gather`` concatenates them along its dimension in
group order; ``reduce-scatter`` reduces, then keeps its block; ``all-to-all`` sends block
``j`` (or operand ``j``, in the tuple form) to the ``j``-th member and concatenates what it
receives (``ragged-all-to-all``: the slices each member sends it, written into its output);
``collective-broadcast`` gives every member the group's first member's values;
``collective-permute`` takes the value of the device whose pair targets it, zeros when none
does.  Devices are the flat ids ``0..N-1`` (replica ``d // num_partitions``,
partition ``d % num_partitions``); the groups name them as XLA reads each op's mode
(``fusion.analysis.spmd_groups``: ``use_global_device_ids``, ``channel_id``), and
``partition-id``/``replica-id`` give a device its own.

Devices must reach the same collectives in the same order (SPMD); one that reaches another,
fails, or waits longer than ``timeout`` seconds stops every device with an
``EvaluationError`` naming the op.

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m, num_partitions=2
... add { a = f32[] parameter(0)
...   b = f32[] parameter(1)
...   ROOT c = f32[] add(a, b) }
... ENTRY e {
...   x = f32[2] parameter(0)
...   ROOT r = f32[2] all-reduce(x), channel_id=1, replica_groups={{0,1}},
...     use_global_device_ids=true, to_apply=add
... }''')
>>> [out[0].tolist() for out in evaluate_spmd(m, [[np.float32([1, 2])], [np.float32([3, 4])]])]
[[4.0, 6.0], [4.0, 6.0]]
"""
from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fusion.analysis.collectives import group_key, module_devices
from fusion.analysis.spmd_groups import DeviceCounts, device_counts, rank_groups
from fusion.errors import EvaluationError, FusionCompilerError
from fusion.evaluator.failures import op_error
from fusion.evaluator.input_binding import bind_value
from fusion.evaluator.interpreter import Evaluator, flatten_value
from fusion.ir.hlo_module import HloInstruction, HloModule

#: Seconds a device waits for its group at one collective before giving up.
DEFAULT_TIMEOUT = 60.0


class Rendezvous:
    """Where the devices' evaluators meet at each collective (module docstring)."""

    def __init__(self, devices: int, timeout: float) -> None:
        self.devices = devices
        self.timeout = timeout
        self._cond = threading.Condition()
        self._slots: dict[int, dict[int, tuple[str, Any]]] = {}
        self.failure: str | None = None

    def fail(self, message: str) -> None:
        with self._cond:
            self.failure = self.failure or message
            self._cond.notify_all()

    def exchange(self, instr: HloInstruction, step: int, device: int, value: Any,
                 members: Sequence[int]) -> dict[int, Any]:
        """Deposit ``value`` for the ``step``-th collective of ``device``; the values of
        ``members`` once all have deposited theirs."""
        with self._cond:
            slot = self._slots.setdefault(step, {})
            slot[device] = (instr.name, value)
            self._cond.notify_all()
            done = self._cond.wait_for(
                lambda: self.failure is not None or all(m in slot for m in members),
                self.timeout)
            if self.failure is not None:
                raise op_error(instr, f"device {device} stopped: {self.failure}")
            if not done:
                missing = [m for m in members if m not in slot]
                raise op_error(instr, f"device {device} waited {self.timeout:g} s for devices "
                               f"{', '.join(map(str, missing))} at this collective")
            names = {slot[m][0] for m in members}
            if names != {instr.name}:
                raise op_error(instr, f"the devices diverged: collective {step} is "
                               f"{', '.join(sorted(names))} on different devices")
            return {m: slot[m][1] for m in members}


@dataclass
class DeviceContext:
    """One device's place in an SPMD evaluation; the collective rules read it."""

    device: int
    devices: int
    rendezvous: Rendezvous
    counts: DeviceCounts = DeviceCounts()
    steps: int = field(default=0)

    def group(self, instr: HloInstruction) -> tuple[int, ...]:
        """The members of this device's group at ``instr``, in group order."""
        if group_key(instr) == "source_target_pairs":
            return tuple(range(self.devices))
        for g in rank_groups(instr, self.counts):
            if self.device in g:
                return tuple(g)
        raise op_error(instr, f"replica_groups of {instr.opcode} do not name device "
                       f"{self.device} of the {self.devices} devices")

    def exchange(self, instr: HloInstruction, value: Any) -> list[Any]:
        """The values of this device's group at ``instr``, in group order."""
        members = self.group(instr)
        if any(m >= self.devices for m in members):
            raise op_error(instr, f"{instr.opcode} names device {max(members)}, but the module "
                           f"runs on {self.devices} devices")
        step, self.steps = self.steps, self.steps + 1
        got = self.rendezvous.exchange(instr, step, self.device, value, members)
        return [got[m] for m in members]


def _run_device(module: HloModule, ctx: DeviceContext, arrays: Sequence[Any],
                results: list, errors: list) -> None:
    try:
        params = module.entry.parameters
        if len(arrays) != len(params):
            raise EvaluationError(f"device {ctx.device}: ENTRY {module.entry.name} takes "
                                  f"{len(params)} arguments, got {len(arrays)}",
                                  where=f"computation {module.entry.name}")
        bound = [bind_value(a, p.shape, f"parameter {i} (%{p.name}) of device {ctx.device}")
                 for i, (a, p) in enumerate(zip(arrays, params))]
        evaluator = Evaluator(module)
        evaluator.spmd = ctx  # the collective rules resolve across devices through it
        value = evaluator.call(module.entry.name, bound)
        results[ctx.device] = tuple(np.array(leaf, order="C") for leaf in flatten_value(value))
    except FusionCompilerError as err:
        errors.append((ctx.device, err))
        ctx.rendezvous.fail(f"device {ctx.device} failed: {err.message}")


def evaluate_spmd(module: HloModule, per_device: Sequence[Sequence[Any]],
                  timeout: float = DEFAULT_TIMEOUT) -> list[tuple[np.ndarray, ...]]:
    """Each device's ENTRY result (flattened depth first), for one argument list per device."""
    devices = module_devices(module)
    if len(per_device) != devices:
        raise EvaluationError(f"the module runs on {devices} devices (its replica_count times "
                              f"num_partitions), got arguments for {len(per_device)}",
                              where=f"module {module.name}")
    rendezvous = Rendezvous(devices, timeout)
    counts = device_counts(module)
    results: list = [None] * devices
    errors: list = []
    threads = [threading.Thread(target=_run_device, daemon=True,
                                args=(module, DeviceContext(d, devices, rendezvous, counts),
                                      per_device[d], results, errors))
               for d in range(devices)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise min(errors, key=lambda e: (e[1].message.startswith("device "), e[0]))[1]
    return results


__all__ = ["DEFAULT_TIMEOUT", "DeviceContext", "Rendezvous", "evaluate_spmd"]
