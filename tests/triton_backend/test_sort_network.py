"""Sorts by any comparator (``templates/sort/network_kernel.py``): several keys, 64-bit keys,
keys compared through arithmetic, run as a bitonic network asking the HLO comparator.  Truths:
XLA itself (JAX on CPU) and the reference evaluator, bit for bit; every case was refused
before (the packed-key kernel takes one key of at most 32 bits in a LT/GT order)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import fusion
from tests.triton_backend.target_compiles import compile_on_targets
from triton_backend import compile_hlo
from triton_backend.host.input_validation import tensor_from_numpy, tensor_to_numpy
from triton_backend.reports.ptx_report import find_ptxas
from triton_backend.driver.single_op_fusion import wrap_lone_ops
from triton_backend.templates.sort.driver import sort_method, sort_of


def _run(fn, *args):
    """``fn`` compiled by us and run on ``args``, its sort fusions' sources, and XLA's result."""
    text = jax.jit(fn).lower(*args).as_text(dialect="hlo")
    compiled = compile_hlo(text, cache=False)
    sources = [f.source for f in compiled.fusions.values() if f.kind.value == "sort"]
    params = compiled.module.entry.parameters
    got = compiled(*(tensor_from_numpy(np.asarray(a), p.shape.dtype) for a, p in zip(args, params)))
    want = jax.jit(fn)(*args)
    return [tensor_to_numpy(g) for g in got], [np.asarray(w) for w in jax.tree.leaves(want)], sources


def _bits(a):
    a = np.asarray(a)
    return a.view(f"u{a.dtype.itemsize}") if a.dtype.kind == "f" else a


def _assert_same(got, want, sources):
    assert sources and all("sorting_network" in s for s in sources)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(_bits(g), _bits(w))


def _keys(rng, shape, dtype):
    """Few distinct values (ties everywhere), NaNs and signed zeros for floats."""
    if np.dtype(dtype).kind == "f":
        x = (rng.integers(-3, 4, shape) * 0.5).astype(dtype)
        flat = x.reshape(-1)
        flat[rng.integers(0, flat.size, 3)] = np.nan
        flat[rng.integers(0, flat.size, 3)] = -0.0
        return flat.reshape(shape)
    return rng.integers(-3, 4, shape).astype(dtype)


def test_two_keys_and_a_payload_match_xla():
    """``lax.sort`` with ``num_keys=2``: an s32 key, ties broken by an f32 key in JAX's NaN
    order, a bf16 payload carried along; rows of 37 (padded to 64) along dim 0 too."""
    rng = np.random.default_rng(0)
    for dim in (1, 0):
        a = _keys(rng, (5, 37), np.int32)
        b = _keys(rng, (5, 37), np.float32)
        c = rng.standard_normal((5, 37)).astype(jnp.bfloat16)
        _assert_same(*_run(lambda a, b, c: jax.lax.sort((a, b, c), dimension=dim, num_keys=2),
                           a, b, c))


def test_lexsort_and_a_stable_descending_argsort_match_xla():
    rng = np.random.default_rng(1)
    a, b = _keys(rng, (3, 50), np.int32), _keys(rng, (3, 50), np.int32)
    _assert_same(*_run(lambda a, b: jnp.lexsort((a, b)), a, b))
    x = _keys(rng, (4, 29), np.float32)
    got, want, sources = _run(lambda x: jnp.argsort(x, descending=True, stable=True), x)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.uint64])
def test_64_bit_keys_match_xla(dtype):
    """x64 mode's sorts: 64-bit keys no packed 32-bit key holds."""
    rng = np.random.default_rng(2)
    with jax.enable_x64(True):
        if dtype == np.float64:
            x = _keys(rng, (3, 100), dtype)
            # (no denormals: XLA:CPU flushes them, numerics_policy)
            x[0, :8] = [np.inf, -np.inf, 1e-300, -1e-300, 1e300, -1e300, 0.1, 0.1 + 2 ** -55]
        else:
            info = np.iinfo(dtype)
            x = rng.integers(info.min, info.max, (3, 100), dtype=dtype, endpoint=True)
            x[0, :10] = x[0, 10]  # ties: argsort keeps them in order
        _assert_same(*_run(lambda x: jnp.sort(x, axis=-1), x))
        _assert_same(*_run(lambda x: jnp.argsort(x, axis=-1, stable=True), x))


COMPARATOR = """HloModule m
cmp {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  @BODY
}
ENTRY e {
  x = s32[4,@N] parameter(0)
  y = s32[4,@N] iota(), iota_dimension=1
  ROOT s = (s32[4,@N], s32[4,@N]) sort(x, y), dimensions={1}, to_apply=cmp
}
"""


@pytest.mark.parametrize("body", [
    # |a| < |b|, by magnitude: a key compared through arithmetic (no LT/GT of the key)
    "ma = s32[] abs(a)\n  mb = s32[] abs(b)\n  ROOT c = pred[] compare(ma, mb), direction=LT",
    # the key descending, ties by the iota descending: reads both operands
    "c0 = pred[] compare(a, b), direction=GT\n  e = pred[] compare(a, b), direction=EQ\n"
    "  c1 = pred[] compare(i, j), direction=GT\n  t = pred[] and(e, c1)\n"
    "  ROOT c = pred[] or(c0, t)",
], ids=["magnitude", "descending_tie_break"])
@pytest.mark.parametrize("n", [1, 33, 256])
def test_hand_written_comparators_match_the_evaluator(body, n):
    module = fusion.parse_hlo(COMPARATOR.replace("@BODY", body).replace("@N", str(n)))
    x = np.random.default_rng(n).integers(-5, 6, (4, n)).astype(np.int32)
    compiled = compile_hlo(module, cache=False)
    got = compiled(torch.from_numpy(x))
    want = fusion.evaluate(module, x)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g.numpy(), w)


def test_a_sub_byte_key_is_carried_in_a_byte():
    """An s4 key (held one value a byte) sorts by the network: its carrier is as wide as its
    register, not as its 4 bits (a KeyError before)."""
    import ml_dtypes

    text = (COMPARATOR.replace("s32[] parameter(0)", "s4[] parameter(0)")
            .replace("s32[] parameter(1)", "s4[] parameter(1)")
            .replace("x = s32[4,@N]", "x = s4[4,@N]").replace("(s32[4,@N], s32[4,@N])",
                                                              "(s4[4,@N], s32[4,@N])")
            .replace("@BODY", "ROOT c = pred[] compare(a, b), direction=GT").replace("@N", "20"))
    module = fusion.parse_hlo(text)
    x = np.random.default_rng(6).integers(-8, 8, (4, 20)).astype(ml_dtypes.int4)
    compiled = compile_hlo(module, cache=False)
    assert any("sorting_network" in f.source for f in compiled.fusions.values())
    got = compiled(torch.from_numpy(x.astype(np.int8)))
    for g, w in zip(got, fusion.evaluate(module, x)):
        np.testing.assert_array_equal(g.numpy().astype(np.int64), np.asarray(w).astype(np.int64))


def test_the_method_is_chosen_by_the_comparator():
    """One LT of the key: the packed-key kernel (an order); anything else: the network."""
    def method(body):
        module = fusion.parse_hlo(COMPARATOR.replace("@BODY", body).replace("@N", "8"))
        wrapped = wrap_lone_ops(module, {"e": ("s",)})
        (instr,) = [i for _, i in wrapped.fusions()]
        return sort_method(wrapped, instr, sort_of(wrapped, instr))

    plain = method("ROOT c = pred[] compare(a, b), direction=LT")
    assert plain is not None and not plain.descending
    assert method("ma = s32[] abs(a)\n  mb = s32[] abs(b)\n"
                  "  ROOT c = pred[] compare(ma, mb), direction=LT") is None


def f64_tie_break_sort(rows: int, n: int) -> str:
    """An ENTRY sort of ``rows`` rows of ``n`` f64 keys in TOTALORDER, ties by an s32 operand
    descending: a comparator of two operands and a 64-bit key."""
    return ("HloModule m\ncmp {\n  a = f64[] parameter(0)\n  b = f64[] parameter(1)\n"
            "  i = s32[] parameter(2)\n  j = s32[] parameter(3)\n"
            "  c0 = pred[] compare(a, b), direction=LT, type=TOTALORDER\n"
            "  e = pred[] compare(a, b), direction=EQ, type=TOTALORDER\n"
            "  c1 = pred[] compare(i, j), direction=GT\n  t = pred[] and(e, c1)\n"
            "  ROOT c = pred[] or(c0, t)\n}\n"
            f"ENTRY e {{\n  x = f64[{rows},{n}] parameter(0)\n  y = s32[{rows},{n}] parameter(1)\n"
            f"  ROOT s = (f64[{rows},{n}], s32[{rows},{n}]) sort(x, y), dimensions={{1}}, "
            "to_apply=cmp\n}\n")


@pytest.mark.skipif(find_ptxas(90) is None, reason="ptxas not found in the Triton wheel")
def test_the_network_compiles_for_sm90_without_spills():
    (sort,) = compile_hlo(f64_tie_break_sort(64, 128), target="sm_90", cache=False).fusions.values()
    assert "sorting_network" in sort.source
    (report,) = compile_on_targets([[sort.kernel_path, 90]])
    assert report["registers"] > 0 and report["spills"] == 0, report


def test_xlas_optimized_two_key_sort_matches_xla():
    """As XLA optimizes it, the comparator reads its float key through a scalar ``bitcast``
    (its form of a bitcast-convert, for TOTALORDER): rendered as one."""
    rng = np.random.default_rng(4)
    a, b = _keys(rng, (4, 45), np.float32), _keys(rng, (4, 45), np.float32)
    fn = lambda a, b: jax.lax.sort((jnp.round(a), b, a), num_keys=2)[2]  # noqa: E731
    text = jax.jit(fn).lower(a, b).compile().as_text()
    assert "bitcast(" in text
    compiled = compile_hlo(text, cache=False)
    assert any("sorting_network" in f.source for f in compiled.fusions.values())
    (got,) = compiled(torch.from_numpy(a), torch.from_numpy(b))
    np.testing.assert_array_equal(_bits(got.numpy()), _bits(jax.jit(fn)(a, b)))


@pytest.mark.parametrize("dtype", [np.float64, np.int64, np.uint64])
def test_long_rows_of_64_bit_keys_sort_as_one_library_call(dtype):
    """Past one tile (4096) a plain order of a 64-bit key is one stable ``torch.sort`` of its
    ordered integers (the network takes rows of one tile only)."""
    from triton_backend.templates.sort.library_call import LibrarySort

    rng = np.random.default_rng(5)
    with jax.enable_x64(True):
        if dtype == np.float64:
            x = rng.integers(-20, 20, (2, 4100)).astype(dtype) / 3
            x[0, 5], x[1, 7], x[1, 8], x[0, 9] = np.nan, -0.0, 0.0, -np.inf
        else:
            info = np.iinfo(dtype)
            x = rng.integers(info.min, info.max, (2, 4100), dtype=dtype, endpoint=True)
            x[:, :50] = x[:, 50:51]  # ties, kept in index order
        for fn in (lambda x: jnp.argsort(x, axis=-1, stable=True),
                   lambda x: jnp.sort(x, axis=-1, descending=True)):
            text = jax.jit(fn).lower(x).as_text(dialect="hlo")
            compiled = compile_hlo(text, cache=False)
            assert any(isinstance(f, LibrarySort) for f in compiled.fusions.values())
            (got,) = compiled(tensor_from_numpy(x, compiled.module.entry.parameters[0].shape.dtype))
            _same = np.asarray(jax.jit(fn)(x))
            np.testing.assert_array_equal(_bits(tensor_to_numpy(got)), _bits(_same))
