"""Running a module as ``N`` local processes, one per device, and gathering their outputs.

:func:`run_processes` writes each module and each rank's inputs to a scratch directory, starts
``N`` Python processes (``python -m triton_backend.driver.process_worker DIR RANK``: the same
interpreter, ``sys.path`` passed on through ``PYTHONPATH`` so they import this checkout), which
join one ``torch.distributed`` world (gloo on CPU; a free localhost port; every call under a
timeout), compile every module with ``compile_hlo`` and run it on their shard, writing their
outputs.  Several modules share one world (processes start once).  When a process fails the
others are killed and a ``DistributedError`` says which rank failed and why (its own located
error, or its exit status and last lines of output); so does one that outlives ``timeout``.
Nothing waits forever.

>>> len(str(free_port())) > 1
True
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from fusion.analysis.spmd_groups import device_counts, world_size_problem
from fusion.errors import DistributedError
from fusion.evaluator.npz_io import load_arrays, save_arrays
from fusion.ir.hlo_module import HloModule
from fusion.ir.shape import flatten_shape
from fusion.text.parser import parse_hlo
from fusion.text.printer import print_hlo
from triton_backend.host.distributed import DEFAULT_TIMEOUT

#: Seconds the processes may take in all (compiling included) before they are killed.
RUN_TIMEOUT = 900.0


def free_port() -> int:
    """A TCP port on localhost nothing listens on now (the world's rendezvous)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    paths = [p for p in sys.path if p and Path(p).exists()]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env.setdefault("OMP_NUM_THREADS", "1")  # N processes share the cores
    return env


def _write_job(work: Path, texts: Sequence[str], modules: Sequence[HloModule],
               inputs: Sequence[Sequence[Sequence]], world_size: int, timeout: float,
               options: Mapping) -> None:
    for j, (text, module, per_rank) in enumerate(zip(texts, modules, inputs)):
        (work / f"m{j}.hlo").write_text(text)
        types = [p.shape.dtype for p in module.entry.parameters]
        for rank, arrays in enumerate(per_rank):
            save_arrays(work / f"m{j}.in{rank}.npz",
                        {f"p{k}": np.asarray(a) for k, a in enumerate(arrays)},
                        {f"p{k}": t for k, t in enumerate(types)})
    (work / "job.json").write_text(json.dumps({
        "modules": len(modules), "world_size": world_size, "port": free_port(),
        "timeout": timeout, "options": dict(options)}))


def _first_failed(procs: Sequence[subprocess.Popen], work: Path, failed: list[int]) -> int:
    """The rank that failed first: by the times in the ranks' reports (the others fail once
    it is gone), else the lowest that exited.  A report counts whether or not its rank has
    exited yet: a rank that raised may still be tearing torch down when a peer's collective,
    failing because of it, exits first."""
    time.sleep(0.2)  # ranks failing for one reason (a world-size mismatch) all report it
    reports = {}
    for r in range(len(procs)):
        path = work / f"error{r}.json"
        if path.exists():  # written whole (process_worker renames it into place)
            reports[r] = json.loads(path.read_text()).get("time", 0.0)
    if not reports:
        return failed[0]
    return min(reports, key=lambda r: (reports[r], r))


def _failure(work: Path, rank: int, procs: Sequence[subprocess.Popen]) -> DistributedError:
    status = procs[rank].returncode
    report = work / f"error{rank}.json"
    if report.exists():
        err = json.loads(report.read_text())
        message, where = err["message"], err.get("where")
        if err.get("line") is None and where:  # no line to show it at: say it in the text
            message, where = f"{where}: {message}", None
        return DistributedError(f"rank {rank} failed: {message}", line=err.get("line"),
                                column=err.get("column"), where=where)
    log = (work / f"log{rank}.txt").read_text(errors="replace").strip().splitlines()[-5:]
    tail = "".join(f"\n    {line}" for line in log)
    return DistributedError(f"rank {rank} died with exit status {status}" +
                            (f"; its last output:{tail}" if tail else ""), where=f"rank {rank}")


def _stop(procs: Sequence[subprocess.Popen]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
    for proc in procs:
        proc.wait()


def _wait_all(procs: Sequence[subprocess.Popen], work: Path, timeout: float) -> None:
    """Wait for every process; on the first failure or past ``timeout``, kill the rest."""
    deadline = time.monotonic() + timeout
    try:
        while True:
            codes = [p.poll() for p in procs]
            failed = [r for r, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                raise _failure(work, _first_failed(procs, work, failed), procs)
            if all(c == 0 for c in codes):
                return
            if time.monotonic() > deadline:
                running = [r for r, c in enumerate(codes) if c is None]
                raise DistributedError(f"rank(s) {', '.join(map(str, running))} did not finish "
                                       f"within {timeout:g} s", where="run_processes")
            time.sleep(0.02)
    finally:
        _stop(procs)


def run_processes(modules: Sequence[str | HloModule], inputs: Sequence[Sequence[Sequence]],
                  world_size: int, *, timeout: float = DEFAULT_TIMEOUT,
                  run_timeout: float = RUN_TIMEOUT, fuse: bool = True,
                  tiling: Mapping | None = None) -> list[list[list[np.ndarray]]]:
    """Run each module (HLO text, whose lines errors then name, or a module;
    ``inputs[j][rank]``: its arguments on ``rank``) on ``world_size``
    processes; per module, per rank, its outputs (flattened).  ``timeout`` bounds every
    collective, ``run_timeout`` the whole run, compiles included (module docstring)."""
    texts = [m if isinstance(m, str) else print_hlo(m) for m in modules]
    modules = [parse_hlo(t) if isinstance(m, str) else m for m, t in zip(modules, texts)]
    for module in modules:  # refused here, before N processes each import torch to say so
        counts = device_counts(module)
        problem = world_size_problem(counts, world_size) if counts.world > 1 else None
        if problem is not None:
            raise DistributedError(problem, where=f"module {module.name}")
    options = {"fuse": fuse, "tiling": {k: list(v) for k, v in dict(tiling or {}).items()}}
    with tempfile.TemporaryDirectory(prefix="fusion-spmd-") as tmp:
        work = Path(tmp)
        _write_job(work, texts, modules, inputs, world_size, timeout, options)
        procs = []
        for rank in range(world_size):
            with open(work / f"log{rank}.txt", "wb") as log:
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "triton_backend.driver.process_worker", tmp,
                     str(rank)], stdout=log, stderr=subprocess.STDOUT, env=_child_env()))
        _wait_all(procs, work, run_timeout)
        return [[_outputs(work / f"m{j}.out{rank}.npz", module) for rank in range(world_size)]
                for j, module in enumerate(modules)]


def _outputs(path: Path, module: HloModule) -> list[np.ndarray]:
    arrays = load_arrays(path)
    return [arrays[f"o{k}"] for k in range(len(flatten_shape(module.entry.root.shape)))]


__all__ = ["RUN_TIMEOUT", "free_port", "run_processes"]
