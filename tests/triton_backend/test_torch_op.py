"""The HLO module as a torch custom op: opcheck, eager, torch.compile without graph breaks."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from fusion.errors import EvaluationError
from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo
from triton_backend.integrations.torch_op import torch_op

CORPUS_DIR = Path(__file__).resolve().parents[1] / "data" / "hlo"

RMSNORM = """HloModule rmsnorm_op
region_0 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY main {
  x = f32[4,8] parameter(0)
  g = f32[8] parameter(1)
  sq = f32[4,8] multiply(x, x)
  zero = f32[] constant(0)
  sum = f32[4] reduce(sq, zero), dimensions={1}, to_apply=region_0
  n = f32[] constant(0.125)
  nb = f32[4] broadcast(n), dimensions={}
  mean = f32[4] multiply(sum, nb)
  eps = f32[] constant(1e-06)
  eb = f32[4] broadcast(eps), dimensions={}
  me = f32[4] add(mean, eb)
  r = f32[4] rsqrt(me)
  rb = f32[4,8] broadcast(r), dimensions={0}
  gb = f32[4,8] broadcast(g), dimensions={1}
  xr = f32[4,8] multiply(x, rb)
  ROOT y = f32[4,8] multiply(xr, gb)
}"""

TWO_OUTPUTS = """HloModule two_outputs
ENTRY main {
  x = f32[6] parameter(0)
  y = f32[6] parameter(1)
  s = f32[6] add(x, y)
  m = f32[6] maximum(x, y)
  ROOT t = (f32[6], f32[6]) tuple(s, m)
}"""


@pytest.fixture(scope="module")
def rmsnorm():
    return torch_op(RMSNORM, name="test_rmsnorm")


@pytest.fixture(scope="module")
def two_outputs():
    return torch_op(TWO_OUTPUTS, name="test_two_outputs")


def _inputs():
    generator = torch.Generator().manual_seed(0)
    return torch.randn(4, 8, generator=generator), torch.randn(8, generator=generator)


def _reference(text, *tensors):
    return evaluate(parse_hlo(text), *[t.numpy() for t in tensors])


def test_eager_matches_the_reference_evaluator(rmsnorm):
    x, g = _inputs()
    (expected,) = _reference(RMSNORM, x, g)
    np.testing.assert_allclose(rmsnorm(x, g).numpy(), expected, rtol=1e-5, atol=1e-6)


def test_opcheck(rmsnorm, two_outputs):
    torch.library.opcheck(rmsnorm.op, _inputs())
    torch.library.opcheck(two_outputs.op, (torch.randn(6), torch.randn(6)))


def test_tuple_result(two_outputs):
    x, y = torch.randn(6), torch.randn(6)
    s, m = two_outputs(x, y)
    torch.testing.assert_close(s, x + y)
    torch.testing.assert_close(m, torch.maximum(x, y))


def test_torch_compile_fullgraph_without_graph_breaks(rmsnorm):
    from torch._dynamo.testing import CompileCounter

    def model(x, g):
        return torch.relu(rmsnorm(x * 2.0, g)) + 1.0

    torch._dynamo.reset()
    explanation = torch._dynamo.explain(model)(*_inputs())
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1
    counter = CompileCounter()
    compiled = torch.compile(model, backend=counter, fullgraph=True)
    x, g = _inputs()
    torch.testing.assert_close(compiled(x, g), model(x, g))
    assert counter.frame_count == 1
    aot = torch.compile(model, backend="aot_eager", fullgraph=True)
    torch.testing.assert_close(aot(x, g), model(x, g))


def test_wrong_shape_dtype_count_device_are_clear_errors(rmsnorm):
    x, g = _inputs()
    with pytest.raises(EvaluationError, match=r"argument 0 \(x\) has shape \[4, 9\], expected \[4, 8\]"):
        rmsnorm(torch.zeros(4, 9), g)
    with pytest.raises(EvaluationError, match=r"argument 1 \(g\) has dtype torch.float64, expected torch.float32"):
        rmsnorm(x, g.double())
    with pytest.raises(EvaluationError, match=r"takes 2 tensor\(s\) \(x, g\), got 1"):
        rmsnorm(x)
    with pytest.raises(EvaluationError, match=r"takes 2 tensor\(s\) \(x, g\), got 3"):
        rmsnorm(x, g, g)
    with pytest.raises(EvaluationError, match=r"argument 0 \(x\) is on meta, but the kernels run on cpu"):
        rmsnorm(x.to("meta"), g.to("meta"))
    compiled = torch.compile(lambda a, b: rmsnorm(a, b), backend="eager", fullgraph=True)
    with pytest.raises(Exception, match=r"has shape \[2, 8\], expected \[4, 8\]"):
        compiled(torch.zeros(2, 8), g)


def test_same_name_same_text_is_reused_different_text_refused(rmsnorm):
    assert torch_op(RMSNORM, name="test_rmsnorm") is rmsnorm
    with pytest.raises(EvaluationError, match="already registered with a different HLO module"):
        torch_op(TWO_OUTPUTS, name="test_rmsnorm")


def test_the_rmsnorm_example_runs(capsys):
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).resolve().parents[2] / "examples" / "rmsnorm_torch.py"
    spec = importlib.util.spec_from_file_location("rmsnorm_torch_example", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    assert example.main([]) == 0
    jax_lowered = path.parents[1] / "tests" / "data" / "hlo" / "rmsnorm.before.hlo"
    assert example.main(["--hlo", str(jax_lowered)]) == 0
    out = capsys.readouterr().out
    assert out.count("OK") == 2 and "MISMATCH" not in out


def test_tuned_tilings_from_the_database_are_used(tmp_path):
    from triton_backend.runtime.tuning_db import TuningDb, fusion_key

    text = (CORPUS_DIR / "rmsnorm.after.hlo").read_text()
    module = parse_hlo(text)
    db = TuningDb(tmp_path / "tuning.sqlite")
    db.put(fusion_key(module, "broadcast_multiply_fusion", "h200"), {"tile_sizes": [1, 8]})
    op = torch_op(text, name="test_rmsnorm_tuned", device="h200", tuning_db=db)
    assert op.compiled.fusions["broadcast_multiply_fusion"].tile_sizes == (1, 8)
    assert op.compiled.fusions["add_rsqrt_fusion"].tile_sizes != ()  # untuned: the default
    x, g = torch.randn(4, 8), torch.randn(8)
    (expected,) = _reference(text, x, g)
    np.testing.assert_allclose(op(x, g).numpy(), expected, rtol=1e-5, atol=1e-6)
