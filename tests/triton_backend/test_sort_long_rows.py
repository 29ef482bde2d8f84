"""Sorts by any comparator on rows longer than one tile (``long_network_kernel``): the bitonic
network over the whole row, tile by tile through scratch memory.  Truths: the reference
evaluator and XLA itself (JAX on CPU), bit for bit; rows past 4096 elements by a comparator
that is no plain order of one key were refused before.  Small tiles (``tile_sizes``) run the
same kernel as the default tile of a long row, in a fraction of the interpreter's time."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

import fusion
from fusion.errors import UnsupportedOpError
from tests.triton_backend.target_compiles import compile_on_targets
from tests.triton_backend.test_sort_network import COMPARATOR, _bits, _keys, f64_tie_break_sort
from triton_backend import compile_hlo
from triton_backend.driver.single_op_fusion import wrap_lone_ops
from triton_backend.host.input_validation import tensor_from_numpy, tensor_to_numpy
from triton_backend.reports.ptx_report import find_ptxas
from triton_backend.templates.sort.driver import (LONG_SORT_TILE, MAX_SORT_LENGTH,
                                                  compile_sort_fusion, sort_method, sort_of)
from triton_backend.templates.sort.library_call import LibrarySort
from triton_backend.templates.sort.long_network_kernel import long_sort_passes


def _sort_fusion(module):
    """``module`` with its ENTRY sort wrapped in a fusion, and that fusion."""
    (sort,) = [i.name for i in module.entry if i.opcode == "sort"]
    wrapped = wrap_lone_ops(module, {module.entry.name: (sort,)})
    (instr,) = [i for _, i in wrapped.fusions()]
    return wrapped, instr


MAGNITUDE = "ma = s32[] abs(a)\n  mb = s32[] abs(b)\n  ROOT c = pred[] compare(ma, mb), direction=LT"
DESCENDING_TIE_BREAK = (
    "c0 = pred[] compare(a, b), direction=GT\n  e = pred[] compare(a, b), direction=EQ\n"
    "  c1 = pred[] compare(i, j), direction=GT\n  t = pred[] and(e, c1)\n  ROOT c = pred[] or(c0, t)")


@pytest.mark.parametrize("n,tile,body", [(37, 8, MAGNITUDE), (100, 16, DESCENDING_TIE_BREAK),
                                         (64, 16, DESCENDING_TIE_BREAK)],
                         ids=["37_in_8_magnitude", "100_in_16_tie_break", "64_in_16_tie_break"])
def test_rows_longer_than_the_tile_match_the_evaluator(n, tile, body):
    """Padded rows (37 of 64, 100 of 128) and a full one; two or three stages past the tile,
    so far compares of every distance from the tile to half the row.  (The interpreter runs
    the kernel's loops one iteration a chunk of the row: few rows, few chunks.)"""
    module = fusion.parse_hlo(COMPARATOR.replace("@BODY", body).replace("@N", str(n))
                              .replace("[4,", "[2,"))
    wrapped, instr = _sort_fusion(module)
    sort = compile_sort_fusion(wrapped, instr, tile_sizes=(tile,))
    assert "through scratch" in sort.source and sort.tile_sizes == (tile,)
    x = np.random.default_rng(n).integers(-5, 6, (2, n)).astype(np.int32)
    iota = torch.arange(n, dtype=torch.int32).expand(2, n).contiguous()  # (the ENTRY's own)
    for got, want in zip(sort(torch.from_numpy(x), iota), fusion.evaluate(module, x)):
        np.testing.assert_array_equal(got.numpy(), want)


def test_two_keys_and_a_payload_along_dim_0_match_xla():
    """``lax.sort`` with ``num_keys=2`` (an s32 key, ties by an f32 key in JAX's NaN order, a
    bf16 payload) along dim 0 of [45, 3], in tiles of 16."""
    rng = np.random.default_rng(3)
    a, b = _keys(rng, (45, 3), np.int32), _keys(rng, (45, 3), np.float32)
    c = rng.standard_normal((45, 3)).astype(jnp.bfloat16)
    fn = lambda a, b, c: jax.lax.sort((a, b, c), dimension=0, num_keys=2)  # noqa: E731
    wrapped, instr = _sort_fusion(fusion.parse_hlo(jax.jit(fn).lower(a, b, c).as_text(dialect="hlo")))
    sort = compile_sort_fusion(wrapped, instr, tile_sizes=(16,))
    got = sort(*(tensor_from_numpy(x, t) for x, t in ((a, "s32"), (b, "f32"), (c, "bf16"))))
    for g, w in zip(got, jax.jit(fn)(a, b, c)):
        np.testing.assert_array_equal(_bits(tensor_to_numpy(g)), _bits(np.asarray(w)))


def test_a_long_lexsort_compiles_to_the_network_in_default_tiles():
    """``jnp.lexsort`` of rows of 4100: before, refused (torch.sort takes one key); now the
    network in tiles of ``LONG_SORT_TILE``, and the plain argsort beside it stays one
    ``torch.sort``.  (Its result is the small-tile tests' kernel; running 8192 padded lanes in
    the interpreter takes seconds.)"""
    rng = np.random.default_rng(4)
    a, b = _keys(rng, (2, 4100), np.int32), _keys(rng, (2, 4100), np.int32)
    text = jax.jit(lambda a, b: (jnp.lexsort((b, a)), jnp.argsort(a, stable=True))).lower(
        a, b).as_text(dialect="hlo")
    compiled = compile_hlo(text, cache=False)
    kinds = sorted(type(f).__name__ for f in compiled.fusions.values() if f.kind.value == "sort")
    assert kinds == ["CompiledFusion", "LibrarySort"]
    (network,) = [f for f in compiled.fusions.values()
                  if f.kind.value == "sort" and not isinstance(f, LibrarySort)]
    assert network.tile_sizes == (LONG_SORT_TILE,) and network.grid == (2,)
    assert f"in tiles of {LONG_SORT_TILE} through scratch ({long_sort_passes(4100, LONG_SORT_TILE)} passes)" \
        in network.source


def test_the_method_past_one_tile_is_the_network_unless_the_comparator_cannot_be_asked():
    n = MAX_SORT_LENGTH + 1

    def method(body):
        module = fusion.parse_hlo(COMPARATOR.replace("@BODY", body).replace("@N", str(n)))
        wrapped, instr = _sort_fusion(module)
        return sort_method(wrapped, instr, sort_of(wrapped, instr))

    plain = method("ROOT c = pred[] compare(a, b), direction=GT")
    assert plain is not None and plain.descending  # one torch.sort
    assert method(DESCENDING_TIE_BREAK) is None
    with pytest.raises(UnsupportedOpError, match="comparator cmp: .*dot"):
        method("d = s32[] dot(a, b)\n  z = s32[] constant(0)\n"
               "  ROOT c = pred[] compare(d, z), direction=LT")


@pytest.mark.skipif(find_ptxas(90) is None, reason="ptxas not found in the Triton wheel")
def test_the_long_network_compiles_for_sm90_without_spills():
    """Its loops over the row, the barriers between passes and the last stage's gather
    compile for sm_90 in the default tile (``bench/programs/coverage/long_lexsort.hlo``
    checks it on a lent GPU)."""
    wrapped, instr = _sort_fusion(fusion.parse_hlo(f64_tie_break_sort(8, 5000)))
    sort = compile_sort_fusion(wrapped, instr, target="sm_90")
    assert sort.tile_sizes == (LONG_SORT_TILE,)
    (report,) = compile_on_targets([[sort.kernel_path, 90]])
    assert report["registers"] > 0 and report["spills"] == 0, report
    assert "bar.sync" in report["ptx"]
