"""A compiled module's host plan is one generated function (``driver/plan_code``): it computes
what the interpreted program did (checked against the reference evaluator on modules with
tuples, get-tuple-element, host ops, constants, repeated parameters, parameter results,
permuted layouts), and reuses a dead intermediate's buffer within a call only where that is
safe (never a result, a live value, or a value a host op or a view reads)."""
from __future__ import annotations

import traceback

import pytest
import torch

from fusion.evaluator import evaluate
from fusion.evaluator.npz_io import random_inputs
from fusion.text.parser import parse_hlo
from triton_backend import compile_hlo
from triton_backend.driver.host_plan import HostPlan, host_plan
from triton_backend.driver.module_runner import Program, Step
from triton_backend.host.input_validation import tensor_from_numpy, tensor_to_numpy

NEG = "f { a = f32[4,8] parameter(0)\n    ROOT n = f32[4,8] negate(a) }\n"
EXP = "g { b = f32[4,8] parameter(0)\n    ROOT e = f32[4,8] exponential(b) }\n"
ADD = ("h { c = f32[4,8] parameter(0)\n    d = f32[4,8] parameter(1)\n"
       "    ROOT s = f32[4,8] add(c, d) }\n")
TWO = ("t { p = f32[4,8] parameter(0)\n    q = f32[4,8] negate(p)\n"
       "    r = f32[4,8] exponential(p)\n    ROOT u = (f32[4,8], f32[4,8]) tuple(q, r) }\n")

#: A chain: n dies when m is made, so k (same shape and dtype) is written into n's buffer.
CHAIN = f"""HloModule m
{NEG}{EXP}
ENTRY e {{
  x = f32[4,8] parameter(0)
  n = f32[4,8] fusion(x), kind=kLoop, calls=f
  m = f32[4,8] fusion(n), kind=kLoop, calls=g
  ROOT k = f32[4,8] fusion(m), kind=kLoop, calls=f
}}"""

#: Everything at once: a multi-output kernel and its elements, a constant, a parameter read
#: twice and returned, a host view, a nested result tuple.
LITERAL = "{" + ", ".join("{" + ", ".join(str(r * 8 + c) for c in range(8)) + "}"
                           for r in range(4)) + "}"
MIXED = f"""HloModule m
{NEG}{EXP}{ADD}{TWO}
ENTRY e {{
  x = f32[4,8] parameter(0)
  y = f32[4,8] parameter(1)
  c = f32[4,8] constant({LITERAL})
  pair = (f32[4,8], f32[4,8]) fusion(x), kind=kLoop, calls=t
  q = f32[4,8] get-tuple-element(pair), index=0
  r = f32[4,8] get-tuple-element(pair), index=1
  s = f32[4,8] fusion(q, y), kind=kLoop, calls=h
  s2 = f32[4,8] fusion(s, c), kind=kLoop, calls=h
  xx = f32[4,8] fusion(x, x), kind=kLoop, calls=h
  v = f32[32] reshape(r)
  n = f32[4,8] fusion(s2), kind=kLoop, calls=f
  nv = (f32[4,8], f32[32]) tuple(n, v)
  ROOT out = ((f32[4,8], f32[32]), f32[4,8], f32[4,8], f32[4,8], (f32[4,8], f32[4,8])) tuple(nv, y, xx, q, pair)
}}"""


def _inputs(text: str):
    module = parse_hlo(text)
    arrays = random_inputs(module, seed=3)
    tensors = [tensor_from_numpy(a, p.shape.dtype) for a, p in zip(arrays, module.entry.parameters)]
    return module, arrays, tensors


def _check(text: str, compiled=None):
    module, arrays, tensors = _inputs(text)
    compiled = compiled or compile_hlo(text)
    outputs = compiled(*tensors)
    references = evaluate(module, *arrays)
    assert len(outputs) == len(references)
    for ref, out in zip(references, outputs):
        assert out.is_contiguous()
        assert torch.allclose(torch.from_numpy(tensor_to_numpy(out)), torch.from_numpy(ref),
                              rtol=1e-5, atol=1e-6)
    return compiled, tensors, outputs


def _entry_plan(compiled):
    return compiled.__dict__["_plans"][compiled.module.entry_name]


def test_a_chain_writes_its_third_kernel_into_the_first_ones_dead_buffer():
    compiled, tensors, (out,) = _check(CHAIN)
    assert len(compiled.fusions) == 3
    plan = _entry_plan(compiled)
    assert plan.reused == (("k", 0, "n"),)
    assert plan.source.count("allocate") == 2  # n and m allocate; k does not
    # The same in a plan without reuse, and nothing of a call survives into the next one.
    plain = host_plan(compiled.programs["e"], compiled.module.entry, compiled.fusions,
                      compiled.device, contiguous_parameters=True, reuse=False)
    assert plain.reused == () and plain.source.count("allocate") == 3
    assert torch.equal(plain.run(tensors, None), out)
    again, = compiled(*tensors)
    assert torch.equal(again, out) and again.data_ptr() != out.data_ptr()


def test_the_reused_buffer_is_the_dead_ones(monkeypatch):
    compiled = compile_hlo(CHAIN)
    x = torch.randn(4, 8)
    compiled(x)
    plan = _entry_plan(compiled)
    made = []
    namespace = plan.run.__globals__
    for name in [n for n in namespace if n.startswith("allocate")]:
        allocate = namespace[name]
        namespace[name] = lambda allocate=allocate: made.append(allocate()) or made[-1]
    out, = compiled(x)
    assert len(made) == 2 and out.data_ptr() == made[0].data_ptr()  # n's buffer
    assert torch.allclose(out, -torch.exp(-x))


def test_a_mixed_module_matches_the_evaluator_and_its_results_share_nothing():
    compiled, tensors, outputs = _check(MIXED)
    plan = _entry_plan(compiled)
    # y is returned as given (a copy), x read twice; the view of r and the results are kept.
    assert "constant" in plan.source and "pad_arguments" in plan.source
    ptrs = [t.untyped_storage().data_ptr() for t in outputs]
    assert len(set(ptrs)) == len(ptrs)
    assert not {t.untyped_storage().data_ptr() for t in tensors} & set(ptrs)
    # s dies at s2 and s2 at n (same shapes and dtypes): n takes s's buffer, xx s2's;
    # nothing a result, the view or a host op holds is handed on.
    assert plan.reused == (("n", 0, "s"), ("xx", 0, "s2"))


LIVE = f"""HloModule m
{NEG}{EXP}{ADD}
ENTRY e {{
  x = f32[4,8] parameter(0)
  n = f32[4,8] fusion(x), kind=kLoop, calls=f
  m = f32[4,8] fusion(n), kind=kLoop, calls=g
  k = f32[4,8] fusion(m), kind=kLoop, calls=f
  ROOT s = f32[4,8] fusion(k, n), kind=kLoop, calls=h
}}"""


def test_a_value_still_read_later_is_never_handed_on():
    compiled, _, _ = _check(LIVE)
    plan = _entry_plan(compiled)
    # n lives until s reads it: k cannot take it; m dies at k, so s takes m's buffer.
    assert plan.reused == (("s", 0, "m"),)


VIEWED = f"""HloModule m
{NEG}{EXP}
ENTRY e {{
  x = f32[4,8] parameter(0)
  n = f32[4,8] fusion(x), kind=kLoop, calls=f
  v = f32[32] reshape(n)
  w = f32[4,8] reshape(v)
  m = f32[4,8] fusion(w), kind=kLoop, calls=g
  ROOT k = f32[4,8] fusion(m), kind=kLoop, calls=f
}}"""


def test_a_buffer_a_host_view_reads_is_never_reused():
    compiled, _, _ = _check(VIEWED)
    assert _entry_plan(compiled).reused == ()


RESULT = f"""HloModule m
{NEG}{EXP}
ENTRY e {{
  x = f32[4,8] parameter(0)
  n = f32[4,8] fusion(x), kind=kLoop, calls=f
  m = f32[4,8] fusion(n), kind=kLoop, calls=g
  k = f32[4,8] fusion(m), kind=kLoop, calls=f
  ROOT t = (f32[4,8], f32[4,8]) tuple(n, k)
}}"""


def test_a_result_is_never_handed_on():
    compiled, _, (n, k) = _check(RESULT)
    assert _entry_plan(compiled).reused == ()
    assert n.data_ptr() != k.data_ptr()


TRANSPOSED = """HloModule m
f { a = f32[8,16] parameter(0)
    ROOT n = f32[8,16]{0,1} negate(a) }
g { b = f32[8,16]{0,1} parameter(0)
    ROOT e = f32[8,16] exponential(b) }
ENTRY e {
  x = f32[8,16] parameter(0)
  n = f32[8,16]{0,1} fusion(x), kind=kLoop, calls=f
  ROOT m = f32[8,16] fusion(n), kind=kLoop, calls=g
}"""


def test_a_permuted_buffer_goes_as_it_is_to_a_reader_undoing_the_permutation():
    compiled, _, _ = _check(TRANSPOSED)
    assert len(compiled.fusions) == 2
    assert "permute" not in _entry_plan(compiled).source


def test_a_permuted_result_is_returned_logical():
    text = TRANSPOSED.replace("  ROOT m = f32[8,16] fusion(n), kind=kLoop, calls=g\n",
                              "  m = f32[8,16] fusion(n), kind=kLoop, calls=g\n"
                              "  ROOT t = (f32[8,16]{0,1}, f32[8,16]) tuple(n, m)\n")
    compiled, _, _ = _check(text)  # n contiguous, as every result
    plan = _entry_plan(compiled)
    assert "permute" in plan.source and not plan.contiguous_result


def test_a_kernels_own_contiguous_result_is_returned_as_it_is():
    compiled = compile_hlo(CHAIN)
    x = torch.randn(4, 8)
    compiled(x)
    assert _entry_plan(compiled).contiguous_result
    seen = []
    namespace = _entry_plan(compiled).run.__globals__
    allocate = namespace["allocate1"]
    namespace["allocate1"] = lambda: seen.append(allocate()) or seen[-1]
    out, = compiled(x)
    assert out is seen[0]  # k went into n's buffer, which is returned as it is


LOOP = """HloModule m
body { s = (s32[], f32[4]) parameter(0)
       i = s32[] get-tuple-element(s), index=0
       v = f32[4] get-tuple-element(s), index=1
       one = s32[] constant(1)
       j = s32[] add(i, one)
       w = f32[4] exponential(v)
       ROOT r = (s32[], f32[4]) tuple(j, w) }
cond { c = (s32[], f32[4]) parameter(0)
       k = s32[] get-tuple-element(c), index=0
       n = s32[] constant(3)
       ROOT lt = pred[] compare(k, n), direction=LT }
ENTRY e {
  x = f32[4] parameter(0)
  zero = s32[] constant(0)
  init = (s32[], f32[4]) tuple(zero, x)
  loop = (s32[], f32[4]) while(init), condition=cond, body=body
  ROOT y = f32[4] get-tuple-element(loop), index=1
}"""


def test_host_ops_and_callee_plans_match_the_evaluator():
    compiled, _, _ = _check(LOOP)
    plans = compiled.__dict__["_plans"]
    assert {"e", "body", "cond"} <= set(plans)
    assert "ctx" in plans["e"].source  # the while loop is a host op, with its context


def test_a_plan_names_its_computation_in_tracebacks():
    def fail(ops, ctx):
        raise ValueError("boom")

    steps = (Step("x", (), None, ()), Step("bad", ("x",), fail, ("x",)))
    plan = HostPlan.of(Program("my_comp", steps, "bad"), {"x": 0}, {})
    with pytest.raises(ValueError) as info:
        plan.run((torch.zeros(1),), lambda: None)
    frames = traceback.extract_tb(info.tb)
    assert any("host plan" in f.filename and "my_comp" in f.filename and f.line for f in frames)


def test_missing_arguments_fail_only_where_read():
    neg = Step("n", ("x",), lambda ops, ctx: -ops[0], ("x",))
    seen = Step("s", ("y",), lambda ops, ctx: ops[0] is None, ())
    steps = (Step("x", (), None, ()), Step("y", (), None, ()), neg, seen)
    root = Step("t", ("n", "s"), lambda ops, ctx: tuple(ops), ())
    plan = HostPlan.of(Program("c", steps + (root,), "t"), {"x": 0, "y": 1}, {})
    value, missing = plan.run((torch.tensor([2.0]),), lambda: None)
    assert value.tolist() == [-2.0] and missing is True
    # Extra arguments are ignored, as before.
    value, missing = plan.run((torch.tensor([2.0]), torch.zeros(1), torch.zeros(1)), lambda: None)
    assert missing is False


def test_kernels_beside_a_host_op_take_the_interpreters_lock_each():
    text = LOOP.replace("  ROOT y = f32[4] get-tuple-element(loop), index=1\n",
                        "  y = f32[4] get-tuple-element(loop), index=1\n"
                        "  ROOT z = f32[4] negate(y)\n")
    compiled, _, _ = _check(text)
    source = _entry_plan(compiled).source
    if compiled.device.type == "cpu":  # the interpreter's launches run one at a time
        assert "with lock" in source and "plan_lock" not in source


def test_kernels_without_launch_parts_run_through_their_prepared_launch(monkeypatch):
    from triton_backend.runtime.kernel_loading import CompiledFusion

    parts = CompiledFusion.launch_parts
    monkeypatch.setattr(CompiledFusion, "launch_parts", lambda self, device: None)
    compiled, _, _ = _check(MIXED)
    plan = _entry_plan(compiled)
    assert "kernel" not in plan.source and "launch" in plan.source and plan.reused == ()
    # m through its prepared launch, n and k in place: a prepared launch's results never
    # view its operands, so n, dead once m ran, still takes k's output.
    monkeypatch.setattr(CompiledFusion, "launch_parts",
                        lambda self, device: None if self.fusion_name == "m"
                        else parts(self, device))
    compiled, _, _ = _check(CHAIN)
    plan = _entry_plan(compiled)
    assert "launch" in plan.source and plan.reused == (("k", 0, "n"),)


def test_hostile_names_stay_in_comments_and_the_file_name():
    name = "c\x00\n'\"\u2028 ROOT"
    neg = Step(name + "n", (name,), lambda ops, ctx: -ops[0], (name,))
    plan = HostPlan.of(Program(name, (Step(name, (), None, ()), neg), name + "n"), {name: 0}, {})
    assert plan.run((torch.tensor([1.0]),), lambda: None).tolist() == [-1.0]
    assert "\x00" not in plan.run.__code__.co_filename and plan.source.isascii()
