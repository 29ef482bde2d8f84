"""One process of a multi-process run (``process_launch``): ``python -m
triton_backend.driver.process_worker DIR RANK``.

Joins the world ``DIR/job.json`` describes (gloo on CPU; NCCL when every rank has a GPU),
compiles each module ``DIR/mJ.hlo`` with ``compile_hlo`` (which reads the rank and world size
from ``torch.distributed``), runs it on ``DIR/mJ.inRANK.npz`` and writes ``DIR/mJ.outRANK.npz``
(``o0..oM``).  A failure is written to ``DIR/errorRANK.json`` (the located message) and the
process exits with status 1; the launcher reports it.
"""
from __future__ import annotations

import datetime
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from fusion.errors import FusionCompilerError
from fusion.evaluator.npz_io import load_arrays, save_arrays
from fusion.ir.shape import flatten_shape
from fusion.text.parser import parse_hlo
from triton_backend.driver.module_compiler import compile_hlo
from triton_backend.host.input_validation import tensor_from_numpy, tensor_to_numpy


def _backend(world_size: int) -> str:
    return "nccl" if torch.cuda.is_available() and torch.cuda.device_count() >= world_size \
        else "gloo"


def _run(work: Path, rank: int) -> None:
    job = json.loads((work / "job.json").read_text())
    world, options = job["world_size"], job["options"]
    backend = _backend(world)
    if backend == "nccl":
        torch.cuda.set_device(rank)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{job['port']}", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=job["timeout"]))
    try:
        for j in range(job["modules"]):
            module = parse_hlo((work / f"m{j}.hlo").read_text())
            compiled = compile_hlo(module, fuse=options["fuse"], tiling=options["tiling"])
            arrays = load_arrays(work / f"m{j}.in{rank}.npz")
            args = [tensor_from_numpy(arrays[f"p{k}"], p.shape.dtype, compiled.device)
                    for k, p in enumerate(module.entry.parameters)]
            outputs = [tensor_to_numpy(t) for t in compiled(*args)]
            types = [s.dtype for s in flatten_shape(module.entry.root.shape)]
            save_arrays(work / f"m{j}.out{rank}.npz",
                        {f"o{k}": a for k, a in enumerate(outputs)},
                        {f"o{k}": t for k, t in enumerate(types)})
    except Exception as err:
        # Reported before the world is torn down: the peers' collectives fail once this
        # rank leaves it, and the launcher names the rank whose report is the earliest.
        _report(work, rank, err)
        raise
    finally:
        dist.destroy_process_group()


def _report(work: Path, rank: int, err: Exception) -> None:
    """Write ``DIR/errorRANK.json``: the located message and the time of the failure."""
    if isinstance(err, FusionCompilerError):
        report = {"message": err.message, "line": err.line, "column": err.column,
                  "where": err.where}
    else:
        report = {"message": f"{type(err).__name__}: {err}", "line": None, "column": None,
                  "where": f"rank {rank}"}
    report["time"] = time.time()  # the launcher reports the rank that failed first
    # Whole or not at all: the launcher reads reports while ranks are still exiting.
    partial = work / f"error{rank}.json.part"
    partial.write_text(json.dumps(report))
    os.replace(partial, work / f"error{rank}.json")


def main(argv: list[str]) -> int:
    work, rank = Path(argv[0]), int(argv[1])
    try:
        _run(work, rank)
    except Exception as err:  # noqa: BLE001 - any failure is reported to the launcher
        if not (work / f"error{rank}.json").exists():  # one before the world was joined
            _report(work, rank, err)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
