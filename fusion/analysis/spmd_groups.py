"""Which processes a collective talks to when a module runs on several, as XLA reads its groups.

A module partitioned by XLA (``replica_count=R``, ``num_partitions=P``) runs as ``R * P``
processes; process (rank) ``r`` is replica ``r // P``, partition ``r % P``: XLA's flattened
device id.  What an op's ``replica_groups`` name depends on its mode, as in XLA:

* ``use_global_device_ids=true``: the groups name flattened ids, i.e. ranks;
* ``channel_id`` without it, on an op that has the flag (``all-reduce``, ``all-gather``,
  ``reduce-scatter``, their ``-start``s): each group names replicas, and holds every partition
  of them (XLA's ``kCrossReplicaAndPartition``: the partitioner's ``replica_groups={{0}}``
  is every device of replica 0);
* ``channel_id`` on an op without the flag (``all-to-all``; cross-partition): each group names
  partitions, one group per replica;
* no ``channel_id`` (cross-replica): each group names replicas, one group per partition.

(``CollectiveOpGroupMode`` in XLA's ``collective_ops_utils``;
``tests/fusion/test_spmd_groups.py`` has XLA's own groups for these modes.)
``replica_groups={}`` is one group of every replica (or partition) of that mode.  A
``collective-permute``'s pairs name partitions with a ``channel_id``, replicas without, within
each replica (partition).  :func:`rank_groups` and :func:`rank_pairs` give them as ranks;
:func:`spmd_problem` says why an op's groups cannot run (a rank in no group or in two, an id
past the module's devices).

>>> counts = DeviceCounts(replicas=1, partitions=2)
>>> counts.world, device_ids(counts, 1)
(2, (0, 1))
>>> from fusion.ir.shape import ArrayShape
>>> ar = HloInstruction("r", "all-reduce", ArrayShape("f32", (2,)), ("x",),
...                     (("channel_id", 1), ("replica_groups", ((0, 1),)),
...                      ("use_global_device_ids", True)))
>>> rank_groups(ar, counts)
((0, 1),)
>>> print(spmd_problem(ar, DeviceCounts(replicas=1, partitions=3)))
replica_groups={{0,1}} of all-reduce do not name device 2 of the 3 devices the module runs on (num_partitions=3): every device must be in one group
"""
from __future__ import annotations

from dataclasses import dataclass

from fusion.analysis.collectives import group_key, is_collective
from fusion.ir.hlo_module import HloInstruction, HloModule
from fusion.opcodes import traits
from fusion.text.printer import print_attribute_value


@dataclass(frozen=True)
class DeviceCounts:
    """The module header's ``replica_count`` and ``num_partitions`` (1 when absent)."""

    replicas: int = 1
    partitions: int = 1

    @property
    def world(self) -> int:
        return self.replicas * self.partitions

    def header(self) -> str:
        parts = [f"replica_count={self.replicas}"] if self.replicas > 1 else []
        parts += [f"num_partitions={self.partitions}"] if self.partitions > 1 else []
        return ", ".join(parts) or "one device"


def device_counts(module: HloModule) -> DeviceCounts:
    """``replica_count`` and ``num_partitions`` of the module's header."""
    return header_counts(module.attributes)


def header_counts(attributes) -> DeviceCounts:
    """``replica_count`` and ``num_partitions`` among a module header's ``(key, value)`` pairs.

    >>> header_counts((("num_partitions", "4"),)).world
    4
    """
    values = {k: str(v).strip() for k, v in attributes}

    def count(key: str) -> int:
        text = values.get(key, "1")
        return max(int(text), 1) if text.isdigit() else 1

    return DeviceCounts(count("replica_count"), count("num_partitions"))


def device_ids(counts: DeviceCounts, rank: int) -> tuple[int, int]:
    """``(replica-id, partition-id)`` of process ``rank``."""
    return rank // counts.partitions, rank % counts.partitions


def _mode(instr: HloInstruction) -> str:
    if instr.attr("use_global_device_ids", False) and not group_key(instr).startswith("source"):
        return "global"
    if not instr.has_attr("channel_id"):
        return "replicas"
    # An op with the use_global_device_ids flag, the flag false: XLA's kCrossReplicaAndPartition.
    return "replicas_and_partitions" if traits(instr.opcode).global_ids_flag else "partitions"


def _expand(ids: tuple[int, ...], mode: str, counts: DeviceCounts) -> list[tuple[int, ...]]:
    """One group of ids of ``mode`` as ranks: one rank group per replica (partition)."""
    if mode == "global":
        return [ids]
    if mode == "replicas_and_partitions":  # replica-major, as XLA orders the participants
        return [tuple(r * counts.partitions + p for r in ids for p in range(counts.partitions))]
    if mode == "partitions":
        return [tuple(r * counts.partitions + p for p in ids) for r in range(counts.replicas)]
    return [tuple(r * counts.partitions + p for r in ids) for p in range(counts.partitions)]


def rank_groups(instr: HloInstruction, counts: DeviceCounts) -> tuple[tuple[int, ...], ...]:
    """The op's groups as ranks, each in group order (module docstring)."""
    mode = _mode(instr)
    groups = instr.attr("replica_groups", ())
    if not groups:
        size = {"global": counts.world, "partitions": counts.partitions}.get(mode,
                                                                             counts.replicas)
        groups = (tuple(range(size)),)
    return tuple(g for ids in groups for g in _expand(tuple(ids), mode, counts))


def rank_pairs(instr: HloInstruction, counts: DeviceCounts) -> tuple[tuple[int, int], ...]:
    """A collective-permute's ``(source, target)`` pairs as ranks."""
    mode = _mode(instr)

    def ranks(i: int) -> list[int]:
        return [g[0] for g in _expand((i,), mode, counts)]

    return tuple(pair for s, t in instr.attr("source_target_pairs", ())
                 for pair in zip(ranks(s), ranks(t)))


def _named(instr: HloInstruction) -> str:
    key = group_key(instr)
    return f"{key}={print_attribute_value(key, instr.attr(key, ()))} of {instr.opcode}"


def spmd_problem(instr: HloInstruction, counts: DeviceCounts) -> str | None:
    """Why the collective ``instr`` cannot run on the module's ``counts.world`` processes;
    None when it can (and for any other op)."""
    if not is_collective(instr.opcode):
        return None
    world, header = counts.world, counts.header()
    if group_key(instr) == "source_target_pairs":
        pairs = rank_pairs(instr, counts)
        ids = [i for pair in pairs for i in pair]
        if any(i >= world for i in ids):
            return (f"{_named(instr)} names device {max(ids)}, but the module runs on {world} "
                    f"devices ({header})")
        for end, label in ((0, "sends from"), (1, "sends to")):
            ends = [p[end] for p in pairs]
            twice = sorted({i for i in ends if ends.count(i) > 1})
            if twice:
                return f"{_named(instr)} {label} device {twice[0]} twice"
        return None
    groups = rank_groups(instr, counts)
    ranks = [r for g in groups for r in g]
    if any(r >= world for r in ranks):
        return (f"{_named(instr)} names device {max(ranks)}, but the module runs on {world} "
                f"devices ({header})")
    twice = sorted({r for r in ranks if ranks.count(r) > 1})
    if twice:
        return f"{_named(instr)} put device {twice[0]} in two groups"
    missing = sorted(set(range(world)) - set(ranks))
    if missing:
        return (f"{_named(instr)} do not name device {', '.join(map(str, missing))} of the "
                f"{world} devices the module runs on ({header}): every device must be in one "
                "group")
    return None


def world_size_problem(counts: DeviceCounts, world_size: int) -> str | None:
    """Why a module asking for ``counts`` cannot run on ``world_size`` processes.

    >>> print(world_size_problem(DeviceCounts(partitions=2), 4))
    the module runs on 2 devices (num_partitions=2), but 4 processes run it: start 2
    """
    if counts.world == world_size:
        return None
    return (f"the module runs on {counts.world} device{'s' * (counts.world > 1)} "
            f"({counts.header()}), but {world_size} processes run it: start {counts.world}")


__all__ = ["DeviceCounts", "device_counts", "device_ids", "header_counts", "rank_groups", "rank_pairs",
           "spmd_problem", "world_size_problem"]
