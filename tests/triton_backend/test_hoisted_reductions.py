"""Rows longer than the reduction chunk loop, and a reduction that a looped one needs is
emitted once, before the loop (``ValueEmitter.block``'s hoisting), not once per chunk.

Softmax, log-softmax and cross-entropy over rows of 32768 (8 chunks of 4096) and 20000 (the
last chunk partly padding), each in f32 and bf16, three ways (XLA, evaluator, kernel); and the
kernel text: one loop per reduce, so the max is neither recomputed per chunk of the sum nor
a third time for ``log(sum) + max``.
"""
from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

from tests.triton_backend.fusion_check import run_and_compare, single_fusion_module
from tests.triton_backend.xla_three_way import compare_three_ways

pytest.importorskip("jax")

ROWS = 4
REDUCERS = """add {{ a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT r = {t}[] add(a, b) }}
max {{ a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  ROOT r = {t}[] maximum(a, b) }}
"""
# The max of each row, then the sum of exp(x - max) that needs it in every chunk.
HEAD = """  x = {t}[{r},{n}] parameter(0)
  ninf = {t}[] constant(-inf)
  m = {t}[{r}] reduce(x, ninf), dimensions={{1}}, to_apply=max
  mb = {t}[{r},{n}] broadcast(m), dimensions={{0}}
  d = {t}[{r},{n}] subtract(x, mb)
  e = {t}[{r},{n}] exponential(d)
  z = {t}[] constant(0)
  s = {t}[{r}] reduce(e, z), dimensions={{1}}, to_apply=add
"""
# Each root asks for the sum before anything else needs the max, so the max is first asked
# for inside the sum's loop (a root reading e or d first emits the max before that loop).
TAILS = {
    "softmax": """  one = {t}[] constant(1)
  ob = {t}[{r}] broadcast(one), dimensions={{}}
  inv = {t}[{r}] divide(ob, s)
  ib = {t}[{r},{n}] broadcast(inv), dimensions={{0}}
  ROOT o = {t}[{r},{n}] multiply(ib, e)""",
    "log_softmax": """  l = {t}[{r}] log(s)
  lb = {t}[{r},{n}] broadcast(l), dimensions={{0}}
  nl = {t}[{r},{n}] negate(lb)
  ROOT o = {t}[{r},{n}] add(nl, d)""",
    # log(sum) + max - x[label]: the max is needed again after the sum's loop.
    "cross_entropy": """  l = {t}[{r}] log(s)
  lse = {t}[{r}] add(l, m)
  y = s32[{r}] parameter(1)
  io = s32[{r},{n}] iota(), iota_dimension=1
  yb = s32[{r},{n}] broadcast(y), dimensions={{0}}
  hit = pred[{r},{n}] compare(io, yb), direction=EQ
  zb = {t}[{r},{n}] broadcast(z), dimensions={{}}
  picked = {t}[{r},{n}] select(hit, x, zb)
  xl = {t}[{r}] reduce(picked, z), dimensions={{1}}, to_apply=add
  ROOT loss = {t}[{r}] subtract(lse, xl)""",
}
#: The reduces of each program: the kernel must have exactly one loop for each.
REDUCES = {"softmax": 2, "log_softmax": 2, "cross_entropy": 3}
TOLERANCE = {"f32": (2e-5, 1e-6), "bf16": (2e-2, 1e-2)}  # (rtol, atol)


def program(kind: str, t: str, n: int) -> str:
    """The program as one given fusion: the kernel's loops are under test, not the fusion
    pass, which keeps cross-entropy's label pick apart from its log-sum-exp over 4 rows (side
    by side in one kernel, its two outer sums could not be split among programs)."""
    body = (HEAD + TAILS[kind]).format(t=t, r=ROWS, n=n)
    params = [f"{t}[{ROWS},{n}]"] + ([f"s32[{ROWS}]"] if kind == "cross_entropy" else [])
    entry = "\n".join(f"  a{k} = {s} parameter({k})" for k, s in enumerate(params))
    args = ", ".join(f"a{k}" for k in range(len(params)))
    return (f"HloModule m\n{REDUCERS.format(t=t)}f {{\n{body}\n}}\n\nENTRY e {{\n{entry}\n"
            f"  ROOT fusion = {t}[{ROWS}{',' + str(n) if kind != 'cross_entropy' else ''}] "
            f"fusion({args}), kind=kLoop, calls=f\n}}\n")


def arrays(kind: str, t: str, n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(n)
    x = (3 * rng.standard_normal((ROWS, n))).astype(np.float32)
    args = [x.astype(ml_dtypes.bfloat16) if t == "bf16" else x]
    if kind == "cross_entropy":
        args.append(rng.integers(0, n, ROWS).astype(np.int32))
    return args


# Each program in both types and at both lengths, each type at both lengths (the hoisting
# does not depend on the type: a bf16 kernel has the f32 kernel's loops, its values widened
# from and rounded to bf16).
@pytest.mark.parametrize("kind, t, n", [
    ("softmax", "f32", 32768), ("softmax", "bf16", 20000),
    ("log_softmax", "f32", 20000), ("log_softmax", "bf16", 32768),
    ("cross_entropy", "f32", 32768), ("cross_entropy", "bf16", 20000)])
def test_dependent_reductions_over_long_rows(kind, t, n):
    text = program(kind, t, n)
    rtol, atol = TOLERANCE[t]
    compiled = compare_three_ways(text, *arrays(kind, t, n), rtol=rtol, atol=atol)
    (fusion,) = compiled.fusions.values()
    kernel = open(fusion.kernel_path).read()
    loops = re.findall(rf"^\s*for \w+ in range\(0, {n}, (\d+)\):$", kernel, re.M)
    assert len(loops) == REDUCES[kind] and all(int(b) < n for b in loops), loops
    # One maximum reduction: the max's chunk reduction is not repeated in another loop.
    assert len(re.findall(r"^\s*m_acc, m_acc_valid = ", kernel, re.M)) == 1


def test_reduction_over_two_looped_dims_hoisted_out_of_both_loops():
    # The root asks for the sum first (sum / e), so the max is first needed inside its loops.
    body = """  ninf = f32[] constant(-inf)
  m = f32[19] reduce(p0, ninf), dimensions={0,2}, to_apply=max
  mb = f32[5,19,21] broadcast(m), dimensions={1}
  d = f32[5,19,21] subtract(p0, mb)
  e = f32[5,19,21] exponential(d)
  z = f32[] constant(0)
  s = f32[19] reduce(e, z), dimensions={0,2}, to_apply=add
  sb = f32[5,19,21] broadcast(s), dimensions={1}
  ROOT o = f32[5,19,21] divide(sb, e)"""
    text = single_fusion_module(["f32[5,19,21]"], body, "f32[5,19,21]", REDUCERS.format(t="f32"))
    compiled = run_and_compare(text, exact=False, reduction_length=105, reduction_chunk=4)
    # Two loops (dims 0 and 2) for each reduce; the max's are not nested in the sum's.
    assert len(re.findall(r"^\s*for \w+ in range\(0, \d+, 4\):$", compiled.source, re.M)) == 4
