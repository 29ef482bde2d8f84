"""Convolution in the front end: dim_labels and window text (parsed and printed back as XLA
prints them), the shape rule (XLA's InferConvolveShape, checked against the shapes XLA gives
and with located errors), and the reference evaluator against XLA (jax) for every
combination of rank, stride, padding, lhs and rhs dilation and grouping on small shapes."""
from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest

from fusion.ir.convolution import parse_dim_labels
from fusion.errors import HloVerifyError
from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo
from fusion.text.printer import print_hlo
from fusion.shapes.verifier import verify_module

jax = pytest.importorskip("jax")
lax = jax.lax

RNG = np.random.default_rng(3)


@pytest.mark.parametrize("labels", [
    "b01f_01io->b01f", "bf01_oi01->bf01", "b0f_0io->b0f", "bf012_oi012->bf012",
    "f01b_i01o->01bf", "b10f_o10i->f01b", "bf_io->bf", "0fb_io0->fb0",
])
def test_dim_labels_round_trip(labels):
    assert str(parse_dim_labels(labels)) == labels


@pytest.mark.parametrize("labels,why", [
    ("b01f_01io", "form"), ("b01_01io->b01f", "exactly once"), ("bb1f_01io->b01f", "exactly once"),
    ("b01f_01io->b0f", "different numbers"), ("b02f_01io->b01f", "exactly once"),
])
def test_bad_dim_labels_are_located_verify_errors(labels, why):
    text = ("HloModule m\nENTRY e {\n  x = f32[1,4,4,2] parameter(0)\n  w = f32[3,3,2,2] parameter(1)\n"
            f"  ROOT c = f32[1,2,2,2] convolution(x, w), window={{size=3x3}}, dim_labels={labels}\n}}\n")
    with pytest.raises(HloVerifyError, match=why) as err:
        verify_module(parse_hlo(text))
    assert err.value.line == 5


LINES = [
    "window={size=3x3 stride=2x2 pad=1_1x1_1}, dim_labels=b01f_01io->b01f",
    "window={size=3x3 pad=1_2x1_2 lhs_dilate=2x2}, dim_labels=b01f_01oi->b01f",
    "window={size=4x4 pad=1_0x-1_0 rhs_dilate=2x2 rhs_reversal=1x0}, dim_labels=f01b_i01o->01bf",
    "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, feature_group_count=4",
    "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, batch_group_count=2",
]


@pytest.mark.parametrize("attrs", LINES)
def test_convolution_text_round_trips(attrs):
    text = ("HloModule m\n\nENTRY e {\n  x = f32[4,8,8,8] parameter(0)\n  w = f32[3,3,2,8] parameter(1)\n"
            f"  ROOT c = f32[4,4,4,8] convolution(x, w), {attrs}\n}}\n")
    module = parse_hlo(text)
    assert print_hlo(module) == text
    assert parse_hlo(print_hlo(module)) == module


BAD = [
    ("f32[1,4,4,3]", "f32[3,3,2,4]", "f32[1,2,2,4]", "", "input feature dim must be 3"),
    ("f32[1,4,4,4]", "f32[3,3,2,5]", "f32[1,2,2,5]", ", feature_group_count=2", "multiple of"),
    ("f32[3,4,4,4]", "f32[3,3,4,4]", "f32[1,2,2,4]", ", batch_group_count=2", "batch dim"),
    ("f32[2,4,4,4]", "f32[3,3,2,4]", "f32[1,2,2,4]",
     ", feature_group_count=2, batch_group_count=2", "both"),
    ("f32[1,4,4,4]", "f32[2,3,4,4]", "f32[1,2,2,4]", "", "window size 3"),
    ("f32[1,4,4,4]", "f32[3,3,4,4]", "f32[1,3,2,4]", "", "shape"),
]


@pytest.mark.parametrize("lhs,rhs,out,extra,why", BAD)
def test_shape_rule_errors_are_located(lhs, rhs, out, extra, why):
    text = (f"HloModule m\nENTRY e {{\n  x = {lhs} parameter(0)\n  w = {rhs} parameter(1)\n"
            f"  ROOT c = {out} convolution(x, w), window={{size=3x3}}, "
            f"dim_labels=b01f_01io->b01f{extra}\n}}\n")
    with pytest.raises(HloVerifyError, match=why) as err:
        verify_module(parse_hlo(text))
    assert (err.value.line, err.value.where) == (5, "c")


def combinations():
    """Every combination of rank, stride, padding, dilations and grouping (small shapes)."""
    for rank, stride, pad, lhs_d, rhs_d, group in itertools.product(
            (1, 2, 3), (1, 2), ("VALID", "asym"), (1, 2), (1, 2), ("none", "feature", "batch")):
        yield pytest.param(rank, stride, pad, lhs_d, rhs_d, group,
                           id=f"{rank}d-s{stride}-{pad}-ld{lhs_d}-rd{rhs_d}-{group}")


def conv_case(rank, stride, pad, lhs_d, rhs_d, group, rng=RNG):
    """``(f, x, w)``: a jax convolution of the given form and its (small) arguments."""
    spatial = {1: (9,), 2: (6, 5), 3: (4, 3, 4)}[rank]
    window = {1: (3,), 2: (3, 2), 3: (2, 2, 1)}[rank]
    batch, feats, outs = 2, 4, 6
    fgc = 2 if group == "feature" else 1
    bgc = 2 if group == "batch" else 1
    lhs_spec = "N" + "DHW"[3 - rank:] + "C"
    rhs_spec = "DHW"[3 - rank:] + "IO"
    dn = (lhs_spec, rhs_spec, lhs_spec)
    padding = tuple((0, 0) if pad == "VALID" else (1, 0) if i % 2 else (2, -1 if lhs_d > 1 else 1)
                    for i in range(rank))
    x = rng.standard_normal((batch, *spatial, feats)).astype(np.float32)
    w = rng.standard_normal((*window, feats // fgc, outs)).astype(np.float32)

    def f(x, w):
        return lax.conv_general_dilated(x, w, (stride,) * rank, padding, (lhs_d,) * rank,
                                        (rhs_d,) * rank, dn, feature_group_count=fgc,
                                        batch_group_count=bgc)
    return f, x, w


@functools.cache
def xla_convolutions() -> dict:
    """``{combination: (f, x, w, XLA's result)}`` for every combination: the convolutions run
    by XLA in one jitted function (one compile, not one per combination)."""
    rng = np.random.default_rng(3)
    combos = [p.values for p in combinations()]
    cases = [conv_case(*combo, rng=rng) for combo in combos]
    results = jax.jit(lambda xs, ws: [f(x, w) for (f, _, _), x, w in zip(cases, xs, ws)])(
        [x for _, x, _ in cases], [w for _, _, w in cases])
    return {combo: (*case, np.asarray(want))
            for combo, case, want in zip(combos, cases, results)}


@pytest.mark.parametrize("rank,stride,pad,lhs_d,rhs_d,group", list(combinations()))
def test_evaluator_and_shape_rule_against_xla(rank, stride, pad, lhs_d, rhs_d, group):
    f, x, w, want = xla_convolutions()[rank, stride, pad, lhs_d, rhs_d, group]
    text = jax.jit(f).lower(x, w).as_text(dialect="hlo")
    module = parse_hlo(text)
    verify_module(module)  # the declared (XLA's) result shape agrees with our shape rule
    (got,) = evaluate(module, x, w)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_integer_convolution_wraps_like_xla():
    x = RNG.integers(-128, 127, (1, 6, 8)).astype(np.int8)
    w = RNG.integers(-128, 127, (3, 8, 4)).astype(np.int8)
    f = lambda x, w: lax.conv_general_dilated(x, w, (1,), "SAME", dimension_numbers=("NWC", "WIO", "NWC"))  # noqa: E731
    (got,) = evaluate(parse_hlo(jax.jit(f).lower(x, w).as_text(dialect="hlo")), x, w)
    np.testing.assert_array_equal(got, np.asarray(jax.jit(f)(x, w)))
