"""``collective-broadcast`` (``jax.lax.pbroadcast`` on a GPU: JAX puts the source first in each
group): every member of a group gets its group's first member's values.  XLA:CPU does not run
the op, so the truth is that definition by brute force, on one device (the identity), on
several in lockstep (``evaluate_spmd``), and on two processes (``test_multi_process``)."""
from __future__ import annotations

import numpy as np
import pytest

from fusion import evaluate, parse_hlo, verify_module
from fusion.autodiff import vjp
from fusion.errors import HloVerifyError
from fusion.evaluator.spmd import evaluate_spmd

#: JAX's SPMD form: a channel_id and no global-id flag, so the groups name partitions.
BROADCAST = """HloModule m, num_partitions=4
ENTRY e {
  x = f32[3] parameter(0)
  i = s32[2,2] parameter(1)
  ROOT r = (f32[3], s32[2,2]) collective-broadcast(x, i), channel_id=1, GROUPS
}
"""


def _brute_force(inputs, groups):
    """Device ``d``'s outputs: the inputs of the first member of ``d``'s group."""
    first = {d: g[0] for g in groups for d in g}
    return [inputs[first[d]] for d in range(len(inputs))]


@pytest.mark.parametrize("groups", [((2, 0), (1, 3)), ((3, 1, 0, 2),)])
def test_every_member_gets_its_groups_first_members_values(groups):
    text = BROADCAST.replace("GROUPS", "replica_groups={" + ",".join(
        "{" + ",".join(map(str, g)) + "}" for g in groups) + "}")
    rng = np.random.default_rng(2)
    inputs = [[rng.standard_normal(3).astype(np.float32),
               rng.integers(-9, 9, (2, 2)).astype(np.int32)] for _ in range(4)]
    got = evaluate_spmd(parse_hlo(text), inputs)
    for device, want in enumerate(_brute_force(inputs, groups)):
        for g, w in zip(got[device], want):
            np.testing.assert_array_equal(g, w, err_msg=f"device {device}")


def test_on_one_device_it_is_the_identity():
    text = BROADCAST.replace("num_partitions=4", "num_partitions=1").replace(
        "GROUPS", "replica_groups={{0}}")
    x, i = np.float32([1, 2, 3]), np.int32([[1, 2], [3, 4]])
    got = evaluate(parse_hlo(text), x, i)
    np.testing.assert_array_equal(got[0], x)
    np.testing.assert_array_equal(got[1], i)


def test_a_device_named_twice_is_a_located_error():
    text = BROADCAST.replace("GROUPS", "replica_groups={{0,1},{1,2}}")
    with pytest.raises(HloVerifyError, match="name a device twice") as err:
        verify_module(parse_hlo(text))
    assert str(err.value).startswith("5:")


@pytest.mark.parametrize("header, mode, groups", [
    ("num_partitions=4", "channel_id=1, ", "{{1,0},{3,2}}"),
    ("replica_count=4", "", "{{2,0},{1,3}}"),
    ("replica_count=2, num_partitions=2", "channel_id=1, ", "{{1,0}}"),  # per replica
])
def test_vjp_is_the_adjoint(header, mode, groups):
    """Linear in its operand: over every device, the cotangents' dot with the results equals
    the gradients' dot with the operands (the group's sum lands on its first member), in the
    cross-partition mode JAX writes, the cross-replica one and both counts at once."""
    text = (f"HloModule m, {header}\nENTRY e {{\n  x = f32[3] parameter(0)\n"
            f"  ROOT r = f32[3] collective-broadcast(x), {mode}replica_groups={groups}\n}}\n")
    module = parse_hlo(text)
    backward = vjp(module)
    rng = np.random.default_rng(4)
    xs = [[rng.standard_normal(3).astype(np.float32)] for _ in range(4)]
    cts = [rng.standard_normal(3).astype(np.float32) for _ in range(4)]
    forward = evaluate_spmd(module, xs)
    grads = evaluate_spmd(backward, [x + [c] for x, c in zip(xs, cts)])
    lhs = sum(float(np.dot(f[0].astype(np.float64), c)) for f, c in zip(forward, cts))
    rhs = sum(float(np.dot(x[0].astype(np.float64), g[0])) for x, g in zip(xs, grads))
    assert lhs == pytest.approx(rhs, rel=1e-6)
    assert sum(bool(np.any(g[0] != 0)) for g in grads) == 2  # one leader per group
