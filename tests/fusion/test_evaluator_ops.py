"""Op rules of the evaluator on inline HLO, against NumPy or hand-worked results."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion.evaluator import evaluate
from fusion.evaluator import sort_ops
from fusion.text.parser import parse_hlo

BF16 = ml_dtypes.bfloat16


def run(body: str, *args, extra: str = ""):
    return evaluate(parse_hlo(f"HloModule m\n{extra}\nENTRY e {{\n{body}\n}}\n"), *args)


ADD = "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT r = f32[] add(a, b)\n}\n"


def test_integer_power_hand_worked():
    a = np.array([3, 2, -1, 1, -1, 0, 5, -3, 2, 7], np.int32)
    b = np.array([5, 31, -3, -5, -4, 0, 7, 3, -1, 0], np.int32)
    (got,) = run("a = s32[10] parameter(0)\nb = s32[10] parameter(1)\n"
                 "ROOT p = s32[10] power(a, b)", a, b)
    assert got.tolist() == [243, -2**31, -1, 1, 1, 1, 78125, -27, 0, 1]


def test_complex_real_imag():
    re = np.array([1.5, -2.0], np.float32)
    im = np.array([0.5, 3.0], np.float32)
    c, r, i, m = run("a = f32[2] parameter(0)\nb = f32[2] parameter(1)\n"
                     "c = c64[2] complex(a, b)\nr = f32[2] real(c)\ni = f32[2] imag(c)\n"
                     "m = f32[2] abs(c)\nROOT t = (c64[2], f32[2], f32[2], f32[2]) tuple(c, r, i, m)",
                     re, im)
    np.testing.assert_array_equal(c, re + 1j * im)
    np.testing.assert_array_equal(r, re)
    np.testing.assert_array_equal(i, im)
    np.testing.assert_allclose(m, np.abs(re + 1j * im), rtol=1e-7)


def test_bf16_ops_round_per_op():
    # 256 + 1 rounds back to 256 in bf16 before the subtraction sees it.
    (got,) = run("a = bf16[2] parameter(0)\nb = bf16[2] parameter(1)\n"
                 "s = bf16[2] add(a, b)\nROOT d = bf16[2] subtract(s, a)",
                 np.array([256, 3], BF16), np.array([1, 0.25], BF16))
    assert got.dtype == BF16 and got.astype(np.float32).tolist() == [0.0, 0.25]


def test_bitcast_follows_layouts():
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    # Same buffer, logical shape [3,2] with a column-major layout: the transpose.
    (got,) = run("p = f32[2,3]{1,0} parameter(0)\nROOT b = f32[3,2]{0,1} bitcast(p)", x)
    np.testing.assert_array_equal(got, x.T)
    (got,) = run("p = f32[2,3]{0,1} parameter(0)\nROOT b = f32[6]{0} bitcast(p)", x)
    np.testing.assert_array_equal(got, x.T.reshape(-1))


def test_dynamic_slices_clamp_starts():
    x = np.arange(20, dtype=np.int32).reshape(4, 5)
    body = ("p = s32[4,5] parameter(0)\ni = s32[] parameter(1)\nj = s32[] parameter(2)\n"
            "ROOT d = s32[2,3] dynamic-slice(p, i, j), dynamic_slice_sizes={2,3}")
    for i, j in [(-5, 9), (3, 3), (1, 1)]:
        ci, cj = min(max(i, 0), 2), min(max(j, 0), 2)
        (got,) = run(body, x, np.int32(i), np.int32(j))
        np.testing.assert_array_equal(got, x[ci:ci + 2, cj:cj + 3])
    (got,) = run("p = s32[4,5] parameter(0)\nu = s32[2,2] parameter(1)\ni = u32[] parameter(2)\n"
                 "ROOT d = s32[4,5] dynamic-update-slice(p, u, i, i)",
                 x, np.full((2, 2), -1, np.int32), np.uint32(2**32 - 1))
    want = x.copy()
    want[2:4, 3:5] = -1
    np.testing.assert_array_equal(got, want)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(-3, 3), st.integers(-3, 3), st.integers(0, 2)),
                min_size=2, max_size=2), st.integers(0, 4), st.integers(1, 4))
def test_pad_matches_brute_force(config, rows, cols):
    x = np.arange(rows * cols, dtype=np.int32).reshape(rows, cols) + 1
    out_dims = [n + max(n - 1, 0) * i + lo + hi for n, (lo, hi, i) in zip(x.shape, config)]
    if min(out_dims) < 0:
        return
    want = np.zeros(out_dims, np.int32)
    for r in range(rows):
        for c in range(cols):
            pr = config[0][0] + r * (config[0][2] + 1)
            pc = config[1][0] + c * (config[1][2] + 1)
            if 0 <= pr < out_dims[0] and 0 <= pc < out_dims[1]:
                want[pr, pc] = x[r, c]
    padding = "x".join(f"{lo}_{hi}_{i}" for lo, hi, i in config)
    (got,) = run(f"p = s32[{rows},{cols}] parameter(0)\nz = s32[] constant(0)\n"
                 f"ROOT r = s32[{out_dims[0]},{out_dims[1]}] pad(p, z), padding={padding}", x)
    np.testing.assert_array_equal(got, want)


def test_variadic_reduce_argmax_and_empty_dims():
    extra = ("argmax {\n  a = f32[] parameter(0)\n  i = s32[] parameter(1)\n"
             "  b = f32[] parameter(2)\n  j = s32[] parameter(3)\n"
             "  gt = pred[] compare(a, b), direction=GT\n  eq = pred[] compare(a, b), direction=EQ\n"
             "  lt = pred[] compare(i, j), direction=LT\n  tie = pred[] and(eq, lt)\n"
             "  keep = pred[] or(gt, tie)\n  v = f32[] select(keep, a, b)\n"
             "  k = s32[] select(keep, i, j)\n  ROOT t = (f32[], s32[]) tuple(v, k)\n}\n")
    x = np.array([[1, 5, 5, 2, 0], [7, 1, 7, 7, -1], [0, 0, 0, 0, 0]], np.float32)
    idx = np.broadcast_to(np.arange(5, dtype=np.int32), (3, 5)).copy()
    values, indices = run("x = f32[3,5] parameter(0)\ni = s32[3,5] parameter(1)\n"
                          "m = f32[] constant(-inf)\nz = s32[] constant(0)\n"
                          "ROOT r = (f32[3], s32[3]) reduce(x, i, m, z), dimensions={1}, "
                          "to_apply=argmax", x, idx, extra=extra)
    np.testing.assert_array_equal(values, x.max(axis=1))
    np.testing.assert_array_equal(indices, x.argmax(axis=1))
    (got,) = run("x = f32[3,0] parameter(0)\nc = f32[] constant(2)\n"
                 "ROOT r = f32[3] reduce(x, c), dimensions={1}, to_apply=add",
                 np.zeros((3, 0), np.float32), extra=ADD)
    assert got.tolist() == [2.0, 2.0, 2.0]


def test_bf16_reduce_rounds_every_step_to_bf16():
    x = np.full(1000, 1.0, BF16)
    (got,) = run("x = bf16[1000] parameter(0)\nc = bf16[] constant(0)\n"
                 "ROOT r = bf16[] reduce(x, c), dimensions={0}, to_apply=add",
                 x, extra=ADD.replace("f32", "bf16"))
    # Pairwise sums of ones are exact in bf16 up to 256; the total 1000 rounds to 1000.
    assert float(got) == 1000.0
    y = np.concatenate([[256.0], np.full(7, 1.0)]).astype(BF16)
    (got,) = run("x = bf16[8] parameter(0)\nc = bf16[] constant(0)\n"
                 "ROOT r = bf16[] reduce(x, c), dimensions={0}, to_apply=add",
                 y, extra=ADD.replace("f32", "bf16"))
    # ((256+1)+(1+1)) + ((1+1)+(1+1)): 257 -> 256, then 258 and 262 are exact in bf16.
    assert float(got) == 262.0


def test_reducer_that_is_not_batchable_runs_per_element():
    extra = ADD + ("wrapped {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
                   "  ROOT c = f32[] call(a, b), to_apply=add\n}\n")
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    (got,) = run("x = f32[3,4] parameter(0)\nc = f32[] constant(0)\n"
                 "ROOT r = f32[3] reduce(x, c), dimensions={1}, to_apply=wrapped", x, extra=extra)
    np.testing.assert_array_equal(got, x.sum(axis=1))


def test_map():
    extra = ("fma {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
             "  m = f32[] multiply(a, b)\n  ROOT r = f32[] add(m, a)\n}\n")
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    (got,) = run("a = f32[2,3] parameter(0)\nb = f32[2,3] parameter(1)\n"
                 "ROOT m = f32[2,3] map(a, b), dimensions={0,1}, to_apply=fma", a, a + 1,
                 extra=extra)
    np.testing.assert_array_equal(got, a * (a + 1) + a)


def test_conditional_index_out_of_range_runs_last_branch():
    extra = "".join(f"b{k} {{\n  p = f32[] parameter(0)\n  c = f32[] constant({k + 1})\n"
                    f"  ROOT r = f32[] multiply(p, c)\n}}\n" for k in range(3))
    body = ("i = s32[] parameter(0)\nx = f32[] parameter(1)\n"
            "ROOT c = f32[] conditional(i, x, x, x), branch_computations={b0, b1, b2}")
    results = [float(run(body, np.int32(i), np.float32(2), extra=extra)[0]) for i in (-1, 0, 1, 2, 9)]
    assert results == [6.0, 2.0, 4.0, 6.0, 6.0]
    pred_body = ("p = pred[] parameter(0)\nx = f32[] parameter(1)\n"
                 "ROOT c = f32[] conditional(p, x, x), true_computation=b1, false_computation=b2")
    assert float(run(pred_body, np.bool_(True), np.float32(2), extra=extra)[0]) == 4.0
    assert float(run(pred_body, np.bool_(False), np.float32(2), extra=extra)[0]) == 6.0


def test_scatter_drops_out_of_bounds_windows_and_applies_in_order():
    extra = ("combine {\n  a = s32[] parameter(0)\n  b = s32[] parameter(1)\n"
             "  t = s32[] constant(10)\n  m = s32[] multiply(a, t)\n  ROOT r = s32[] add(m, b)\n}\n")
    operand = np.zeros((5, 2), np.int32)
    indices = np.array([[1], [4], [1], [3], [-1]], np.int32)
    updates = np.arange(1, 11, dtype=np.int32).reshape(5, 2)
    (got,) = run("o = s32[5,2] parameter(0)\ni = s32[5,1] parameter(1)\n"
                 "u = s32[5,2] parameter(2)\n"
                 "ROOT s = s32[5,2] scatter(o, i, u), update_window_dims={1}, "
                 "inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, "
                 "index_vector_dim=1, to_apply=combine", operand, indices, updates, extra=extra)
    want = np.zeros((5, 2), np.int32)
    want[1] = [1 * 10 + 5, 2 * 10 + 6]  # row 1 updated by update 0 then update 2, in order
    want[4] = [3, 4]
    want[3] = [7, 8]
    np.testing.assert_array_equal(got, want)
    # A 2-row window starting at row 4 of 5 sticks out: the whole window is dropped.
    (got,) = run("o = s32[5,2] parameter(0)\ni = s32[2,1] parameter(1)\n"
                 "u = s32[2,2,2] parameter(2)\n"
                 "ROOT s = s32[5,2] scatter(o, i, u), update_window_dims={1,2}, "
                 "inserted_window_dims={}, scatter_dims_to_operand_dims={0}, "
                 "index_vector_dim=1, to_apply=combine", operand, np.array([[4], [0]], np.int32),
                 np.ones((2, 2, 2), np.int32), extra=extra)
    want = np.zeros((5, 2), np.int32)
    want[0:2] = 1
    np.testing.assert_array_equal(got, want)


def test_scatter_without_window_dims_updates_single_elements():
    # update_window_dims={} (one element per index row, as x.at[i].add(v) on a vector lowers)
    # once made NumPy reshape an empty index grid with -1 and crash.
    (got,) = run("o = f32[6] parameter(0)\ni = s32[4,1] parameter(1)\nu = f32[4] parameter(2)\n"
                 "ROOT s = f32[6] scatter(o, i, u), update_window_dims={}, "
                 "inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, "
                 "index_vector_dim=1, to_apply=add", np.zeros(6, np.float32),
                 np.array([[2], [5], [2], [9]], np.int32), np.array([1, 2, 4, 8], np.float32),
                 extra=ADD)
    want = np.zeros(6, np.float32)
    np.add.at(want, [2, 5, 2], [1, 2, 4])  # index 9 is out of bounds: dropped
    np.testing.assert_array_equal(got, want)


def test_gather_with_batching_dims():
    operand = np.arange(2 * 5 * 3, dtype=np.float32).reshape(2, 5, 3)
    indices = np.array([[4, 0, 9], [1, 1, -2]], np.int32)
    (got,) = run("o = f32[2,5,3] parameter(0)\ni = s32[2,3] parameter(1)\n"
                 "ROOT g = f32[2,3,3] gather(o, i), offset_dims={2}, collapsed_slice_dims={1}, "
                 "start_index_map={1}, operand_batching_dims={0}, "
                 "start_indices_batching_dims={0}, index_vector_dim=2, slice_sizes={1,1,3}",
                 operand, indices)
    clamped = np.clip(indices, 0, 4)
    want = np.stack([operand[b][clamped[b]] for b in range(2)])
    np.testing.assert_array_equal(got, want)


def test_sort_fallback_for_long_rows(monkeypatch):
    monkeypatch.setattr(sort_ops, "_PAIRWISE_MAX_ROW", 3)
    extra = ("less {\n  a = s32[] parameter(0)\n  b = s32[] parameter(1)\n"
             "  c = f32[] parameter(2)\n  d = f32[] parameter(3)\n"
             "  ROOT r = pred[] compare(a, b), direction=LT\n}\n")
    keys = np.array([[5, 1, 5, 0, 1, 3, 5, 2, 0], [1, 1, 1, 0, 0, 0, 2, 2, 2]], np.int32)
    values = np.arange(18, dtype=np.float32).reshape(2, 9)
    got_keys, got_values = run(
        "k = s32[2,9] parameter(0)\nv = f32[2,9] parameter(1)\n"
        "ROOT s = (s32[2,9], f32[2,9]) sort(k, v), dimensions={1}, is_stable=true, to_apply=less",
        keys, values, extra=extra)
    order = np.argsort(keys, axis=1, kind="stable")
    np.testing.assert_array_equal(got_keys, np.take_along_axis(keys, order, 1))
    np.testing.assert_array_equal(got_values, np.take_along_axis(values, order, 1))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-3, 3), min_size=1, max_size=40), st.integers(1, 9))
def test_block_by_block_counts_are_the_stable_sort(keys, block):
    row = np.array([keys], np.int64)
    positions = sort_ops.blocked_sort_positions(lambda a: (a[0] < a[1],), [row], block)
    want = np.empty(len(keys), np.int64)
    want[np.argsort(row[0], kind="stable")] = np.arange(len(keys))
    np.testing.assert_array_equal(positions, want)


@pytest.mark.parametrize("pairwise_max", [2048, 2])  # all pairs at once; block by block
def test_a_comparator_that_is_no_strict_weak_order_still_permutes(pairwise_max, monkeypatch):
    """A plain float LT finds NaN equivalent to every value: counts may repeat, and the row
    must still come out a permutation of itself (no element lost or doubled)."""
    monkeypatch.setattr(sort_ops, "_PAIRWISE_MAX_ROW", pairwise_max)
    extra = ("less {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
             "  ROOT r = pred[] compare(a, b), direction=LT\n}\n")
    x = np.array([[1.0, np.nan, 0.0, 2.0, np.nan, -1.0]], np.float32)
    (got,) = run("x = f32[1,6] parameter(0)\n"
                 "ROOT s = f32[1,6] sort(x), dimensions={1}, is_stable=true, to_apply=less",
                 x, extra=extra)
    assert sorted(got[0].view(np.int32).tolist()) == sorted(x[0].view(np.int32).tolist())


def test_long_chain_has_no_recursion_limit():
    lines = ["v0 = f32[3] parameter(0)"]
    for k in range(1, 3001):
        lines.append(f"v{k} = f32[3] add(v{k - 1}, v0)")
    lines.append("ROOT r = f32[3] negate(v3000)")
    (got,) = run("\n".join(lines), np.array([1, 2, 0.5], np.float32))
    np.testing.assert_array_equal(got, -3001 * np.array([1, 2, 0.5], np.float32))


def test_iota_broadcast_transpose_reverse_slice():
    (iota, b, t, r, s) = run(
        "i = f32[2,3] iota(), iota_dimension=1\n"
        "b = f32[4,2,3] broadcast(i), dimensions={1,2}\n"
        "t = f32[3,4,2] transpose(b), dimensions={2,0,1}\n"
        "r = f32[3,4,2] reverse(t), dimensions={0,2}\n"
        "s = f32[2,2,1] slice(r), slice={[0:3:2], [1:4:2], [1:2]}\n"
        "ROOT out = (f32[2,3], f32[4,2,3], f32[3,4,2], f32[3,4,2], f32[2,2,1]) "
        "tuple(i, b, t, r, s)")
    want_iota = np.broadcast_to(np.arange(3, dtype=np.float32), (2, 3))
    np.testing.assert_array_equal(iota, want_iota)
    np.testing.assert_array_equal(b, np.broadcast_to(want_iota, (4, 2, 3)))
    np.testing.assert_array_equal(t, np.transpose(b, (2, 0, 1)))
    np.testing.assert_array_equal(r, t[::-1, :, ::-1])
    np.testing.assert_array_equal(s, r[0:3:2, 1:4:2, 1:2])


def test_tuple_parameter_and_nested_tuple_result():
    a = np.arange(3, dtype=np.int32)
    out = run("p = (s32[3], (f32[])) parameter(0)\n"
              "x = s32[3] get-tuple-element(p), index=0\n"
              "y = (f32[]) get-tuple-element(p), index=1\n"
              "ROOT t = ((f32[]), s32[3]) tuple(y, x)", (a, (np.float32(2.5),)))
    assert [o.tolist() for o in out] == [2.5, [0, 1, 2]]


def test_erf_of_a_scalar_is_an_array_of_its_type():
    # Found by the differential fuzzer: on a rank-0 value the f64 erf came back a Python float.
    (got,) = run("a = f32[] parameter(0)\nROOT e = f32[] erf(a)", np.float32(0.5))
    assert got.shape == () and got.dtype == np.float32
    assert got == np.float32(0.5204998778130465)


#: XLA:CPU's optimized TOTALORDER comparator: the keys' bits through ``bitcast`` (rank 0).
BITCAST_LT = """cmp {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  mask = s32[] constant(2147483647)
  zero = s32[] constant(0)
  ia = s32[] bitcast(a)
  ib = s32[] bitcast(b)
  na = pred[] compare(ia, zero), direction=LT
  nb = pred[] compare(ib, zero), direction=LT
  xa = s32[] xor(ia, mask)
  xb = s32[] xor(ib, mask)
  ka = s32[] select(na, xa, ia)
  kb = s32[] select(nb, xb, ib)
  ROOT lt = pred[] compare(ka, kb), direction=LT
}"""


def test_a_comparator_bitcasting_scalars_runs_on_whole_arrays():
    # Found by the differential fuzzer: a bitcast made the comparator run once per pair of
    # elements in Python (minutes for a 520-long sort); between scalars it reinterprets each
    # element, so the comparator runs batched.
    from fusion.evaluator.interpreter import Evaluator

    module = parse_hlo(f"HloModule m\n{BITCAST_LT}\nENTRY e {{\n  x = f32[3,50] parameter(0)\n"
                       "  ROOT s = f32[3,50] sort(x), dimensions={1}, is_stable=true, to_apply=cmp\n}\n")
    assert Evaluator(module).is_batchable("cmp", module.entry.root)
    x = np.random.default_rng(2).standard_normal((3, 50)).astype(np.float32)
    x[0, :4] = [np.nan, -0.0, 0.0, -np.inf]
    (got,) = evaluate(module, x)
    bits = x.view(np.int32)
    keys = np.where(bits < 0, bits ^ 0x7FFFFFFF, bits)
    want = np.take_along_axis(x, np.argsort(keys, axis=1, kind="stable"), axis=1)
    assert got.tobytes() == want.tobytes()


def test_the_bitcasting_comparator_sorts_rows_too_long_to_compare_pairwise(monkeypatch):
    # Found by the differential fuzzer: past the pairwise limit the comparator runs on two
    # scalars, and its bitcast gave a rank-1 result ("cannot broadcast a non-scalar to a
    # scalar array", a 2,050-long sort refused).
    monkeypatch.setattr(sort_ops, "_PAIRWISE_MAX_ROW", 8)
    module = parse_hlo(f"HloModule m\n{BITCAST_LT}\nENTRY e {{\n  x = f32[2,20] parameter(0)\n"
                       "  ROOT s = f32[2,20] sort(x), dimensions={1}, is_stable=true, to_apply=cmp\n}\n")
    x = np.random.default_rng(3).standard_normal((2, 20)).astype(np.float32)
    x[0, :3] = [-0.0, 0.0, np.nan]
    (got,) = evaluate(module, x)
    bits = x.view(np.int32)
    keys = np.where(bits < 0, bits ^ 0x7FFFFFFF, bits)
    want = np.take_along_axis(x, np.argsort(keys, axis=1, kind="stable"), axis=1)
    assert got.tobytes() == want.tobytes()
