"""Output -> input maps of data-movement ops against the reference evaluator (see
indexing_oracle.py), with hypothesis over shapes, permutations, slices, paddings and
reshapes; reductions and dot against the read sets of their definitions."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from tests.tiling.indexing_oracle import PAD_VALUE, check_copy, iota_input, read_sets
from fusion.text.parser import parse_hlo
from tiling import input_to_output_indexing, output_to_input_indexing
from tiling.maps.indexing_map import enumerate_points

FAST = settings(max_examples=30, deadline=None)


def entry_module(params, root, extra=""):
    lines = [f"  x{i} = {p} parameter({i})" for i, p in enumerate(params)]
    return parse_hlo("HloModule m\n" + extra + "\nENTRY e {\n" + "\n".join(lines)
                     + f"\n  ROOT r = {root}\n}}\n")


def shape_text(dims, dtype="s32"):
    return f"{dtype}[{','.join(map(str, dims))}]"


def run_copy(params_dims, root, data_operands=(0,), extra_arrays=None, pad=False):
    params = [shape_text(d) for d in params_dims]
    m = entry_module(params, root)
    arrays, offset = [], 0
    for k, dims in enumerate(params_dims):
        if extra_arrays and k in extra_arrays:
            arrays.append(extra_arrays[k])
        elif k in data_operands:
            arrays.append(iota_input(dims, offset))
            offset += max(1, math.prod(dims))
        else:
            arrays.append(np.array(PAD_VALUE, np.int32))
    maps = output_to_input_indexing(m.entry.root, m)
    check_copy(m, [list(s) for s in maps], arrays, data_operands)
    return m, maps


dims_st = st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple)


@FAST
@given(dims_st, st.data())
def test_transpose(dims, data):
    perm = data.draw(st.permutations(range(len(dims))))
    out = tuple(dims[p] for p in perm)
    run_copy([dims], f"{shape_text(out)} transpose(x0), dimensions={{{','.join(map(str, perm))}}}")


@FAST
@given(dims_st, st.data())
def test_reverse(dims, data):
    rev = data.draw(st.sets(st.sampled_from(range(len(dims)))))
    run_copy([dims], f"{shape_text(dims)} reverse(x0), dimensions={{{','.join(map(str, sorted(rev)))}}}")


@FAST
@given(dims_st, st.data())
def test_slice(dims, data):
    parts, out = [], []
    for n in dims:
        start = data.draw(st.integers(0, n - 1))
        limit = data.draw(st.integers(start + 1, n))
        stride = data.draw(st.integers(1, 3))
        parts.append(f"[{start}:{limit}:{stride}]")
        out.append(-(-(limit - start) // stride))
    run_copy([dims], f"{shape_text(out)} slice(x0), slice={{{', '.join(parts)}}}")


@FAST
@given(dims_st, st.data())
def test_pad(dims, data):
    parts, out = [], []
    for n in dims:
        low, high = data.draw(st.integers(-2, 2)), data.draw(st.integers(-2, 2))
        interior = data.draw(st.integers(0, 2))
        size = n + low + high + (n - 1) * interior
        if size < 0:
            low, high, size = 0, 0, n + (n - 1) * interior
        parts.append(f"{low}_{high}_{interior}")
        out.append(size)
    run_copy([dims, ()], f"{shape_text(out)} pad(x0, x1), padding={'x'.join(parts)}")


@FAST
@given(dims_st, st.data())
def test_broadcast(dims, data):
    out_rank = data.draw(st.integers(len(dims), len(dims) + 2))
    positions = sorted(data.draw(st.permutations(range(out_rank)))[: len(dims)])
    out = [data.draw(st.integers(1, 3)) for _ in range(out_rank)]
    for p, n in zip(positions, dims):
        out[p] = n
    run_copy([dims], f"{shape_text(out)} broadcast(x0), dimensions={{{','.join(map(str, positions))}}}")


def factorizations(n, max_rank=3):
    """Shapes (with 1s allowed) of ``n`` elements."""
    out = {(n,)}
    for r in range(2, max_rank + 1):
        for dims in itertools.product(range(1, n + 1), repeat=r):
            if math.prod(dims) == n:
                out.add(dims)
    return sorted(out)


@FAST
@given(st.sampled_from([1, 2, 4, 6, 8, 12, 16]), st.data())
def test_reshape(n, data):
    shapes = factorizations(n)
    src, dst = data.draw(st.sampled_from(shapes)), data.draw(st.sampled_from(shapes))
    run_copy([src], f"{shape_text(dst)} reshape(x0)")


@FAST
@given(st.lists(st.integers(0, 3), min_size=1, max_size=3), dims_st, st.data())
def test_concatenate(sizes, dims, data):
    axis = data.draw(st.integers(0, len(dims) - 1))
    operands = [tuple(n if i == axis else dims[i] for i in range(len(dims))) for n in sizes]
    if sum(sizes) == 0:
        return
    out = tuple(sum(sizes) if i == axis else dims[i] for i in range(len(dims)))
    args = ", ".join(f"x{k}" for k in range(len(operands)))
    run_copy(operands, f"{shape_text(out)} concatenate({args}), dimensions={{{axis}}}",
             data_operands=tuple(range(len(operands))))


@FAST
@given(dims_st, st.data())
def test_dynamic_slice(dims, data):
    sizes = [data.draw(st.integers(1, n)) for n in dims]
    offsets = [np.array(data.draw(st.integers(-2, 5)), np.int32) for _ in dims]
    params = [dims] + [()] * len(dims)
    args = ", ".join(f"x{k}" for k in range(len(params)))
    root = f"{shape_text(sizes)} dynamic-slice({args}), dynamic_slice_sizes={{{','.join(map(str, sizes))}}}"
    run_copy(params, root, extra_arrays={k + 1: o for k, o in enumerate(offsets)})


@FAST
@given(st.integers(1, 3), st.data())
def test_gather_canonical(batch, data):
    operand = (5, 4, 3)
    sizes = [data.draw(st.integers(1, n)) for n in operand]
    indices = np.array(data.draw(st.lists(st.lists(st.integers(-1, 5), min_size=2, max_size=2),
                                          min_size=batch, max_size=batch)), np.int32)
    out = (batch, *sizes)
    root = (f"{shape_text(out)} gather(x0, x1), offset_dims={{1,2,3}}, collapsed_slice_dims={{}},"
            f" start_index_map={{0,1}}, index_vector_dim=1, slice_sizes={{{','.join(map(str, sizes))}}}")
    run_copy([operand, (batch, 2)], root, extra_arrays={1: indices})


def test_gather_with_collapsed_dims():
    indices = np.array([[3], [0], [7]], np.int32)
    root = ("s32[3,4] gather(x0, x1), offset_dims={1}, collapsed_slice_dims={0},"
            " start_index_map={0}, index_vector_dim=1, slice_sizes={1,4}")
    run_copy([(6, 4), (3, 1)], root, extra_arrays={1: indices})


def test_dynamic_update_slice_is_exact_inside_the_update():
    m, maps = None, None
    params = [shape_text((6, 5)), shape_text((2, 3)), "s32[]", "s32[]"]
    m = entry_module(params, "s32[6,5] dynamic-update-slice(x0, x1, x2, x3)")
    src, upd = iota_input((6, 5)), iota_input((2, 3), 1000)
    arrays = [src, upd, np.array(3, np.int32), np.array(9, np.int32)]  # 9 clamps to 2
    from fusion.evaluator import evaluate
    from tests.tiling.indexing_oracle import runtime_reader

    (result,) = evaluate(m, *arrays)
    (upd_map,) = output_to_input_indexing(m.entry.root, m)[1]
    reads = read_sets(upd_map, runtime_reader(m, arrays))
    for o in np.ndindex(6, 5):
        (idx,) = reads[o]
        inside = all(0 <= i < n for i, n in zip(idx, (2, 3)))
        assert inside == (result[o] >= 1000)
        if inside:
            assert result[o] == upd[idx]


def definition_reads(out_dims, in_dims, rule):
    return {o: {i for i in np.ndindex(*in_dims) if rule(o, i)} for o in np.ndindex(*out_dims)}


def assert_reads(maps, expected):
    assert len(maps) <= 1
    got = read_sets(next(iter(maps))) if maps else {}
    for o, want in expected.items():
        assert got.get(o, set()) == want, o


@FAST
@given(dims_st, st.data())
def test_reduce_reads_by_definition(dims, data):
    reduced = sorted(data.draw(st.sets(st.sampled_from(range(len(dims))))))
    out = [n for k, n in enumerate(dims) if k not in reduced]
    m = entry_module([shape_text(dims), "s32[]"],
                     f"{shape_text(out)} reduce(x0, x1), dimensions={{{','.join(map(str, reduced))}}}, to_apply=add",
                     "add {\n  a = s32[] parameter(0)\n  b = s32[] parameter(1)\n  ROOT c = s32[] add(a, b)\n}")
    kept = [k for k in range(len(dims)) if k not in reduced]
    maps = output_to_input_indexing(m.entry.root, m)
    assert_reads(maps[0], definition_reads(out, dims, lambda o, i: tuple(i[k] for k in kept) == o))
    (back,) = input_to_output_indexing(m.entry.root, 0, m)
    for i in np.ndindex(*dims):
        assert back.evaluate(i) == tuple(i[k] for k in kept)


@FAST
@given(st.integers(1, 3), st.integers(1, 3), st.integers(1, 3), st.integers(1, 2))
def test_dot_reads_by_definition(b, mdim, k, n):
    m = entry_module([shape_text((b, mdim, k)), shape_text((b, k, n))],
                     f"{shape_text((b, mdim, n))} dot(x0, x1), lhs_batch_dims={{0}}, rhs_batch_dims={{0}},"
                     " lhs_contracting_dims={2}, rhs_contracting_dims={1}")
    lhs, rhs = output_to_input_indexing(m.entry.root, m)
    assert_reads(lhs, definition_reads((b, mdim, n), (b, mdim, k),
                                       lambda o, i: i[0] == o[0] and i[1] == o[1]))
    assert_reads(rhs, definition_reads((b, mdim, n), (b, k, n),
                                       lambda o, i: i[0] == o[0] and i[2] == o[2]))
    # input -> output: every output element that reads the input element, both operands.
    for operand, in_dims, pick in ((0, (b, mdim, k), lambda i, o: i[0] == o[0] and i[1] == o[1]),
                                   (1, (b, k, n), lambda i, o: i[0] == o[0] and i[2] == o[2])):
        (back,) = input_to_output_indexing(m.entry.root, operand, m)
        got = read_sets(back)
        for i in np.ndindex(*in_dims):
            assert got[i] == {o for o in np.ndindex(b, mdim, n) if pick(i, o)}


@FAST
@given(st.integers(2, 6), st.integers(1, 3), st.integers(1, 2), st.integers(0, 2),
       st.integers(0, 2), st.integers(1, 2), st.integers(1, 2))
def test_reduce_window_reads_by_definition(n, size, stride, low, high, wdil, bdil):
    padded = n + low + high + (n - 1) * (bdil - 1)
    span = (size - 1) * wdil + 1
    if padded < span:
        return
    out = (padded - span) // stride + 1
    window = (f"{{size={size} stride={stride} pad={low}_{high} lhs_dilate={bdil}"
              f" rhs_dilate={wdil}}}")
    m = entry_module([shape_text((n,)), "s32[]"],
                     f"{shape_text((out,))} reduce-window(x0, x1), window={window}, to_apply=add",
                     "add {\n  a = s32[] parameter(0)\n  b = s32[] parameter(1)\n  ROOT c = s32[] add(a, b)\n}")

    def reads(o, i):
        return any(o[0] * stride + w * wdil == low + i[0] * bdil for w in range(size))

    assert_reads(output_to_input_indexing(m.entry.root, m)[0],
                 definition_reads((out,), (n,), reads))


@FAST
@given(dims_st, st.data())
def test_input_to_output_inverts_output_to_input_for_copies(dims, data):
    """For permutations, slices, reshapes and pads: each input element read through the
    output -> input map at output o is mapped back to exactly o."""
    kind = data.draw(st.sampled_from(["transpose", "slice", "reshape", "reverse", "pad"]))
    if kind == "transpose":
        perm = data.draw(st.permutations(range(len(dims))))
        root = f"{shape_text([dims[p] for p in perm])} transpose(x0), dimensions={{{','.join(map(str, perm))}}}"
    elif kind == "reverse":
        root = f"{shape_text(dims)} reverse(x0), dimensions={{0}}"
    elif kind == "slice":
        root = f"{shape_text([(n + 1) // 2 for n in dims])} slice(x0), slice={{{', '.join(f'[0:{n}:2]' for n in dims)}}}"
    elif kind == "pad":
        root = (f"{shape_text([n + 1 + (n - 1) for n in dims])} pad(x0, x1),"
                f" padding={'x'.join('1_-1_1' for _ in dims)}")
    else:
        root = f"{shape_text([math.prod(dims)])} reshape(x0)"
    params = [shape_text(dims)] + (["s32[]"] if kind == "pad" else [])
    m = entry_module(params, root)
    (fwd,) = output_to_input_indexing(m.entry.root, m)[0]
    (back,) = input_to_output_indexing(m.entry.root, 0, m)
    back_reads = read_sets(back)
    pairs = {(dims_, fwd.evaluate(dims_, syms)) for dims_, syms in enumerate_points(fwd)}
    assert pairs == {(o, i) for i, outs in back_reads.items() for o in outs}


def test_bitcast_with_layouts_matches_the_physical_buffer():
    src_dims, src_m2m = (2, 3, 4), (0, 2, 1)
    dst_dims, dst_m2m = (4, 6), (0, 1)
    m = entry_module([f"s32[2,3,4]{{{','.join(map(str, src_m2m))}}}"],
                     f"s32[4,6]{{{','.join(map(str, dst_m2m))}}} bitcast(x0)")
    (fwd,) = output_to_input_indexing(m.entry.root, m)[0]
    src = iota_input(src_dims)
    physical = src.transpose(tuple(reversed(src_m2m))).reshape(-1)
    dst_major_to_minor = tuple(reversed(dst_m2m))
    dst_physical = physical.reshape([dst_dims[k] for k in dst_major_to_minor])
    dst = dst_physical.transpose(np.argsort(dst_major_to_minor))
    for o in np.ndindex(*dst_dims):
        assert fwd.evaluate(o) == np.unravel_index(dst[o], src_dims)
    (back,) = input_to_output_indexing(m.entry.root, 0, m)
    for o in np.ndindex(*dst_dims):
        assert back.evaluate(fwd.evaluate(o)) == o


def test_size_one_reshape_reads_the_right_element():
    run_copy([(4, 1)], "s32[1,4] reshape(x0)")
    run_copy([(1, 4, 1)], "s32[4] reshape(x0)")
    run_copy([()], "s32[1,1] reshape(x0)")
