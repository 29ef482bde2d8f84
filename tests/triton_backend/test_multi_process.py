"""Partitioned modules as several processes (``driver.process_launch``, gloo on CPU): each
rank runs the compiled module on its shard, collectives through ``torch.distributed``; its
outputs are XLA's for that device and ``evaluate_spmd``'s.  Errors stop every rank."""
from __future__ import annotations

import os
import subprocess
import sys
import time
from unittest import mock

import numpy as np
import pytest
import torch

from fusion import parse_hlo
from fusion.errors import DistributedError
from fusion.evaluator.spmd import evaluate_spmd
from tests.conformance.sharded_programs import MAX_DEVICES, ROOT, corpus_files
from tests.fusion.test_ragged_all_to_all import brute_force as ragged_brute_force
from tests.fusion.test_ragged_all_to_all import exchange as ragged_operands
from tests.fusion.test_ragged_all_to_all import module_text as ragged_module
from triton_backend import compile_hlo
from triton_backend.driver.process_launch import run_processes

CASES = ("collectives", "dp_train_step")

# ``sharded_programs --oracle`` for several cases in one process: jax is imported and XLA's
# CPU devices are made once, not once a case.
ORACLE = """import sys
from tests.conformance import sharded_programs
n, seed = int(sys.argv[1]), int(sys.argv[2])
for name, path in zip(sys.argv[3::2], sys.argv[4::2]):
    sharded_programs._oracle(name, n, seed, path)
"""


def xla_shards(names, n: int, seed: int, tmp):
    """``sharded_programs.xla_shards`` of each case of ``names``, from one child process: per
    case, per device, its input shards and its output shards."""
    paths = [tmp / f"{name}.{n}.{seed}.npz" for name in names]
    flags = (os.environ.get("XLA_FLAGS", "") +
             f" --xla_force_host_platform_device_count={MAX_DEVICES}")
    subprocess.run([sys.executable, "-c", ORACLE, str(n), str(seed),
                    *[str(a) for pair in zip(names, paths) for a in pair]],
                   check=True, cwd=ROOT, timeout=300, env=dict(os.environ, XLA_FLAGS=flags))
    shards = []
    for path in paths:
        data = np.load(path)
        shards.append(tuple([[data[f"{prefix}{d}_{k}"] for k in range(len(data.files))
                              if f"{prefix}{d}_{k}" in data.files] for d in range(n)]
                            for prefix in ("in", "out")))
    return shards


#: ``collective-broadcast`` (XLA:CPU does not run it): rank 1 is its group's first member, so
#: both ranks end with rank 1's values.
BROADCAST = """HloModule m, num_partitions=2
ENTRY e {
  x = f32[3] parameter(0)
  u = u8[2] parameter(1)
  ROOT r = (f32[3], u8[2]) collective-broadcast(x, u), channel_id=1, replica_groups={{1,0}}
}
"""


def test_partitioned_programs_on_two_processes_match_xla_and_the_evaluator(tmp_path):
    texts, inputs, wants = [], [], []
    for name, (shards_in, shards_out) in zip(CASES, xla_shards(CASES, 2, seed=11, tmp=tmp_path)):
        texts.append(corpus_files(name, 2)[1].read_text())
        inputs.append(shards_in)
        wants.append(shards_out)
    broadcast_in = [[np.float32([1, 2, 3]) + 10 * r, np.uint8([200, 7]) + r] for r in range(2)]
    # ragged-all-to-all with the group listing rank 1 first: rank 1 is its member 0
    ragged = ragged_module(2, 10, 4, "replica_groups={{1,0}}")
    ragged_in = ragged_operands(2, 10, 2, seed=3)[::-1]
    # one world for every module
    *got, broadcast, ragged_out = run_processes(texts + [BROADCAST, ragged],
                                                inputs + [broadcast_in, ragged_in], 2,
                                                timeout=60)
    for rank, want in enumerate(ragged_brute_force(ragged_in, ((1, 0),))):
        np.testing.assert_array_equal(ragged_out[rank][0], want, err_msg=f"rank {rank}")
    for rank in range(2):
        for g, w in zip(broadcast[rank], broadcast_in[1]):
            np.testing.assert_array_equal(g, w, err_msg=f"collective-broadcast rank {rank}")
    for name, text, ins, want, ranks in zip(CASES, texts, inputs, wants, got):
        evaluated = evaluate_spmd(parse_hlo(text), ins)
        for rank in range(2):
            assert len(ranks[rank]) == len(want[rank]) == len(evaluated[rank])
            for k, (g, w, e) in enumerate(zip(ranks[rank], want[rank], evaluated[rank])):
                where = f"{name} rank {rank} output {k}"
                np.testing.assert_allclose(g, w, rtol=5e-5, atol=5e-5, err_msg=where)
                np.testing.assert_allclose(g, e, rtol=5e-5, atol=5e-5, err_msg=where)


def test_a_world_size_the_module_does_not_ask_for_is_refused_before_any_process_starts():
    text = corpus_files("collectives", 4)[1].read_text()
    module = parse_hlo(text)
    args = [np.zeros(p.shape.dims, np.float32) for p in module.entry.parameters]
    with mock.patch("subprocess.Popen", side_effect=AssertionError("a process started")):
        with pytest.raises(DistributedError, match=r"runs on 4 devices \(num_partitions=4\), "
                           r"but 2 processes run it: start 4"):
            run_processes([text], [[args, args]], 2, timeout=30)


def test_a_rank_that_raises_is_reported_and_the_others_are_stopped():
    text = corpus_files("collectives", 2)[1].read_text()
    good = [np.ones((2, 4), np.float32)]
    bad = [np.ones((3, 4), np.float32)]  # rank 1 fails before the first collective
    start = time.monotonic()
    with pytest.raises(DistributedError, match="rank 1 failed: .*parameter 0") as err:
        run_processes([text], [[good, bad]], 2, timeout=60)
    assert time.monotonic() - start < 40, "rank 0 waited for its collective's time-out"
    assert "rank 0" not in str(err.value).split("failed")[0]


def test_several_devices_without_a_torch_distributed_world_is_a_clear_error():
    text = corpus_files("collectives", 2)[1].read_text()
    with pytest.raises(DistributedError, match="needs an initialised torch.distributed"):
        compile_hlo(text, world_size=2)


def test_a_one_device_module_runs_alone_on_each_rank_of_a_world(monkeypatch):
    # The torch op in a data-parallel job: torch.distributed is initialised with several
    # ranks, and each runs its own copy of a module written for one device.
    from triton_backend.driver import process_world

    monkeypatch.setattr(process_world, "_initialised", lambda: (1, 2))
    one = "HloModule m\nENTRY e {\n  x = f32[4] parameter(0)\n  ROOT y = f32[4] multiply(x, x)\n}\n"
    x = np.float32([1, -2, 3, 0.5])
    np.testing.assert_array_equal(compile_hlo(one)(torch.from_numpy(x))[0].numpy(), x * x)
    assert process_world.resolve_world(None, None, lambda: 1) == (0, 1)
    assert process_world.resolve_world(None, None, lambda: 2) == (1, 2)
    with pytest.raises(DistributedError, match="runs on 1 device"):
        compile_hlo(one, rank=1, world_size=2)  # asked explicitly: the module does not fit
