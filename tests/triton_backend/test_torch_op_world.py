"""The torch op inside a ``torch.distributed`` world (gloo, two spawned processes): a module
partitioned for two devices runs its collectives across the ranks, and a one-device module runs
alone on each rank (a data-parallel job's copy); both equal the evaluators'."""
from __future__ import annotations

import datetime

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from fusion import parse_hlo
from fusion.evaluator import evaluate
from fusion.evaluator.npz_io import load_arrays
from fusion.evaluator.spmd import evaluate_spmd
from tests.conformance.sharded_programs import corpus_files
from triton_backend.driver.process_launch import free_port

ONE = """HloModule one_device
ENTRY e {
  x = f32[2,4] parameter(0)
  t = f32[2,4] tanh(x)
  ROOT y = f32[2,4] multiply(t, x)
}"""


def _inputs(rank: int) -> np.ndarray:
    return np.random.default_rng(40 + rank).standard_normal((2, 4)).astype(np.float32)


def _rank(rank: int, port: int, out_dir: str, two_device: str) -> None:
    from triton_backend import torch_op  # noqa: PLC0415 - in the spawned process

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2, timeout=datetime.timedelta(seconds=60))
    try:
        x = torch.from_numpy(_inputs(rank))
        sharded = torch_op(two_device, name="world_collectives", backward=None)(x)
        alone = torch_op(ONE, name="world_one_device", backward=None)(x)
        np.savez(f"{out_dir}/rank{rank}.npz", alone=alone.numpy(),
                 **{f"o{k}": t.numpy() for k, t in enumerate(sharded)})
    finally:
        dist.destroy_process_group()


def test_torch_op_in_a_two_rank_world_matches_the_evaluators(tmp_path):
    text = corpus_files("collectives", 2)[1].read_text()
    # spawn: a fresh interpreter per rank (no forked torch state); a failing rank stops both
    mp.spawn(_rank, args=(free_port(), str(tmp_path), text), nprocs=2, join=True)
    per_rank = [[_inputs(r)] for r in range(2)]
    want = evaluate_spmd(parse_hlo(text), per_rank)
    for rank in range(2):
        got = load_arrays(tmp_path / f"rank{rank}.npz")
        for k, w in enumerate(want[rank]):
            np.testing.assert_allclose(got[f"o{k}"], w, rtol=1e-5, atol=1e-5,
                                       err_msg=f"rank {rank} output {k}")
        (alone,) = evaluate(parse_hlo(ONE), per_rank[rank][0])
        np.testing.assert_allclose(got["alone"], alone, rtol=1e-5, atol=1e-6,
                                   err_msg=f"rank {rank}, one-device module")
