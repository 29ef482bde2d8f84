"""Shape rules against NumPy (the truth for array shapes), as hypothesis properties."""
from __future__ import annotations

import math
import string

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion.ir.attributes import PaddingConfig, PaddingDim, SliceDim, Window, WindowDim
from fusion.errors import HloVerifyError
from fusion.ir.hlo_module import HloInstruction
from fusion.ir.shape import ArrayShape
from fusion.shapes.inference import SHAPE_RULES, infer_shape

dims_st = st.lists(st.integers(0, 5), min_size=0, max_size=4).map(tuple)
nonempty_dims_st = st.lists(st.integers(1, 5), min_size=1, max_size=4).map(tuple)


def f32(*dims: int) -> ArrayShape:
    return ArrayShape("f32", tuple(dims))


def infer(opcode, operands, declared=None, **attrs):
    instr = HloInstruction("i", opcode, declared or f32(), tuple(f"x{k}" for k in range(len(operands))),
                           tuple(attrs.items()))
    return infer_shape(instr, operands, None)


def test_registry_is_alphabetical_and_covers_the_required_ops():
    assert list(SHAPE_RULES) == sorted(SHAPE_RULES)
    required = """abs negate exponential exponential-minus-one log log-plus-one tanh logistic
    sqrt rsqrt cbrt sine cosine tan atan2 floor ceil round-nearest-afz round-nearest-even sign
    not popcnt count-leading-zeros is-finite real imag complex add subtract multiply divide
    remainder power maximum minimum and or xor shift-left shift-right-logical
    shift-right-arithmetic erf compare select clamp convert bitcast-convert constant iota
    parameter tuple get-tuple-element broadcast reshape bitcast transpose copy reverse slice
    dynamic-slice dynamic-update-slice pad concatenate reduce reduce-window dot gather scatter
    map select-and-scatter sort fusion call while conditional reduce-precision custom-call"""
    assert set(required.split()) <= set(SHAPE_RULES)


@given(dims=dims_st, data=st.data())
def test_slice_matches_numpy(dims, data):
    spec = []
    for d in dims:
        start = data.draw(st.integers(0, d))
        limit = data.draw(st.integers(start, d))
        spec.append(SliceDim(start, limit, data.draw(st.integers(1, 3))))
    want = np.empty(dims)[tuple(slice(s.start, s.limit, s.stride) for s in spec)].shape
    assert infer("slice", (f32(*dims),), slice=tuple(spec)).dims == want


@given(dims=dims_st, data=st.data())
def test_transpose_matches_numpy(dims, data):
    perm = tuple(data.draw(st.permutations(range(len(dims)))))
    want = np.transpose(np.empty(dims), perm).shape
    assert infer("transpose", (f32(*dims),), dimensions=perm).dims == want


@given(dims=nonempty_dims_st, data=st.data())
def test_concatenate_matches_numpy(dims, data):
    axis = data.draw(st.integers(0, len(dims) - 1))
    sizes = data.draw(st.lists(st.integers(0, 4), min_size=1, max_size=3))
    parts = [dims[:axis] + (n,) + dims[axis + 1:] for n in sizes]
    want = np.concatenate([np.empty(p) for p in parts], axis=axis).shape
    assert infer("concatenate", tuple(f32(*p) for p in parts), dimensions=(axis,)).dims == want


@given(dims=dims_st, data=st.data())
def test_reduce_removes_the_reduced_dims_like_numpy(dims, data):
    from fusion.text.parser import parse_hlo
    from fusion.shapes.verifier import verify_module

    axes = tuple(sorted(data.draw(st.sets(st.integers(0, max(len(dims) - 1, 0)), max_size=len(dims)))))
    want = np.sum(np.empty(dims), axis=axes).shape
    text = f"""HloModule m
add {{ a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }}
ENTRY e {{
  x = f32[{",".join(map(str, dims))}] parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[{",".join(map(str, want))}] reduce(x, z), dimensions={{{",".join(map(str, axes))}}}, to_apply=add
}}"""
    verify_module(parse_hlo(text))


@st.composite
def dot_case(draw):
    batch = draw(st.lists(st.integers(1, 3), max_size=2))
    contract = draw(st.lists(st.integers(1, 3), max_size=2))
    lfree = draw(st.lists(st.integers(1, 3), max_size=2))
    rfree = draw(st.lists(st.integers(1, 3), max_size=2))
    letters = iter(string.ascii_lowercase)
    b = [next(letters) for _ in batch]
    c = [next(letters) for _ in contract]
    lf = [next(letters) for _ in lfree]
    rf = [next(letters) for _ in rfree]
    lhs_axes = draw(st.permutations(b + c + lf))
    rhs_axes = draw(st.permutations(b + c + rf))
    size = dict(zip(b + c + lf + rf, batch + contract + lfree + rfree))
    return lhs_axes, rhs_axes, b, c, lf, rf, size


@settings(max_examples=60)
@given(dot_case())
def test_dot_matches_einsum(case):
    lhs_axes, rhs_axes, b, c, lf, rf, size = case
    lhs, rhs = f32(*(size[a] for a in lhs_axes)), f32(*(size[a] for a in rhs_axes))
    # XLA orders the result: batch dims, then free dims in each operand's own order.
    out = b + [a for a in lhs_axes if a in lf] + [a for a in rhs_axes if a in rf]
    want = np.einsum(f"{''.join(lhs_axes)},{''.join(rhs_axes)}->{''.join(out)}",
                     np.empty(lhs.dims), np.empty(rhs.dims)).shape
    got = infer("dot", (lhs, rhs), lhs_batch_dims=tuple(lhs_axes.index(a) for a in b),
                rhs_batch_dims=tuple(rhs_axes.index(a) for a in b),
                lhs_contracting_dims=tuple(lhs_axes.index(a) for a in c),
                rhs_contracting_dims=tuple(rhs_axes.index(a) for a in c))
    assert got.dims == want


def _pad_brute_force(size: int, p: PaddingDim) -> int | None:
    """Build the padded index list explicitly; None when the trims eat more than there is."""
    items: list = []
    for k in range(size):
        items.append(k)
        if k != size - 1:
            items.extend([None] * p.interior)
    items = [None] * max(p.low, 0) + items + [None] * max(p.high, 0)
    cut_front, cut_back = max(-p.low, 0), max(-p.high, 0)
    if cut_front + cut_back > len(items):
        return None
    return len(items[cut_front:len(items) - cut_back])


@given(size=st.integers(0, 6), low=st.integers(-3, 3), high=st.integers(-3, 3),
       interior=st.integers(0, 2))
def test_pad_matches_brute_force(size, low, high, interior):
    p = PaddingDim(low, high, interior)
    want = _pad_brute_force(size, p)
    args = dict(padding=PaddingConfig((p,)))
    if want is None:
        with pytest.raises(HloVerifyError, match="negative"):
            infer("pad", (f32(size), f32()), **args)
    else:
        assert infer("pad", (f32(size), f32()), **args).dims == (want,)


def _windows_brute_force(size: int, w: WindowDim) -> int:
    # Positions of the dilated, padded base; count window starts whose taps all fit.
    base = (size - 1) * w.base_dilation + 1 if size else 0
    total = w.padding_low + base + w.padding_high
    taps = [k * w.window_dilation for k in range(w.size)]
    return sum(1 for s in range(0, max(total, 0), w.stride) if s + taps[-1] < total)


@given(size=st.integers(0, 7), wsize=st.integers(1, 3), stride=st.integers(1, 3),
       lo=st.integers(0, 2), hi=st.integers(0, 2), bd=st.integers(1, 2), wd=st.integers(1, 2))
def test_reduce_window_dims_match_brute_force(size, wsize, stride, lo, hi, bd, wd):
    from fusion.shapes.rules_reduce import windowed_dims

    w = WindowDim(wsize, stride, lo, hi, wd, bd)
    instr = HloInstruction("r", "reduce-window", f32(), ("x", "z"), (("window", Window((w,))),))
    assert windowed_dims(instr, f32(size)) == (_windows_brute_force(size, w),)


@given(dims=dims_st, data=st.data())
def test_broadcast_accepts_exactly_numpy_compatible_mappings(dims, data):
    out_rank = len(dims) + data.draw(st.integers(0, 2))
    where = sorted(data.draw(st.permutations(range(out_rank)))[: len(dims)])
    out = [data.draw(st.integers(1, 4)) for _ in range(out_rank)]
    for d, size in zip(where, dims):
        out[d] = size
    expanded = np.empty(dims).reshape([out[d] if d in where else 1 for d in range(out_rank)])
    want = np.broadcast_to(expanded, out).shape
    got = infer("broadcast", (f32(*dims),), declared=f32(*out), dimensions=tuple(where))
    assert got.dims == want


@given(dims=dims_st, out=dims_st)
def test_reshape_requires_equal_element_counts(dims, out):
    if math.prod(dims) == math.prod(out):
        assert infer("reshape", (f32(*dims),), declared=f32(*out)).dims == out
    else:
        with pytest.raises(HloVerifyError, match="changes the element count"):
            infer("reshape", (f32(*dims),), declared=f32(*out))


@pytest.mark.parametrize("src,dst,dims,want", [
    ("f32", "u8", (2, 3), (2, 3, 4)),
    ("u8", "f32", (2, 4), (2,)),
    ("bf16", "s16", (5,), (5,)),
    ("f64", "s32", (), (2,)),
])
def test_bitcast_convert_width_changes(src, dst, dims, want):
    # NumPy's view is the same reinterpretation along the minor dim.
    view = np.empty(dims + (1,) if not dims else dims, dtype=np.dtype(
        {"f32": "float32", "u8": "uint8", "bf16": "uint16", "s16": "int16", "f64": "float64",
         "s32": "int32"}[src]))
    got = infer("bitcast-convert", (ArrayShape(src, dims),), declared=ArrayShape(dst, want))
    assert got == ArrayShape(dst, want)
    assert math.prod(got.dims) * got.element_type.bits == view.size * view.itemsize * 8


@given(dims=dims_st, data=st.data())
def test_dynamic_slice_sizes_become_the_result(dims, data):
    sizes = tuple(data.draw(st.integers(0, d)) for d in dims)
    starts = tuple(ArrayShape("s32", ()) for _ in dims)
    got = infer("dynamic-slice", (f32(*dims),) + starts, dynamic_slice_sizes=sizes)
    assert got.dims == sizes
