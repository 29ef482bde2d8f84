"""CUDA graphs for a compiled module: its launches captured once, then replayed per call.

A module's call costs its kernels plus the Python that launches them, one Triton launch each
(3-13 us).  ``compile_hlo(..., cuda_graph=True)`` (and ``torch_op(..., cuda_graph=True)``)
does what torch.compile's ``mode="reduce-overhead"`` does: the first call captures the ENTRY
program's launches into a ``torch.cuda.CUDAGraph`` (after one ordinary run, so Triton has
compiled and loaded every kernel outside the capture), and every call copies its arguments
into the graph's static input buffers (one multi-tensor copy), replays the graph and returns
the results.  The HLO fixes every shape and dtype, and a call's arguments are validated
(contiguous, on the device) before they reach the graph, so one capture serves every call:
the input signature never changes after validation.

* **Results** are fresh tensors by default (copies of the graph's output buffers, made on
  the stream after the replay).  ``cuda_graph="reuse-outputs"`` returns the graph's own
  output buffers instead: no copy, but the next call of the module overwrites them (and they
  may be its input buffers, for a module returning a parameter); clone what you keep.
* **What cannot be captured is refused**, at compile time where the module says so: a
  ``while`` or ``conditional`` reads its predicate or branch index back on the host on every
  iteration, a collective of a module running as several processes is a
  ``torch.distributed`` call, and ``rng-get-and-update-state`` (an ``rng``'s generator)
  advances its counter on the host.  A capture that fails for any other reason (a host op that
  synchronises, such as a library call checking its result) is an ``UnsupportedOpError``
  naming the module and torch's reason, raised on the call; nothing is replayed.
* **Concurrency**: calls of one module take a lock around copy, replay and result copy; a
  call on another stream than the previous one first waits for that one.
* **Garbage collection** is run before a capture and held off during it: torch no longer
  collects before a capture, and a dead reference cycle holding another module's CUDA graph
  that Python frees mid-capture destroys that graph, which CUDA forbids while a stream
  captures and answers by invalidating the capture (seen on an H200 as "operation not
  permitted when stream is capturing (function reset)" and then a failed capture).
* **Under the Triton interpreter** (no GPU) the option does nothing: kernels run on CPU
  tensors, which CUDA graphs do not capture.

>>> from fusion.text.parser import parse_hlo
>>> graph_refusal(parse_hlo('''HloModule m
... c { s = (s32[]) parameter(0)
...     i = s32[] get-tuple-element(s), index=0
...     k = s32[] constant(3)
...     ROOT p = pred[] compare(i, k), direction=LT }
... b { s = (s32[]) parameter(0)
...     i = s32[] get-tuple-element(s), index=0
...     one = s32[] constant(1)
...     n = s32[] add(i, one)
...     ROOT t = (s32[]) tuple(n) }
... ENTRY e { x = s32[] parameter(0)
...     t = (s32[]) tuple(x)
...     ROOT w = (s32[]) while(t), condition=c, body=b }'''), ("e",), place=None)[1]
'while reads its predicate or branch index back on the host on every run'
"""
from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Callable, Sequence
from typing import Any

import torch

from fusion.errors import BadArgumentError, UnsupportedOpError
from fusion.ir.hlo_module import HloInstruction, HloModule
from fusion.opcodes import traits

#: The values of ``cuda_graph``: off, on with fresh results, on with the graph's own buffers.
MODES = (False, True, "reuse-outputs")


def check_mode(cuda_graph: Any) -> bool | str:
    """``cuda_graph`` when it is one of :data:`MODES`, else a ``BadArgumentError``."""
    if cuda_graph is None:
        return False
    # ``is`` for the booleans: 1 == True, and 1 is not an option.
    if not (cuda_graph is True or cuda_graph is False or cuda_graph == "reuse-outputs"):
        raise BadArgumentError(f"cuda_graph={cuda_graph!r} is not an option", where="cuda_graph",
                               expected="False, True or 'reuse-outputs'")
    return cuda_graph


def graph_refusal(module: HloModule, computations: Sequence[str],
                  place: Any) -> tuple[HloInstruction, str] | None:
    """The first instruction of ``computations`` (those the host runs,
    ``module_runner.host_computations``) that a CUDA graph cannot capture, and why (None:
    none).  ``place`` is the module's place among several processes (None: one device)."""
    for name in computations:
        for instr in module.computation(name).instructions:
            op = traits(instr.opcode)
            if op.control_flow and not op.inlinable:
                return instr, (f"{instr.opcode} reads its predicate or branch index back on "
                               "the host on every run")
            if op.side_effect:
                return instr, f"{instr.opcode} changes a state on the host on every run"
            if op.collective and place is not None:
                return instr, (f"{instr.opcode} is a torch.distributed call when the module "
                               "runs as several processes")
    return None


def check_capturable(module: HloModule, computations: Sequence[str], place: Any) -> None:
    """Raise the located ``UnsupportedOpError`` of :func:`graph_refusal`, if any."""
    refusal = graph_refusal(module, computations, place)
    if refusal is not None:
        instr, why = refusal
        loc = instr.location
        raise UnsupportedOpError(f"cuda_graph: {why}, which a CUDA graph cannot capture; "
                                 "compile with cuda_graph=False", where=instr.name,
                                 line=loc.line if loc else None, column=loc.column if loc else None)


class GraphedRun:
    """``run(tensors) -> result`` (a host plan's run on validated ENTRY arguments) captured
    into a CUDA graph on the first call and replayed on every call (module docstring)."""

    def __init__(self, run: Callable[[Sequence[torch.Tensor]], Any], device: torch.device,
                 module_name: str, reuse_outputs: bool) -> None:
        self._run = run
        self._device = device
        self._module_name = module_name
        self._reuse_outputs = reuse_outputs
        self._lock = threading.Lock()
        self._captured: tuple[torch.cuda.CUDAGraph, list[torch.Tensor], Any] | None = None
        self._stream: torch.cuda.Stream | None = None

    def __call__(self, tensors: Sequence[torch.Tensor]) -> Any:
        with self._lock:
            stream = torch.cuda.current_stream(self._device)
            if self._stream is not None and self._stream != stream:
                stream.wait_stream(self._stream)  # the last replay and its copies come first
            self._stream = stream
            captured = self._captured or self._capture(tensors)
            graph, inputs, result = captured
            if inputs:
                torch._foreach_copy_(inputs, list(tensors))
            graph.replay()
            if self._reuse_outputs:
                return result
            return _cloned(result)

    def _capture(self, tensors: Sequence[torch.Tensor]):
        inputs = [t.clone() for t in tensors]
        side = torch.cuda.Stream(self._device)
        side.wait_stream(torch.cuda.current_stream(self._device))
        try:
            with torch.cuda.stream(side):
                self._run(inputs)  # Triton compiles and loads the kernels outside the capture
            torch.cuda.current_stream(self._device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with _no_collection_while_capturing():
                with torch.cuda.graph(graph):
                    result = self._run(inputs)
        except RuntimeError as err:
            raise UnsupportedOpError(
                f"cuda_graph: capturing module {self._module_name} failed ({err}); compile "
                "with cuda_graph=False", where=self._module_name) from err
        self._captured = (graph, inputs, result)
        return self._captured


@contextlib.contextmanager
def _no_collection_while_capturing():
    """Collect cyclic garbage now and not again until the block ends (module docstring)."""
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _cloned(value: Any) -> Any:
    if isinstance(value, tuple):
        return tuple(_cloned(v) for v in value)
    return value.clone()


__all__ = ["GraphedRun", "MODES", "check_capturable", "check_mode", "graph_refusal"]
