"""``ValueEmitter.bounds`` must contain every value the kernel computes for an index
expression, with Triton's truncating ``//`` and ``%`` (C semantics, checked here against the
interpreter's own arithmetic), negative dividends included: load masks are built from it."""
from __future__ import annotations

import itertools
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from fusion.ir.hlo_module import HloComputation, HloModule
from tiling.maps.affine_expr import (
    AffineExpr,
    Constant,
    DimExpr,
    FloorDivExpr,
    ModExpr,
    SumExpr,
    as_expr,
    d,
)
from triton_backend.lowering.emitter.value_emitter import IndexVar, ValueEmitter


def _as_kernel(e: AffineExpr, dims) -> int:
    """What the kernel computes: C-like truncating division and remainder."""
    if isinstance(e, Constant):
        return e.value
    if isinstance(e, DimExpr):
        return dims[e.index]
    if isinstance(e, FloorDivExpr):
        return math.trunc(_as_kernel(e.dividend, dims) / e.divisor)
    if isinstance(e, ModExpr):
        return int(math.fmod(_as_kernel(e.dividend, dims), e.divisor))
    assert isinstance(e, SumExpr)
    return e.constant + sum(c * _as_kernel(a, dims) for a, c in e.terms)


def _exprs():
    leaf = st.one_of(st.integers(0, 1).map(d), st.integers(-9, 9))

    def grow(inner):
        return st.one_of(
            st.tuples(inner, inner).map(lambda p: p[0] + p[1]),
            st.tuples(inner, st.integers(-3, 3)).map(lambda p: p[0] * p[1]),
            st.tuples(inner, st.integers(1, 5)).map(lambda p: p[0] // p[1]),
            st.tuples(inner, st.integers(1, 5)).map(lambda p: p[0] % p[1]),
        )
    return st.recursive(leaf, grow, max_leaves=6).map(as_expr)


def _emitter(uppers) -> ValueEmitter:
    dims = [IndexVar(f"i{k}", k, 8, 8, u) for k, u in enumerate(uppers)]
    return ValueEmitter(HloModule("m", (), ""), HloComputation("c", (), ""), [8, 8], None, {},
                        dims=dims)


@settings(max_examples=300, deadline=None)
@given(_exprs(), st.lists(st.integers(0, 6), min_size=2, max_size=2))
def test_bounds_contain_every_value_the_kernel_computes(expr, uppers):
    low, high = _emitter(uppers).bounds(expr)
    for point in itertools.product(*(range(u + 1) for u in uppers)):
        assert low <= _as_kernel(expr, point) <= high, (str(expr), point)


def test_the_interpreter_truncates_like_c():
    import torch
    import triton
    import triton.language as tl

    @triton.jit
    def kernel(q_ptr, r_ptr):
        x = tl.arange(0, 8) - 5
        tl.store(q_ptr + tl.arange(0, 8), x // 3)
        tl.store(r_ptr + tl.arange(0, 8), x % 3)

    q, r = torch.zeros(8, dtype=torch.int32), torch.zeros(8, dtype=torch.int32)
    kernel[(1,)](q, r)
    xs = range(-5, 3)
    assert q.tolist() == [_as_kernel(d(0) // 3, (x,)) for x in xs]
    assert r.tolist() == [_as_kernel(d(0) % 3, (x,)) for x in xs]
