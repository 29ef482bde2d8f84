"""``torch.export`` of a module calling a ``triton_backend.torch_op``, on CPU (interpreter).

The op must appear as ONE node (``torch.ops.fusion.<name>.default``), survive
``run_decompositions`` and a save/load round trip, and the exported program must compute what
eager torch computes (the op's own results are checked against the reference evaluator).
Dims are static: marking one dynamic is refused by export's constraint check.
"""
from __future__ import annotations

import io

import numpy as np
import pytest
import torch

import triton_backend
from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo

TEXT = """HloModule export_scale
ENTRY e {
  x = f32[4,8] parameter(0)
  g = f32[8] parameter(1)
  b = f32[4,8] broadcast(g), dimensions={1}
  m = f32[4,8] multiply(x, b)
  ROOT t = (f32[4,8], f32[4,8]) tuple(m, x)
}"""


@pytest.fixture(scope="module")
def op():
    # Twice: the second call finds the name bound to the submodule (which must still work).
    first = triton_backend.torch_op(TEXT, name="test_export_scale")
    assert triton_backend.torch_op(TEXT, name="test_export_scale") is first
    return first


class Model(torch.nn.Module):
    def __init__(self, op):
        super().__init__()
        self.op = op

    def forward(self, x, g):
        scaled, passed = self.op(x * 2, g)
        return scaled + 1, passed


def _calls(program) -> list[str]:
    return [str(n.target) for n in program.graph.nodes if n.op == "call_function"]


def _inputs():
    generator = torch.Generator().manual_seed(0)
    return torch.randn(4, 8, generator=generator), torch.randn(8, generator=generator)


def test_export_keeps_the_op_as_one_node_and_runs(op):
    x, g = _inputs()
    model = Model(op)
    program = torch.export.export(model, (x, g))
    calls = _calls(program)
    assert calls.count("fusion.test_export_scale.default") == 1
    assert not any("triton" in c for c in calls)
    assert _calls(program.run_decompositions()).count("fusion.test_export_scale.default") == 1
    got, passed = program.module()(x, g)
    (want, _) = evaluate(parse_hlo(TEXT), (x * 2).numpy(), g.numpy())
    np.testing.assert_array_equal(got.numpy(), want + np.float32(1))
    torch.testing.assert_close(passed, x * 2, rtol=0, atol=0)
    eager = model(x, g)
    torch.testing.assert_close(got, eager[0], rtol=0, atol=0)


def test_exported_program_round_trips_through_save_and_load(op):
    x, g = _inputs()
    program = torch.export.export(Model(op), (x, g))
    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    buffer.seek(0)
    loaded = torch.export.load(buffer)
    assert "fusion.test_export_scale.default" in _calls(loaded)
    torch.testing.assert_close(loaded.module()(x, g)[0], program.module()(x, g)[0],
                               rtol=0, atol=0)


def test_a_dynamic_dim_is_refused_because_hlo_shapes_are_static(op):
    x, g = _inputs()
    with pytest.raises(Exception, match="specialized it to be a constant"):
        torch.export.export(Model(op), (x, g),
                            dynamic_shapes={"x": {0: torch.export.Dim("batch")}, "g": None})
