"""Rank -> (replica, partition) and the groups of each collective mode, against XLA.

The masks below are XLA's own, measured once (jax 0.10 / XLA CPU, 4 host devices,
``replica_count=2``, ``num_partitions=2``, device assignment ``[[0, 1], [2, 3]]``): each
device contributed ``1 << (2 * replica-id + partition-id)`` to an ``all-reduce`` (or an
``all-gather`` then a sum) with the groups and flags shown, so the value each device got back
is the bitmask of the devices in its group.  They are the groups ``CollectiveOpGroupMode``
(xla/service/collective_ops_utils.h) documents: no ``channel_id`` -> kCrossReplica;
``channel_id`` with ``use_global_device_ids`` false -> kCrossReplicaAndPartition on the ops
that have that flag; true -> kFlattenedID; ``channel_id`` on ``all-to-all`` (no such flag)
-> kCrossPartition.
"""
from __future__ import annotations

import numpy as np
import pytest

from fusion import parse_hlo
from fusion.analysis.spmd_groups import (
    DeviceCounts, device_ids, rank_groups, rank_pairs, spmd_problem,
)
from fusion.evaluator.spmd import evaluate_spmd
from fusion.ir.hlo_module import HloInstruction
from fusion.ir.shape import ArrayShape

COUNTS = DeviceCounts(replicas=2, partitions=2)


def _op(opcode: str, groups, channel: bool, global_ids: bool = False) -> HloInstruction:
    attrs = [("replica_groups", groups)]
    attrs += [("channel_id", 1)] if channel else []
    attrs += [("use_global_device_ids", True)] if global_ids else []
    return HloInstruction("c", opcode, ArrayShape("f32", (4,)), ("x",), tuple(attrs))


def _masks(instr: HloInstruction, counts: DeviceCounts = COUNTS) -> list[int]:
    """Per rank, the bitmask of the ranks in its group (what XLA's runs returned)."""
    groups = rank_groups(instr, counts)
    return [sum(1 << d for d in next(g for g in groups if rank in g))
            for rank in range(counts.world)]


def test_rank_is_replica_major_like_xlas_flattened_device_id():
    # XLA: flattened id = replica * num_partitions + partition (device assignment [[0,1],[2,3]])
    assert [device_ids(COUNTS, r) for r in range(4)] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert [device_ids(DeviceCounts(replicas=1, partitions=3), r) for r in range(3)] == \
        [(0, 0), (0, 1), (0, 2)]


XLA_MASKS = [  # (opcode, replica_groups, channel_id, use_global_device_ids) -> XLA's masks
    ("all-reduce", ((0, 1),), False, False, [5, 10, 5, 10]),
    ("all-reduce", ((0,), (1,)), False, False, [1, 2, 4, 8]),
    ("all-reduce", ((0, 1),), True, False, [15, 15, 15, 15]),
    ("all-reduce", ((0,), (1,)), True, False, [3, 3, 12, 12]),
    ("all-reduce", ((0, 1), (2, 3)), True, True, [3, 3, 12, 12]),
    ("all-reduce", ((0, 2), (1, 3)), True, True, [5, 10, 5, 10]),
    ("all-reduce", ((0, 1, 2, 3),), True, True, [15, 15, 15, 15]),
    ("all-gather", ((0, 1),), True, False, [15, 15, 15, 15]),
    ("all-gather", ((0,), (1,)), True, False, [3, 3, 12, 12]),
    ("all-gather", ((0, 1),), False, False, [5, 10, 5, 10]),
]


@pytest.mark.parametrize("opcode,groups,channel,global_ids,want", XLA_MASKS)
def test_groups_are_xlas(opcode, groups, channel, global_ids, want):
    instr = _op(opcode, groups, channel, global_ids)
    assert _masks(instr) == want
    assert spmd_problem(instr, COUNTS) is None


def test_cross_partition_all_to_all_and_permute_pairs():
    # all-to-all has no use_global_device_ids: channel_id means partitions, per replica.
    assert rank_groups(_op("all-to-all", ((0, 1),), True), COUNTS) == ((0, 1), (2, 3))
    assert rank_groups(_op("all-to-all", ((0, 1),), False), COUNTS) == ((0, 2), (1, 3))
    permute = HloInstruction("p", "collective-permute", ArrayShape("f32", (4,)), ("x",),
                             (("source_target_pairs", ((0, 1),)), ("channel_id", 1)))
    assert rank_pairs(permute, COUNTS) == ((0, 1), (2, 3))
    replicas = HloInstruction("p", "collective-permute", ArrayShape("f32", (4,)), ("x",),
                              (("source_target_pairs", ((0, 1),)),))
    assert rank_pairs(replicas, COUNTS) == ((0, 2), (1, 3))


def test_empty_groups_are_every_device_of_the_mode():
    assert _masks(_op("all-reduce", (), False)) == [5, 10, 5, 10]
    assert _masks(_op("all-reduce", (), True)) == [15] * 4
    assert _masks(_op("all-reduce", (), True, True)) == [15] * 4
    assert rank_groups(_op("all-to-all", (), True), COUNTS) == ((0, 1), (2, 3))


def test_groups_that_name_a_device_twice_or_past_the_world_are_problems():
    assert "in two groups" in spmd_problem(_op("all-reduce", ((0, 1), (1, 2, 3)), True, True),
                                           COUNTS)
    assert "names device" in spmd_problem(_op("all-reduce", ((0, 2),), True), COUNTS)
    # kCrossReplicaAndPartition with replica_groups={{0}} on 2 replicas misses replica 1
    assert "do not name device 2, 3" in spmd_problem(_op("all-reduce", ((0,),), True), COUNTS)


def test_the_partitioners_channel_all_reduce_over_replica_zero_sums_every_partition():
    # XLA's SPMD partitioner writes a full reduction as replica_groups={{0}}, channel_id, no
    # use_global_device_ids: every partition of replica 0, not partition 0 alone.
    module = parse_hlo("""HloModule m, num_partitions=2
add { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b) }
ENTRY e {
  x = f32[2] parameter(0)
  ROOT r = f32[2] all-reduce(x), channel_id=1, replica_groups={{0}}, to_apply=add
}""")
    got = evaluate_spmd(module, [[np.float32([1, 2])], [np.float32([10, 20])]], timeout=10)
    assert [out[0].tolist() for out in got] == [[11.0, 22.0], [11.0, 22.0]]
