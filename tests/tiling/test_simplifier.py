"""The simplifier against the seed's rewrite examples, the chained-reshape example, and
targeted rules; every result is also checked point by point against the input map."""
import pytest

from tiling.maps.affine_expr import d, s
from tiling.maps.indexing_map import IndexingMap, compose, enumerate_points
from tiling.maps.parser import parse_affine_map


def _check_same_function(original: IndexingMap, simplified: IndexingMap) -> None:
    before = {p: original.evaluate(*p) for p in enumerate_points(original)}
    after = {p: simplified.evaluate(*p) for p in enumerate_points(simplified)}
    assert before == after


def _simplified(text, dim_bounds, range_bounds=(), constraints=()):
    am = parse_affine_map(text)
    m = IndexingMap.create(am.results, dim_bounds, range_bounds, constraints=constraints)
    out = m.simplify()
    _check_same_function(m, out)
    return out


@pytest.mark.parametrize(
    "text, bounds, expected",
    [
        ("(d0, d1) -> (d0 + d1 floordiv 16, d1 mod 16)", [(0, 6), (0, 14)],
         "(d0, d1) -> (d0, d1)"),
        ("(d0, d1, d2) -> ((100d0 + 10d1 + d2) floorDiv 100, "
         "((100d0 + 10d1 + d2) mod 100) floordiv 10, d2 mod 10)", [(0, 9)] * 3,
         "(d0, d1, d2) -> (d0, d1, d2)"),
        ("(d0, d1, d2) -> ((16d0 + 4d1 + d2) floordiv 8, (16d0 + 4d1 + d2) mod 8)",
         [(0, 9)] * 3,
         "(d0, d1, d2) -> (d0 * 2 + (d1 * 4 + d2) floordiv 8, (d1 * 4 + d2) mod 8)"),
        ("(d0, d1) -> (-((-11d0 - d1 + 109) floordiv 11) + 9)", [(0, 9), (0, 10)],
         "(d0, d1) -> (d0)"),
    ],
)
def test_seed_rewrites(text, bounds, expected):
    assert str(_simplified(text, bounds).affine_map) == expected


def _reshape_map(out_shape, in_shape):
    """Output -> input map of a reshape: linearize the output index, delinearize into input."""
    linear = 0
    for i, n in enumerate(out_shape):
        linear = linear * n + d(i)
    results = []
    stride = 1
    for n in reversed(in_shape):
        results.append((linear // stride) % n if stride * n < _prod(in_shape) else linear // stride)
        stride *= n
    return IndexingMap.from_sizes(tuple(reversed(results)), out_shape)


def _prod(xs):
    p = 1
    for x in xs:
        p *= x
    return p


def test_chained_reshapes_cancel():
    reshape1 = _reshape_map((50, 20), (10, 10, 10))   # reshape1 output -> p0
    reshape2 = _reshape_map((10, 10, 10), (50, 20))   # reshape2 output -> reshape1 output
    fused = compose(reshape1, reshape2)
    assert str(fused) == "(d0, d1, d2) -> (d0, d1, d2), domain: d0 in [0, 9], d1 in [0, 9], d2 in [0, 9]"
    back = compose(reshape2, reshape1)
    assert str(back.affine_map) == "(d0, d1) -> (d0, d1)"


@pytest.mark.parametrize(
    "text, bounds, expected",
    [
        ("(d0, d1) -> ((d0 * 16 + d1) floordiv 16)", [(0, 9), (0, 15)], "(d0)"),
        ("(d0, d1) -> ((d0 * 7 + d1) mod 7)", [(0, 9), (0, 30)], "(d1 mod 7)"),
        ("(d0) -> (d0 mod 8, d0 floordiv 8)", [(0, 7)], "(d0, 0)"),
        ("(d0) -> ((d0 + 16) mod 8)", [(0, 20)], "(d0 mod 8)"),
        ("(d0) -> ((d0 * 4 + 8) floordiv 8)", [(0, 20)], "(d0 floordiv 2 + 1)"),
        ("(d0, d1) -> ((d0 * 4 + d1) floordiv 8, (d0 * 4 + d1) mod 8)", [(0, 9), (0, 3)],
         "(d0 floordiv 2, d1 + (d0 mod 2) * 4)"),
        ("(d0) -> ((d0 floordiv 4) * 4 + d0 mod 4)", [(0, 99)], "(d0)"),
        ("(d0) -> (d0 - (d0 floordiv 4) * 4)", [(0, 99)], "(d0 mod 4)"),
        ("(d0) -> ((d0 floordiv 2) floordiv 3)", [(0, 99)], "(d0 floordiv 6)"),
        ("(d0) -> ((d0 mod 12) mod 4)", [(0, 99)], "(d0 mod 4)"),
        ("(d0) -> ((d0 - 3) floordiv 7)", [(3, 17)], "((d0 - 3) floordiv 7)"),
    ],
)
def test_range_based_rules(text, bounds, expected):
    assert str(_simplified(text, bounds).affine_map).split(" -> ")[1] == expected


def test_negative_operands_floor_semantics():
    out = _simplified("(d0) -> ((d0 - 10) floordiv 4, (d0 - 10) mod 4)", [(0, 9)])
    assert out.evaluate((1,)) == (-3, 3)


@pytest.mark.parametrize(
    "constraints, expected",
    [
        # constants move into the interval, then a single-variable constraint tightens bounds
        ({d(0) + 5: (5, 10)}, "(d0)[s0] -> (d0 + s0), domain: d0 in [0, 5], s0 in [1, 3]"),
        # the seed's always-true example is dropped
        ({d(0) + s(0): (0, 20)}, "(d0)[s0] -> (d0 + s0), domain: d0 in [0, 5], s0 in [1, 3]"),
        ({d(0) * 4: (1, 9)}, "(d0)[s0] -> (d0 + s0), domain: d0 in [1, 2], s0 in [1, 3]"),
        ({d(0) // 2: (1, 1)}, "(d0)[s0] -> (d0 + s0), domain: d0 in [2, 3], s0 in [1, 3]"),
        ({-s(0) + 10: (0, 8)}, "(d0)[s0] -> (d0 + s0), domain: d0 in [0, 5], s0 in [2, 3]"),
        ({d(0) + s(0): (0, 4)},
         "(d0)[s0] -> (d0 + s0), domain: d0 in [0, 5], s0 in [1, 3], d0 + s0 in [1, 4]"),
        ({d(0) * 2 + s(0) * 2 + 1: (3, 9)},
         "(d0)[s0] -> (d0 + s0), domain: d0 in [0, 5], s0 in [1, 3], d0 + s0 in [1, 4]"),
    ],
)
def test_constraint_simplification(constraints, expected):
    m = IndexingMap.create((d(0) + s(0),), [(0, 5)], [(1, 3)], constraints=constraints)
    out = m.simplify()
    assert str(out) == expected
    _check_same_function(m, out)


@pytest.mark.parametrize(
    "constraints",
    [
        {d(0) + s(0): (30, 40)},
        {d(0) % 2: (2, 3)},
        {d(0): (7, 9)},
        {d(0) * 4: (1, 3)},
    ],
)
def test_infeasible_constraints_make_the_map_known_empty(constraints):
    m = IndexingMap.create((d(0) + s(0),), [(0, 5)], [(1, 3)], constraints=constraints)
    out = m.simplify()
    assert out.is_known_empty and str(out) == "KNOWN EMPTY"
    assert list(enumerate_points(m)) == []


def test_empty_bound_is_known_empty():
    assert IndexingMap.create((d(0),), [(3, 2)]).simplify().is_known_empty


def test_simplify_runtime_var_map_and_bounds():
    from tiling.maps.indexing_map import AffineMap, RTVar

    rt = RTVar((0, 9), "off = s32[4] parameter(1)", AffineMap(1, 0, ((d(0) * 4 + 3) // 4,)))
    m = IndexingMap.create((d(0) + s(0),), [(0, 3)], rt_vars=[rt],
                           constraints={s(0): (2, 20)})
    out = m.simplify()
    assert out.rt_vars[0].feasible_values.lower == 2
    assert str(out.rt_vars[0].map) == "(d0) -> (d0)"
