"""Which process of how many ``compile_hlo`` compiles for, and whether the module fits them.

``compile_hlo(..., rank=, world_size=)``: given, or read from an initialised
``torch.distributed`` (``torchrun``, ``fusion-compile run --world-size``), else one device
(rank 0 of 1).  Several processes need that initialised world, of that size, with that rank:
collectives go through it.  A module partitioned for ``N`` devices must run on ``N``
processes, and every collective's groups must cover them (``fusion.analysis.spmd_groups``):
:func:`check_spmd_module` raises a ``DistributedError`` otherwise, located at the op (or
naming the module), on every rank alike, before any kernel is compiled or any process waits.

>>> resolve_world(None, None)
(0, 1)
>>> resolve_world(0, 1)
(0, 1)
"""
from __future__ import annotations

from collections.abc import Callable

from fusion.analysis.collectives import is_collective, single_device_problem
from fusion.analysis.spmd_groups import device_counts, spmd_problem, world_size_problem
from fusion.errors import DistributedError, UnsupportedOpError
from fusion.ir.hlo_module import HloModule


def _initialised() -> tuple[int, int] | None:
    try:
        import torch.distributed as dist  # noqa: PLC0415
    except ImportError:
        return None
    if not (dist.is_available() and dist.is_initialized()):
        return None
    return dist.get_rank(), dist.get_world_size()


def resolve_world(rank: int | None, world_size: int | None,
                  devices_asked: Callable[[], int] = lambda: 1) -> tuple[int, int]:
    """``(rank, world_size)`` for ``compile_hlo`` (module docstring).

    ``devices_asked`` gives the device count of the module's header: a module for one device
    runs on each process alone when the world is only read from ``torch.distributed`` (the
    torch op in a data-parallel job: every rank runs its own copy).
    """
    joined = _initialised()
    if rank is None and world_size is None and joined is not None and joined[1] > 1 \
            and devices_asked() == 1:
        return 0, 1
    if world_size is None:
        world_size = joined[1] if joined is not None else 1
    if rank is None:
        rank = joined[0] if joined is not None and world_size > 1 else 0
    if world_size < 1 or not 0 <= rank < world_size:
        raise DistributedError(f"rank {rank} of world size {world_size}: expected "
                               "0 <= rank < world_size", where="world_size")
    if world_size > 1 and joined is None:
        raise DistributedError(
            f"world_size={world_size} needs an initialised torch.distributed process group "
            "(torch.distributed.init_process_group, torchrun, or fusion-compile run "
            "--world-size)", where="world_size")
    if world_size > 1 and joined != (rank, world_size):
        raise DistributedError(
            f"rank {rank} of {world_size} asked, but this process is rank {joined[0]} of the "
            f"{joined[1]} processes of its torch.distributed world", where="world_size")
    return rank, world_size


def check_spmd_module(module: HloModule, world_size: int) -> None:
    """The module runs on ``world_size`` processes and its collectives' groups cover them."""
    counts = device_counts(module)
    problem = world_size_problem(counts, world_size)
    if problem is not None:
        raise DistributedError(problem, where=f"module {module.name}")
    for comp in module.computations:
        for instr in comp.instructions:
            reason = spmd_problem(instr, counts) if is_collective(instr.opcode) else None
            if reason is not None:
                loc = instr.location
                raise DistributedError(reason, line=loc.line if loc else None,
                                       column=loc.column if loc else None, where=instr.name)


def check_one_device(module: HloModule) -> None:
    """On one process, a collective naming another device has no value: the host's collective
    executors copy, so the backend refuses it itself (``op_coverage`` says so first)."""
    for comp in module.computations:
        for instr in comp.instructions:
            reason = single_device_problem(instr, module)
            if reason is not None:
                loc = instr.location
                raise UnsupportedOpError(reason, line=loc.line if loc else None,
                                         column=loc.column if loc else None, where=instr.name)


__all__ = ["check_one_device", "check_spmd_module", "resolve_world"]
