"""Sharded JAX programs on one device and across devices: the sharding custom calls, the
collectives' indexing maps and VJPs, and the evaluator's lockstep SPMD mode, compared with XLA
(``tests/data/hlo_sharded``, written by ``tests/conformance/sharded_programs.py``)."""
from __future__ import annotations

import numpy as np
import pytest

from fusion import evaluate, parse_hlo, print_hlo, verify_module
from fusion.autodiff import vjp
from fusion.errors import EvaluationError, HloVerifyError
from fusion.evaluator.spmd import evaluate_spmd
from tests.conformance.sharded_programs import CASES, corpus_files, xla_shards
from tests.conformance.xla_oracle import run_xla
from tiling.indexing_analysis.op_indexing import op_input_to_output, op_output_to_input
from tiling.indexing_analysis.operands import Operand

ONE_DEVICE = [(name, variant) for name in sorted(CASES) for variant in ("before", "after")]
SEVERAL = [(name, n) for name, (_, counts) in sorted(CASES.items()) for n in counts if n > 1]


def _text(name: str, n: int, variant: str) -> str:
    before, after = corpus_files(name, n)
    return (before if variant == "before" else after).read_text()


def _inputs(module, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(p.shape.dims).astype(np.float32) for p in module.entry.parameters]


@pytest.mark.parametrize("name,variant", ONE_DEVICE)
def test_one_device_program_matches_xla(name, variant):
    module = parse_hlo(_text(name, 1, variant))
    verify_module(module)
    args = _inputs(module)
    # XLA rejects its own optimized dp_train_step text (a layout-less all-reduce buffer), and
    # both variants compute the same function: the unoptimized one is the reference.
    want = run_xla(_text(name, 1, "before"), *args)
    got = evaluate(module, *args)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("name,n", SEVERAL)
def test_printer_keeps_shardings_and_shardy_attributes(name, n):
    for variant in ("before", "after"):
        text = _text(name, n, variant)
        printed = print_hlo(parse_hlo(text))
        assert print_hlo(parse_hlo(printed)) == printed
        for marker in ("xla.sdy.", "sharding={", "custom_call_target=\"xla.sdy"):
            assert (marker in text) == (marker in printed), marker


def test_sharding_constraint_is_kept_and_is_the_identity():
    text = _text("sharding_constraint", 1, "before")
    printed = print_hlo(parse_hlo(text))
    assert 'custom_call_target="Sharding", sharding={replicated}' in printed
    assert 'xla.sdy.sharding="#sdy.sharding_per_value' in printed


@pytest.mark.parametrize("name,n", SEVERAL)
def test_global_program_for_several_devices_on_one_device(name, n):
    """Before partitioning, a program annotated for n devices is the global computation: on
    one device its annotations are the identity, and it gives XLA's one-device result; one
    that holds shard_map's local shapes needs the n devices, and says so."""
    text = _text(name, n, "before")
    module = parse_hlo(text)
    args = _inputs(module)
    if "xla.sdy.GlobalToLocalShape" in text:
        with pytest.raises(EvaluationError, match="split over several devices"):
            evaluate(module, *args)
        return
    for g, w in zip(evaluate(module, *args), run_xla(text, *args)):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("name,n", SEVERAL)
def test_partitioned_program_on_n_devices_matches_xla(name, n, tmp_path):
    inputs, want = xla_shards(name, n, seed=5, tmp=tmp_path)
    got = evaluate_spmd(parse_hlo(_text(name, n, "after")), inputs)
    for device in range(n):
        assert len(got[device]) == len(want[device])
        for g, w in zip(got[device], want[device]):
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-5, err_msg=f"device {device}")


_ALL_REDUCE = """HloModule m, num_partitions=2
add { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b) }
ENTRY e {
  x = f32[2] parameter(0)
  ROOT r = f32[2] all-reduce(x), channel_id=1, replica_groups={GROUPS},
    use_global_device_ids=true, to_apply=add
}"""


def test_spmd_needs_one_argument_list_per_device():
    module = parse_hlo(_ALL_REDUCE.replace("GROUPS", "{0,1}"))
    with pytest.raises(EvaluationError, match="runs on 2 devices"):
        evaluate_spmd(module, [[np.zeros(2, np.float32)]])


def test_spmd_groups_that_miss_a_device_are_an_error_not_a_hang():
    module = parse_hlo(_ALL_REDUCE.replace("GROUPS", "{0}"))
    with pytest.raises(EvaluationError, match="do not name device 1"):
        evaluate_spmd(module, [[np.zeros(2, np.float32)]] * 2, timeout=5)


def test_spmd_device_that_never_arrives_times_out():
    module = parse_hlo(_ALL_REDUCE.replace("GROUPS", "{0,1}").replace("num_partitions=2",
                                                                      "num_partitions=3"))
    with pytest.raises(EvaluationError, match="waited|stopped|do not name"):
        evaluate_spmd(module, [[np.zeros(2, np.float32)]] * 3, timeout=1)


_SHARDED = """HloModule m
add { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b) }
ENTRY e {
  x = f32[4,2] parameter(0)
  s = f32[4,2] custom-call(x), custom_call_target="Sharding", sharding={replicated}
  t = f32[4,2] tanh(s)
  r = f32[4,2] all-reduce(t), replica_groups={{0}}, to_apply=add
  g = f32[4,2] all-gather(r), replica_groups={{0}}, dimensions={0}
  m = f32[4,2] multiply(g, x)
  p = f32[4,2] collective-permute(m), source_target_pairs={{0,0}}
  ROOT y = f32[4,2] custom-call(p), custom_call_target="SPMDFullToShardShape", sharding={manual}
}"""


def test_vjp_transposes_collectives_and_sharding_calls():
    module = parse_hlo(_SHARDED)
    backward = vjp(module)
    text = print_hlo(backward)
    for op in ("reduce-scatter(", "all-reduce(", "collective-permute(",
               'custom_call_target="SPMDShardToFullShape"', 'custom_call_target="Sharding"'):
        assert op in text, op
    x = np.random.default_rng(2).standard_normal((4, 2)).astype(np.float32)
    ct = np.random.default_rng(3).standard_normal((4, 2)).astype(np.float32)
    (grad,) = evaluate(backward, x, ct)
    # y = tanh(x) * x on one device: dy/dx = (1 - tanh^2) x + tanh
    expected = ct * ((1 - np.tanh(x) ** 2) * x + np.tanh(x))
    np.testing.assert_allclose(grad, expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(run_xla(text, x, ct)[0], expected, rtol=1e-5, atol=1e-6)


def test_vjp_of_a_max_all_reduce_is_refused():
    text = _SHARDED.replace("ROOT c = f32[] add(a, b)", "ROOT c = f32[] maximum(a, b)")
    with pytest.raises(Exception, match="not a sum"):
        vjp(parse_hlo(text))


def test_collectives_and_sharding_calls_have_identity_indexing_on_one_device():
    module = parse_hlo(_SHARDED)
    comp = module.entry
    for name in ("s", "r", "g", "p", "y"):
        instr = comp.instruction(name)
        operand = Operand(comp.instruction(instr.operands[0]).shape)
        (o2i,) = op_output_to_input(instr, (operand,), 0)
        (i2o,) = op_input_to_output(instr, (operand,), 0)
        assert str(o2i).startswith("(d0, d1) -> (d0, d1)"), (name, str(o2i))
        assert str(i2o).startswith("(d0, d1) -> (d0, d1)"), (name, str(i2o))


def test_a_shard_of_another_shape_has_undefined_indexing_and_is_refused():
    text = _SHARDED.replace("ROOT y = f32[4,2] custom-call(p)", "ROOT y = f32[2,2] custom-call(p)")
    module = parse_hlo(text)
    instr = module.entry.root
    operand = Operand(module.entry.instruction("p").shape)
    assert str(op_output_to_input(instr, (operand,), 0)[0]) == "UNDEFINED"
    with pytest.raises(EvaluationError, match="a shard of a value split over several devices"):
        evaluate(module, np.zeros((4, 2), np.float32))
    bad = _SHARDED.replace("ROOT y = f32[4,2] custom-call(p)", "ROOT y = s32[4,2] custom-call(p)")
    with pytest.raises(HloVerifyError, match="keeps the element type and rank"):
        verify_module(parse_hlo(bad))
