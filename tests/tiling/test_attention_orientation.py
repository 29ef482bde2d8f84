"""The attention orientation's rewrites keep a computation's value (the law they rest on):
a dot with its operands swapped and transposed back, a dot with its lhs free dims reordered
and transposed back, and a root's layout tail applied as an index map, each against the
reference evaluator on random dot shapes."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings, strategies as st

import fusion
from fusion.ir.hlo_module import HloComputation, HloModule
from fusion.shapes.verifier import verify_module
from fusion.text.parser import parse_hlo
from tiling.fusion_pass.attention_orientation import query_dim_last, swap_dot_operands
from tiling.fusion_pass.layout_tail import layout_tail


def _dims(xs) -> str:
    return ",".join(map(str, xs))


@st.composite
def dots(draw):
    """A dot ``[batch..., lhs free..., c] x [batch..., c, rhs free...]`` with the operands'
    dims shuffled."""
    batch = draw(st.lists(st.integers(1, 3), min_size=1, max_size=2))
    lhs_free = draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
    rhs_free = draw(st.lists(st.integers(1, 4), min_size=1, max_size=2))
    c = draw(st.integers(1, 4))
    roles_l = [("b", i) for i in range(len(batch))] + [("l", i) for i in range(len(lhs_free))] + [("c", 0)]
    roles_r = [("b", i) for i in range(len(batch))] + [("r", i) for i in range(len(rhs_free))] + [("c", 0)]
    roles_l = draw(st.permutations(roles_l))
    roles_r = draw(st.permutations(roles_r))
    size = {"b": batch, "l": lhs_free, "r": rhs_free, "c": [c]}
    lhs = [size[k][i] for k, i in roles_l]
    rhs = [size[k][i] for k, i in roles_r]
    lb = [roles_l.index(("b", i)) for i in range(len(batch))]
    rb = [roles_r.index(("b", i)) for i in range(len(batch))]
    # the result: batch, lhs free in operand order, rhs free in operand order
    out = batch + [size["l"][i] for k, i in roles_l if k == "l"] + \
        [size["r"][i] for k, i in roles_r if k == "r"]
    return f"""HloModule m
ENTRY e {{
  a = f32[{_dims(lhs)}] parameter(0)
  b = f32[{_dims(rhs)}] parameter(1)
  ROOT o = f32[{_dims(out)}] dot(a, b), lhs_batch_dims={{{_dims(lb)}}}, lhs_contracting_dims={{{roles_l.index(("c", 0))}}}, rhs_batch_dims={{{_dims(rb)}}}, rhs_contracting_dims={{{roles_r.index(("c", 0))}}}
}}"""


def _value(module: HloModule, args):
    out = fusion.evaluate(module, *args)
    return np.asarray(out[0] if isinstance(out, (tuple, list)) else out)


@settings(max_examples=15, deadline=None)
@given(text=dots(), seed=st.integers(0, 2**16))
def test_swapping_and_reordering_a_dot_keeps_its_value(text, seed):
    module = parse_hlo(text)
    rng = np.random.default_rng(seed)
    args = [rng.standard_normal(p.shape.dims).astype(np.float32) for p in module.entry.parameters]
    want = _value(module, args)
    names = iter(f"n{i}" for i in range(10))
    for rewrite in (lambda c: swap_dot_operands(c, "o", "o.swapped"),
                    lambda c: query_dim_last(c, "o", lambda base: next(names))):
        comp = rewrite(module.entry)
        if comp is module.entry:
            continue  # the query dim is last already
        new = HloModule(module.name, (comp,), comp.name)
        verify_module(new)
        np.testing.assert_allclose(_value(new, args), want, rtol=1e-5, atol=1e-5)
        # the transposes back are the rewritten root's layout tail: the value below them,
        # stored through the tail's map, is the dot's value
        tail = layout_tail(comp)
        assert tail.ops
        below = HloComputation("v", comp.instructions, tail.value, True)
        value = _value(HloModule("v", (below,), "v"), args)
        for index in np.ndindex(*value.shape):
            assert want[tail.to_root.evaluate(index)] == value[index]
