"""8-bit float cumulative sums (scans) combine in XLA:CPU's order: the tree its
``ReduceWindowRewriter`` makes of scans longer than 16 (``fusion.analysis.xla_reduction_order``).

XLA (jax.jit), the reference evaluator on the lowered HLO text and ``compile_hlo``'s kernels
under the interpreter agree bit for bit: forward and reverse, inclusive and exclusive, along
either dim, one tree level (n <= 256) and two (n = 600: 38 column totals, themselves a tree).
"""
from __future__ import annotations

import functools

import ml_dtypes
import numpy as np
import pytest

from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo
from fusion.transforms.scan_tree import rewrite_tree_scans

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

from tests.conformance.xla_oracle import run_xla  # noqa: E402
from tests.fusion.test_scan_tree import _scan_text  # noqa: E402
from tests.triton_backend.test_fp8_reductions import _same_bits  # noqa: E402
from tests.triton_backend.xla_three_way import compare_three_ways, run_compiled  # noqa: E402
from triton_backend import compile_hlo  # noqa: E402

F8 = {"f8e4m3fn": ml_dtypes.float8_e4m3fn, "f8e5m2": ml_dtypes.float8_e5m2}


def _input(t: str, n: int, axis: int) -> np.ndarray:
    """A 2-D fp8 array long ``n`` along ``axis``."""
    shape = (n, 3) if axis == 0 else (3, n)
    return (np.random.default_rng(n).standard_normal(shape) * 3).astype(F8[t])


def _cumsum(t: str, n: int, axis: int, reverse: bool):
    """A jitted ``lax.cumsum`` of a 2-D fp8 array long ``n`` along ``axis``, its HLO text and
    an input."""
    x = _input(t, n, axis)
    f = jax.jit(lambda v: jax.lax.cumsum(v, axis=axis, reverse=reverse))
    return f, f.lower(x).as_text(dialect="hlo"), x


def _sequential(x: np.ndarray, axis: int) -> np.ndarray:
    """Every prefix folded one element at a time: the order XLA does not use past 16."""
    acc, out = np.zeros(np.delete(x.shape, axis), x.dtype), []
    for row in np.moveaxis(x, axis, 0):
        acc = (acc.astype(np.float32) + row.astype(np.float32)).astype(x.dtype)
        out.append(acc)
    return np.stack(out, axis=axis)


#: Every scan the evaluator is checked on, (n, axis, reverse): one tree level (17, 40) and two
#: (300, 600), along either dim, forward and reverse.
FORMS = [(n, axis, reverse) for n in (17, 40, 300, 600) for axis in (0, 1)
         for reverse in (False, True)]


@functools.lru_cache(maxsize=None)
def _xla_scans(t: str):
    """Every ``FORMS`` scan (``lax.cumsum``, a reduce-window each) of ``_input``'s arrays in one
    jitted function, which XLA compiles once, not once a scan: its HLO text, the inputs (one
    per length and dim, ``inputs[(n, axis)]``) and XLA's results (``wants[form]``).  The
    evaluator and the kernels are checked against the same results."""
    inputs = {(n, axis): _input(t, n, axis) for n, axis, _ in FORMS}
    keys = list(inputs)

    def scans(*xs):
        return tuple(jax.lax.cumsum(xs[keys.index((n, axis))], axis=axis, reverse=reverse)
                     for n, axis, reverse in FORMS)

    f = jax.jit(scans)
    xs = list(inputs.values())
    lowered = f.lower(*xs)
    wants = [np.asarray(w) for w in lowered.compile()(*xs)]
    assert len(wants) == len(FORMS)
    return lowered.as_text(dialect="hlo"), inputs, dict(zip(FORMS, wants))


@pytest.mark.parametrize("t", ["f8e4m3fn", "f8e5m2"])
def test_evaluator_scan_matches_xla(t):
    text, inputs, wants = _xla_scans(t)
    assert text.count("reduce-window(") == len(FORMS)
    gots = evaluate(parse_hlo(text), *inputs.values())
    assert len(gots) == len(FORMS)
    for (n, axis, reverse), got in zip(FORMS, gots):
        want = wants[(n, axis, reverse)]
        assert want.shape == inputs[(n, axis)].shape
        assert _same_bits(got, want), (n, axis, reverse)


@pytest.mark.parametrize("t", ["f8e4m3fn", "f8e5m2"])
def test_a_long_scan_is_not_a_sequential_fold(t):
    # Past 16 elements the order differs from one fold, so the bits above test the tree.
    _, inputs, wants = _xla_scans(t)
    assert not _same_bits(_sequential(inputs[(300, 1)], 1), wants[(300, 1, False)])
    f, _, x = _cumsum(t, 16, 0, False)
    assert _same_bits(_sequential(x, 0), np.asarray(f(x)))


@pytest.mark.parametrize("t, n, axis, reverse, fuse", [
    ("f8e4m3fn", 40, 1, False, True),
    ("f8e5m2", 300, 0, True, True),
    ("f8e4m3fn", 600, 1, True, True),    # two tree levels
    ("f8e5m2", 600, 0, False, False),    # unfused: every op its own kernel
    ("f8e4m3fn", 17, 0, True, False),
])
def test_kernel_scan_matches_xla(t, n, axis, reverse, fuse):
    # The one scan's program, compared with XLA's result for it on the same input.
    _, inputs, wants = _xla_scans(t)
    x = inputs[(n, axis)]
    f = jax.jit(lambda v: jax.lax.cumsum(v, axis=axis, reverse=reverse))
    text = f.lower(x).as_text(dialect="hlo")
    assert text.count("reduce-window(") == 1
    (got,) = run_compiled(text, x, compiled=compile_hlo(text, fuse=fuse))
    assert _same_bits(got, wants[(n, axis, reverse)])


def _exclusive_text(t: str, n: int, reverse: bool) -> str:
    """An exclusive scan (JAX's cumsum is inclusive): the window padded by ``n``."""
    pad = f"0_{n}" if reverse else f"{n}_0"
    return (f"HloModule m\nadd {{\n  a = {t}[] parameter(0)\n  b = {t}[] parameter(1)\n"
            f"  ROOT s = {t}[] add(a, b)\n}}\nENTRY e {{\n  x = {t}[3,{n}] parameter(0)\n"
            f"  z = {t}[] constant(0)\n  ROOT r = {t}[3,{n + 1}] reduce-window(x, z), "
            f"window={{size=1x{n} pad=0_0x{pad}}}, to_apply=add\n}}\n")


@pytest.mark.parametrize("t, n, reverse", [("f8e4m3fn", 40, False), ("f8e5m2", 300, True),
                                           ("f8e4m3fn", 600, False)])
def test_exclusive_scan_matches_xla(t, n, reverse):
    text = _exclusive_text(t, n, reverse)
    x = (np.random.default_rng(n).standard_normal((3, n)) * 3).astype(F8[t])
    (want,) = run_xla(text, x)
    (evaluated,) = evaluate(parse_hlo(text), x)
    (got,) = run_compiled(text, x)
    assert want.shape == (3, n + 1)
    assert _same_bits(evaluated, want) and _same_bits(got, want)


@pytest.mark.parametrize("dtype, rtol, atol", [(jnp.bfloat16, 2e-2, 0.5), (jnp.float32, 1e-5, 1e-4)])
def test_wider_cumsum_is_unchanged(dtype, rtol, atol):
    # Only fp8 scans take the tree: a bf16 or f32 scan keeps its one reduce-window, and its
    # own order (bf16: a pairwise tree, f32 accumulation in kernels; XLA rounds its tree of
    # 16-wide scans per add, some 0.1 to 0.4 away on sums of about 10 here).
    x = np.random.default_rng(5).standard_normal((3, 300)).astype(dtype)
    text = jax.jit(lambda v: jnp.cumsum(v, axis=1)).lower(x).as_text(dialect="hlo")
    module = parse_hlo(text)
    assert rewrite_tree_scans(module) is module
    compare_three_ways(text, x, rtol=rtol, atol=atol)


@pytest.mark.parametrize("dims, out, window", [
    ((2, 300), (2, 301), "{size=1x300 pad=0_0x0_300}"),   # exclusive reverse
    ((50, 2), (50, 2), "{size=50x1 pad=49_0x0_0}"),
])
def test_non_associative_reducer_scans_as_xla(dims, out, window):
    # A reducer whose every combine order and operand order gives other bits (in f32, with a
    # constant): the kernels' inlined reducer combines column scan first, prefix second.
    text = _scan_text("f8e4m3fn", dims, out, window, "mean")
    x = (np.random.default_rng(7).standard_normal(dims) * 3).astype(F8["f8e4m3fn"])
    (want,) = run_xla(text, x)
    (evaluated,) = evaluate(parse_hlo(text), x)
    (got,) = run_compiled(text, x)
    assert _same_bits(evaluated, want) and _same_bits(got, want)
