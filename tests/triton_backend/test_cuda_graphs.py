"""CUDA graphs (``driver/cuda_graphs``): the option's values, the located refusals, the no-op
under the interpreter, and the capture-once/replay bookkeeping, checked on CPU against a
stand-in for ``torch.cuda`` whose graph replays what was launched during its capture."""
from __future__ import annotations

import contextlib
import gc
import weakref

import pytest
import torch

from fusion.errors import BadArgumentError, UnsupportedOpError
from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo
from triton_backend import compile_hlo
from triton_backend.driver.cuda_graphs import GraphedRun, check_mode

NEGATE = """HloModule m
ENTRY e {
  x = f32[4] parameter(0)
  ROOT n = f32[4] negate(x)
}"""

WHILE = """HloModule loop
c { s = (s32[]) parameter(0)
    i = s32[] get-tuple-element(s), index=0
    k = s32[] constant(3)
    ROOT p = pred[] compare(i, k), direction=LT }
b { s = (s32[]) parameter(0)
    i = s32[] get-tuple-element(s), index=0
    one = s32[] constant(1)
    n = s32[] add(i, one)
    ROOT t = (s32[]) tuple(n) }
ENTRY e {
  x = s32[] parameter(0)
  t = (s32[]) tuple(x)
  ROOT w = (s32[]) while(t), condition=c, body=b
}"""


@pytest.mark.parametrize("value", ["yes", 1, "reuse_outputs", [True]])
def test_an_unknown_option_is_a_clear_error(value):
    with pytest.raises(BadArgumentError, match="cuda_graph"):
        check_mode(value)
    assert check_mode(None) is False and check_mode("reuse-outputs") == "reuse-outputs"


def test_a_while_loop_is_refused_at_its_line():
    with pytest.raises(UnsupportedOpError) as err:
        compile_hlo(WHILE, cuda_graph=True)
    assert "while reads its predicate" in str(err.value) and (err.value.line, err.value.column) == (14, 3)


def test_under_the_interpreter_the_option_changes_nothing():
    module = parse_hlo(NEGATE)
    compiled = compile_hlo(module, cuda_graph=True)
    assert compiled.cuda_graph is True and compiled.device.type == "cpu"
    x = torch.randn(4)
    for _ in range(2):
        (out,) = compiled(x)
        assert torch.equal(out, torch.from_numpy(evaluate(module, x.numpy())[0]))


class _Tape:
    """A CUDA graph stand-in: the launches made while it captures are what it replays."""

    capturing: "_Tape | None" = None

    def __init__(self):
        self.launches = []

    def replay(self):
        for launch in self.launches:
            launch()


def _launch(kernel):
    """Run ``kernel`` now, and record it in the graph being captured."""
    kernel()
    if _Tape.capturing is not None:
        _Tape.capturing.launches.append(kernel)


@contextlib.contextmanager
def _capturing(graph):
    _Tape.capturing = graph
    try:
        yield
    finally:
        _Tape.capturing = None


class _Stream:
    def wait_stream(self, other):
        pass


@pytest.fixture
def fake_cuda(monkeypatch):
    stream = _Stream()
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: stream)
    monkeypatch.setattr(torch.cuda, "Stream", lambda device=None: _Stream())
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "CUDAGraph", _Tape)
    monkeypatch.setattr(torch.cuda, "graph", _capturing)


def _doubling(calls):
    def run(tensors):
        calls.append(1)
        (x,) = tensors
        out = torch.empty_like(x)
        _launch(lambda: torch.mul(x, 2, out=out))
        return (out,)
    return run


def test_one_capture_then_replays_with_each_calls_arguments(fake_cuda):
    calls = []
    graphed = GraphedRun(_doubling(calls), torch.device("cpu"), "m", reuse_outputs=False)
    results = [graphed([torch.full((3,), float(k))]) for k in range(3)]
    assert len(calls) == 2  # the warm-up run and the captured one; then replays only
    for k, (out,) in enumerate(results):
        assert torch.equal(out, torch.full((3,), 2.0 * k))  # fresh: later calls left it alone


def test_reused_outputs_are_the_graphs_own_buffers(fake_cuda):
    graphed = GraphedRun(_doubling([]), torch.device("cpu"), "m", reuse_outputs=True)
    (first,) = graphed([torch.ones(3)])
    (second,) = graphed([torch.full((3,), 5.0)])
    assert first.data_ptr() == second.data_ptr() and torch.equal(first, torch.full((3,), 10.0))


def test_a_failed_capture_is_a_clear_error(fake_cuda):
    def syncing(tensors):
        if _Tape.capturing is not None:
            raise RuntimeError("operation not permitted when stream is capturing")
        return tuple(tensors)

    graphed = GraphedRun(syncing, torch.device("cpu"), "sync_module", reuse_outputs=False)
    with pytest.raises(UnsupportedOpError, match="capturing module sync_module failed"):
        graphed([torch.ones(2)])


def _watching_the_capture(seen, probe):
    def run(tensors):
        if _Tape.capturing is not None:
            seen.append(probe())
        return tuple(tensors)
    return run


def test_dead_graphs_are_freed_before_a_capture(fake_cuda):
    # A dead cycle holding another module's graph: freed mid-capture, CUDA would invalidate
    # the capture (the H200's gpt2_block_f32 reuse-outputs failure).
    class Holder:
        pass

    enabled = gc.isenabled()
    gc.disable()  # no automatic collection: only the capture's own can free the cycle
    try:
        dead = Holder()
        dead.graph, dead.cycle = _Tape(), dead
        alive = weakref.ref(dead.graph)
        del dead
        seen = []
        GraphedRun(_watching_the_capture(seen, lambda: alive() is None), torch.device("cpu"),
                   "m", reuse_outputs=False)([torch.ones(2)])
        assert seen == [True]
    finally:
        if enabled:
            gc.enable()


def test_garbage_collection_waits_for_the_capture_to_end(fake_cuda):
    gc.enable()
    seen = []
    GraphedRun(_watching_the_capture(seen, gc.isenabled), torch.device("cpu"), "m",
               reuse_outputs=False)([torch.ones(2)])
    assert seen == [False] and gc.isenabled()


def test_the_torch_op_takes_the_option():
    from triton_backend import torch_op

    op = torch_op(NEGATE, name="test_cuda_graph_negate", cuda_graph=True)
    assert op.compiled.cuda_graph is True
    x = torch.randn(4)
    assert torch.equal(op(x), -x)
    with pytest.raises(Exception, match="different HLO module or backward"):
        torch_op(NEGATE, name="test_cuda_graph_negate", cuda_graph=False)
