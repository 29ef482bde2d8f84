"""``ragged-all-to-all`` (``jax.lax.ragged_all_to_all``: a mixture of experts' token
exchange).  XLA:CPU cannot compile it, so the truth is JAX's definition written out by brute
force as its docstring gives it: a receiver writes ``recv_sizes[i]`` rows at the offsets its
senders' ``output_offsets`` name (an all-to-all of them).  Checked on one device (evaluated
and compiled), on several in lockstep (``evaluate_spmd``), on two processes
(``test_multi_process``), and the verifier's and evaluator's located errors."""
from __future__ import annotations

import numpy as np
import pytest

from fusion import evaluate, parse_hlo, verify_module
from fusion.errors import EvaluationError, HloVerifyError
from fusion.autodiff import vjp
from fusion.evaluator.spmd import evaluate_spmd
from triton_backend import compile_hlo

MODULE = """HloModule m, num_partitions=N
ENTRY e {
  x = f32[ROWS,2] parameter(0)
  o = f32[ROWS,2] parameter(1)
  io = s32[K] parameter(2)
  ss = s32[K] parameter(3)
  oo = s32[K] parameter(4)
  rs = s32[K] parameter(5)
  ROOT r = f32[ROWS,2] ragged-all-to-all(x, o, io, ss, oo, rs), channel_id=1, GROUPS
}
"""


def module_text(n: int, rows: int, slices: int, groups: str) -> str:
    return (MODULE.replace("num_partitions=N", f"num_partitions={n}").replace("ROWS", str(rows))
            .replace("K", str(slices)).replace("GROUPS", groups))


def exchange(n: int, rows: int, per: int, seed: int):
    """Consistent operands for ``n`` devices sending ``per`` slices to each device: every
    sender's slices are disjoint runs of its input; every receiver gets disjoint runs of its
    output, its senders in order."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(0, 3, (n, n * per))  # sizes[s, i]: sender s, slice i
    inputs = []
    for s in range(n):
        starts = np.cumsum(sizes[s]) - sizes[s] + rng.integers(0, 2)
        inputs.append(starts)
    outputs = np.zeros((n, n * per), np.int64)  # output_offsets, as the senders hold them
    for r in range(n):
        at = int(rng.integers(0, 2))
        for s in range(n):
            for i in range(r * per, (r + 1) * per):
                outputs[s, i] = at
                at += sizes[s, i]
    recv = np.stack([np.concatenate([sizes[s, r * per:(r + 1) * per] for s in range(n)])
                     for r in range(n)])  # recv_sizes[r]: what r gets, by sender
    args = []
    for d in range(n):
        x = (rng.standard_normal((rows, 2)) + 100 * d).astype(np.float32)
        o = np.full((rows, 2), -1, np.float32)
        args.append([x, o, inputs[d].astype(np.int32), sizes[d].astype(np.int32),
                     outputs[d].astype(np.int32), recv[d].astype(np.int32)])
    return args


def brute_force(args, groups):
    """JAX's docstring: ``output_offsets_ = all_to_all(output_offsets)``; slice ``i`` of a
    receiver comes from sender ``i // per`` with ``recv_sizes[i]`` rows."""
    out = []
    for r in range(len(args)):
        group = next(g for g in groups if r in g)
        n, me = len(group), group.index(r)
        per = len(args[r][2]) // n
        result = args[r][1].copy()
        for i in range(n * per):
            s = group[i // per]
            sent = me * per + i % per  # the sender's slice index for member me
            size = int(args[r][5][i])
            at, src = int(args[s][4][sent]), int(args[s][2][sent])
            result[at:at + size] = args[s][0][src:src + size]
        out.append(result)
    return out


@pytest.mark.parametrize("n, per, groups", [(2, 1, ((0, 1),)), (4, 2, ((3, 1), (0, 2))),
                                            (4, 1, ((2, 0, 3, 1),))])
def test_devices_in_lockstep_match_jaxs_definition(n, per, groups):
    rows = 4 * n * per + 2
    text = module_text(n, rows, len(groups[0]) * per, "replica_groups={" + ",".join(
        "{" + ",".join(map(str, g)) + "}" for g in groups) + "}")
    args = [None] * n
    for k, group in enumerate(groups):  # each group exchanges its own, members in its order
        for member, operands in zip(group, exchange(len(group), rows, per, seed=k + n)):
            args[member] = operands
    got = evaluate_spmd(parse_hlo(text), args)
    for device, want in enumerate(brute_force(args, groups)):
        np.testing.assert_array_equal(got[device][0], want, err_msg=f"device {device}")


ONE_DEVICE = MODULE.replace("num_partitions=N", "num_partitions=1").replace("ROWS", "6") \
    .replace("K", "3").replace("channel_id=1, GROUPS", "replica_groups={{0}}")
ONE_ARGS = [np.arange(12, dtype=np.float32).reshape(6, 2), np.full((6, 2), -1, np.float32),
            np.int32([4, 0, 2]), np.int32([2, 1, 0]), np.int32([0, 5, 3]), np.int32([2, 1, 0])]


def test_on_one_device_its_own_slices_are_written_evaluated_and_compiled():
    want = brute_force([ONE_ARGS], ((0,),))[0]
    np.testing.assert_array_equal(evaluate(parse_hlo(ONE_DEVICE), *ONE_ARGS)[0], want)
    import torch  # noqa: PLC0415 - the compiled path only
    got = compile_hlo(ONE_DEVICE, cache=False)(*(torch.from_numpy(a) for a in ONE_ARGS))[0]
    np.testing.assert_array_equal(got.numpy(), want)


def test_a_slice_past_the_output_is_a_located_error():
    args = list(ONE_ARGS)
    args[4] = np.int32([5, 5, 3])  # two rows written at row 5 of 6
    with pytest.raises(EvaluationError, match=r"rows \[5, 7\) of an output of 6 rows") as err:
        evaluate(parse_hlo(ONE_DEVICE), *args)
    assert str(err.value).startswith("9:3: ")


@pytest.mark.parametrize("change, expected", [
    ("o = f32[6,3]", "the same dims past the first"),
    ("rs = s32[2]", "integer lists of one length"),
    ("io = f32[3]", "integer lists of one length"),
])
def test_bad_operands_are_located_errors(change, expected):
    name = change.split(" = ")[0]
    lines = [change + line[line.index("]") + 1:] if line.strip().startswith(name + " = ")
             else line for line in ONE_DEVICE.splitlines()]
    with pytest.raises(HloVerifyError, match=expected) as err:
        verify_module(parse_hlo("\n".join(lines)))
    assert str(err.value).startswith("9:")


@pytest.mark.parametrize("n, per, groups", [(1, 3, ((0,),)), (4, 2, ((3, 1), (0, 2)))])
def test_vjp_is_the_adjoint(n, per, groups):
    """The op is linear in its input and output: over every device, the cotangent's dot with
    the result equals the gradients' dots with the input and the output (JAX's transpose
    sends the slices back and zeroes the rows written)."""
    rows = 4 * n * per + 2
    text = module_text(n, rows, len(groups[0]) * per, "replica_groups={" + ",".join(
        "{" + ",".join(map(str, g)) + "}" for g in groups) + "}")
    if n == 1:
        text = text.replace("channel_id=1, ", "")
    module = parse_hlo(text)
    backward = vjp(module, wrt=(0, 1))
    args = [None] * n
    for k, group in enumerate(groups):
        for member, operands in zip(group, exchange(len(group), rows, per, seed=k + 7)):
            args[member] = operands
    rng = np.random.default_rng(11)
    cts = [rng.standard_normal((rows, 2)).astype(np.float32) for _ in range(n)]
    forward = evaluate_spmd(module, args)
    grads = evaluate_spmd(backward, [a + [c] for a, c in zip(args, cts)])
    lhs = sum(float(np.vdot(f[0].astype(np.float64), c)) for f, c in zip(forward, cts))
    rhs = sum(float(np.vdot(a[0].astype(np.float64), g[0]) + np.vdot(a[1].astype(np.float64),
                                                                     g[1]))
              for a, g in zip(args, grads))
    assert lhs == pytest.approx(rhs, rel=1e-5)
    assert any(np.any(g[0] != 0) for g in grads) and any(np.any(g[1] == 0) for g in grads)
