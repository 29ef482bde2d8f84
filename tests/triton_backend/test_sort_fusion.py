"""Sort fusions as tl.sort kernels in the interpreter, against the reference evaluator."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes  # noqa: F401
import numpy as np
import pytest

import fusion
from fusion.errors import UnsupportedOpError
from tests.triton_backend.dot_fusion_helpers import to_numpy, to_torch
from triton_backend.driver.single_op_fusion import wrap_lone_ops
from triton_backend.templates.sort.driver import (
    MAX_SORT_LENGTH, SortOrder, comparator_order, compile_sort_fusion, is_sort_fusion, sort_method,
    sort_of)
from triton_backend.templates.sort.library_call import LibrarySort

NUMPY = {"f32": np.float32, "bf16": ml_dtypes.bfloat16, "s32": np.int32, "f16": np.float16}


def jax_sort_module(fn, *shapes_dtypes):
    args = [jnp.zeros(s, d) for s, d in shapes_dtypes]
    module = fusion.parse_hlo(jax.jit(fn).lower(*args).as_text(dialect="hlo"))
    sorts = {c.name: tuple(i.name for i in c if i.opcode == "sort") for c in module.computations}
    wrapped = wrap_lone_ops(module, {k: v for k, v in sorts.items() if v})
    names = [i.name for c in wrapped.computations for i in c if i.opcode == "fusion"]
    return module, wrapped, names


def keys_with_nans_and_duplicates(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    if dtype == "s32":
        return rng.integers(-4, 5, shape).astype(np.int32)
    x = rng.integers(-3, 4, shape).astype(np.float32) * np.float32(0.5)
    flat = x.reshape(-1)
    flat[rng.integers(0, flat.size, 3)] = np.nan
    flat[rng.integers(0, flat.size, 2)] = -np.inf
    flat[rng.integers(0, flat.size, 2)] = -0.0
    return flat.reshape(shape).astype(NUMPY[dtype])


def fused_as_entry(module, fusion_name):
    """The fusion's computation as the ENTRY (evaluated alone by the reference evaluator)."""
    instr = next(i for _, i in module.fusions() if i.name == fusion_name)
    return fusion.HloModule(module.name, module.computations, instr.attr("calls"))


def bits(a):
    return a.view(np.uint16 if a.dtype.itemsize == 2 else np.uint32)


@pytest.mark.parametrize("dtype", ["f32", "bf16", "s32"])
@pytest.mark.parametrize("descending", [False, True])
def test_jax_sort_matches_evaluator_bit_exactly(dtype, descending):
    jdt = {"f32": jnp.float32, "bf16": jnp.bfloat16, "s32": jnp.int32}[dtype]
    module, wrapped, names = jax_sort_module(
        lambda x: jnp.sort(x, axis=-1, descending=descending), ((3, 37), jdt))
    x = keys_with_nans_and_duplicates((3, 37), dtype)
    compiled = compile_sort_fusion(wrapped, names[0])
    assert compiled.kind == "sort" and compiled.tile_sizes == (64,) and "tl.sort(" in compiled.source
    got = to_numpy(compiled(to_torch(x))[0])
    sort = sort_of(wrapped, names[0])
    want = fusion.evaluate(fused_as_entry(wrapped, names[0]), x)[0]
    np.testing.assert_array_equal(bits(got), bits(want.astype(got.dtype)))
    if not descending:  # JAX reverses an ascending sort for descending=True
        np.testing.assert_array_equal(bits(to_numpy(to_torch(fusion.evaluate(module, x)[0]))), bits(got))
    assert sort.opcode == "sort"


def test_argsort_is_stable_multi_operand_along_dim0():
    module, wrapped, names = jax_sort_module(lambda x: jnp.argsort(x, axis=0), ((19, 4), jnp.float32))
    x = keys_with_nans_and_duplicates((19, 4), "f32", seed=3)
    fused = [n for n in names if is_sort_fusion(wrapped, n)]
    assert len(fused) == 1
    parent, sort_fusion = next((c, i) for c, i in wrapped.fusions() if i.name == fused[0])
    operands = [parent.instruction(o) for o in sort_fusion.operands]
    # The iota operand is computed outside the wrapped sort in JAX's HLO: feed its value.
    iota = np.broadcast_to(np.arange(19, dtype=np.int32)[:, None], (19, 4)).copy()
    inputs = [x if op.opcode == "parameter" else iota for op in operands]
    got = compile_sort_fusion(wrapped, fused[0])(*[to_torch(a) for a in inputs])
    want_indices = fusion.evaluate(module, x)[0]
    np.testing.assert_array_equal(got[1].numpy(), want_indices)
    np.testing.assert_array_equal(got[1].numpy(), np.argsort(x, axis=0, kind="stable"))


SORT_TEXT = """HloModule m
cmp {{
  a = {t}[] parameter(0)
  b = {t}[] parameter(1)
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  ROOT c = pred[] compare(a, b), direction={direction}{extra}
}}
f {{
  p = {t}[6,{n}] parameter(0)
  io = s32[6,{n}] iota(), iota_dimension=1
  ROOT s = ({t}[6,{n}], s32[6,{n}]) sort(p, io), dimensions=1, is_stable=true, to_apply=cmp
}}
ENTRY e {{
  x = {t}[6,{n}] parameter(0)
  ROOT r = ({t}[6,{n}], s32[6,{n}]) fusion(x), kind=kLoop, calls=f
}}
"""


@pytest.mark.parametrize("t,direction,extra", [("f32", "GT", ", type=TOTALORDER"),
                                               ("f32", "LT", ", type=TOTALORDER"),
                                               ("f16", "LT", ""), ("s32", "GT", "")])
def test_hand_written_comparators_with_iota_in_the_fusion(t, direction, extra):
    n = 21
    module = fusion.parse_hlo(SORT_TEXT.format(t=t, n=n, direction=direction, extra=extra)
                              .replace("dimensions=1", "dimensions={1}"))
    x = keys_with_nans_and_duplicates((6, n), "s32" if t == "s32" else "f32", seed=7).astype(NUMPY[t])
    if t == "f16":
        x = np.where(np.isnan(x), np.float16(2), x)  # a plain compare orders no NaN
    got = compile_sort_fusion(module, "r")(to_torch(x))
    want = fusion.evaluate(module, x)
    np.testing.assert_array_equal(bits(got[0].numpy()), bits(want[0]))
    np.testing.assert_array_equal(got[1].numpy(), want[1])


def test_comparator_recognition_and_clear_errors():
    module = fusion.parse_hlo(SORT_TEXT.format(t="f32", n=8, direction="LT", extra=", type=TOTALORDER")
                              .replace("dimensions=1", "dimensions={1}"))
    assert comparator_order(module, sort_of(module, "r")) == SortOrder(False, "total")
    tie_break = SORT_TEXT.replace("ROOT c = pred[] compare(a, b), direction={direction}{extra}",
                                  "c0 = pred[] compare(a, b), direction=LT\n"
                                  "  c1 = pred[] compare(i, j), direction=GT\n"
                                  "  ROOT c = pred[] or(c0, c1)")
    # Not an order of the key alone: the comparator network sorts it (test_sort_network),
    # past one tile through scratch (test_sort_long_rows); torch.sort takes only orders.
    long_tie = fusion.parse_hlo(tie_break.format(t="s32", n=MAX_SORT_LENGTH + 1)
                                .replace("dimensions=1", "dimensions={1}"))
    assert sort_method(long_tie, long_tie.entry.instruction("r"), sort_of(long_tie, "r")) is None
    long = fusion.parse_hlo(SORT_TEXT.format(t="s32", n=MAX_SORT_LENGTH + 1, direction="LT", extra="")
                            .replace("dimensions=1", "dimensions={1}"))
    with pytest.raises(UnsupportedOpError, match="sort tile 8192 must be a power of two from 2 "
                                                 "to 4096"):
        compile_sort_fusion(long, "r", tile_sizes=(8192,))
    scalar_dot = SORT_TEXT.replace("ROOT c = pred[] compare(a, b), direction={direction}{extra}",
                                   "d = s32[] dot(a, b)\n  z = s32[] constant(0)\n"
                                   "  ROOT c = pred[] compare(d, z), direction=LT")
    with pytest.raises(UnsupportedOpError, match="op dot in .* is not supported"):
        compile_sort_fusion(fusion.parse_hlo(scalar_dot.format(t="s32", n=8)
                                             .replace("dimensions=1", "dimensions={1}")), "r")


#: XLA:CPU's optimized form of a bf16 sort (``jnp.sort`` of bf16): f32 keys whose comparator
#: rounds them to bf16 (zeros and NaNs canonical) and compares the bf16 bits in total order.
XLA_BF16_SORT = """HloModule m
cmp {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  zero16 = s16[] constant(0)
  mask = s16[] constant(32767)
  qnan = f32[] constant(nan)
  zero = f32[] constant(0)
  na = pred[] compare(a, a), direction=NE
  nb = pred[] compare(b, b), direction=NE
  za = pred[] compare(a, zero), direction=EQ
  zb = pred[] compare(b, zero), direction=EQ
  sa = f32[] select(za, zero, a)
  sb = f32[] select(zb, zero, b)
  ha = bf16[] convert(sa)
  hb = bf16[] convert(sb)
  wa = f32[] convert(ha)
  wb = f32[] convert(hb)
  qa = f32[] select(na, qnan, wa)
  qb = f32[] select(nb, qnan, wb)
  ra = bf16[] convert(qa)
  rb = bf16[] convert(qb)
  ia = s16[] bitcast-convert(ra)
  ib = s16[] bitcast-convert(rb)
  xa = s16[] xor(mask, ia)
  xb = s16[] xor(mask, ib)
  la = pred[] compare(ia, zero16), direction=LT
  lb = pred[] compare(ib, zero16), direction=LT
  ka = s16[] select(la, xa, ia)
  kb = s16[] select(lb, xb, ib)
  ROOT lt = pred[] compare(ka, kb), direction=LT
}
ENTRY e {
  x = f32[6,40] parameter(0)
  ROOT s = f32[6,40] sort(x), dimensions={1}, is_stable=true, to_apply=cmp
}
"""


def test_xlas_bf16_sort_of_f32_keys_orders_them_by_their_bf16_roundings():
    """Keys that differ in f32 but round to one bf16 value tie and keep their order, as XLA's
    stable sort with this comparator keeps them."""
    from tests.conformance.xla_oracle import run_xla
    from triton_backend import compile_hlo

    module = fusion.parse_hlo(XLA_BF16_SORT)
    (sort,) = [i for i in module.entry if i.opcode == "sort"]
    assert comparator_order(module, sort) == SortOrder(False, "canonical", key_rounding="bf16")
    rng = np.random.default_rng(3)
    coarse = rng.integers(-8, 8, (6, 40)).astype(np.float32)
    x = coarse + rng.uniform(0, 1e-3, (6, 40)).astype(np.float32)  # ties after rounding
    x[0, :4] = [np.nan, -0.0, 0.0, np.inf]
    want = run_xla(XLA_BF16_SORT, x)[0]
    got = compile_hlo(XLA_BF16_SORT)(to_torch(x))[0].numpy()
    np.testing.assert_array_equal(bits(got), bits(np.asarray(want)))


@pytest.mark.parametrize("t,direction,extra", [("f32", "GT", ", type=TOTALORDER"),
                                               ("f32", "LT", ""), ("bf16", "GT", ""),
                                               ("f16", "LT", ", type=TOTALORDER"),
                                               ("s32", "GT", "")])
def test_rows_longer_than_a_tile_sort_as_one_library_call(t, direction, extra):
    """Past ``MAX_SORT_LENGTH`` a row is one stable ``torch.sort`` (``LibrarySort``): values
    (NaN payloads and signed zeros included) and indices bit for bit as the evaluator's."""
    n = MAX_SORT_LENGTH + 100
    module = fusion.parse_hlo(SORT_TEXT.format(t=t, n=n, direction=direction, extra=extra)
                              .replace("dimensions=1", "dimensions={1}"))
    x = keys_with_nans_and_duplicates((6, n), "s32" if t == "s32" else "f32", seed=11)
    x = x.astype(NUMPY[t])
    if not extra and t != "s32":
        x = np.where(np.isnan(x), NUMPY[t](2), x)  # a plain compare orders no NaN
    compiled = compile_sort_fusion(module, "r")
    assert isinstance(compiled, LibrarySort) and compiled.kernel_path is None
    got = compiled(to_torch(x))
    want = fusion.evaluate(module, x)
    np.testing.assert_array_equal(bits(to_numpy(got[0])), bits(want[0]))
    np.testing.assert_array_equal(got[1].numpy(), want[1])


@pytest.mark.parametrize("descending", [False, True])
def test_a_long_jax_sort_and_argsort_compile_and_match_the_evaluator(descending):
    """``jnp.sort``/``jnp.argsort`` of bf16 rows longer than a tile (top-p sampling sorts a
    vocabulary) through ``compile_hlo``: the library sort with JAX's NaN order."""
    from triton_backend import compile_hlo

    fn = lambda x: (jnp.sort(x, axis=-1, descending=descending),  # noqa: E731
                    jnp.argsort(x, axis=-1, descending=descending))
    text = jax.jit(fn).lower(jnp.zeros((1, 4500), jnp.bfloat16)).as_text(dialect="hlo")
    x = keys_with_nans_and_duplicates((1, 4500), "bf16", seed=5)
    compiled = compile_hlo(text)
    assert any(isinstance(f, LibrarySort) for f in compiled.fusions.values())
    got = [to_numpy(t) for t in compiled(to_torch(x))]
    want = fusion.evaluate(fusion.parse_hlo(text), x)
    np.testing.assert_array_equal(bits(got[0]), bits(want[0]))
    np.testing.assert_array_equal(got[1], want[1])
