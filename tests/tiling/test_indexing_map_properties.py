"""Hypothesis laws: expressions evaluate like Python integer arithmetic; canonical forms of
equal sums are equal; simplification preserves every point; composition is pointwise
composition; print -> parse is the identity."""
import functools
import itertools

from hypothesis import given, settings, strategies as st

from tiling.maps.affine_expr import const, d, linear_combination, s
from tiling.maps.indexing_map import IndexingMap, RTVar, compose, enumerate_points

MAX_DIMS, MAX_SYMS = 3, 2
DIVISORS = st.sampled_from([-4, -3, -2, 2, 3, 4, 5, 8, 16])


def _leaf(num_dims, num_syms):
    options = [st.integers(-6, 6).map(lambda c: (c, lambda dv, sv, c=c: c))]
    if num_dims:
        options.append(st.integers(0, num_dims - 1).map(
            lambda i: (d(i), lambda dv, sv, i=i: dv[i])))
    if num_syms:
        options.append(st.integers(0, num_syms - 1).map(
            lambda j: (s(j), lambda dv, sv, j=j: sv[j])))
    return st.one_of(options)


def _combine(children):
    pair = st.tuples(children, children)

    def add(p):
        (a, fa), (b, fb) = p
        return a + b, lambda dv, sv: fa(dv, sv) + fb(dv, sv)

    def sub(p):
        (a, fa), (b, fb) = p
        return a - b, lambda dv, sv: fa(dv, sv) - fb(dv, sv)

    def mul(p):
        (a, fa), k = p
        return a * k, lambda dv, sv: fa(dv, sv) * k

    def div(p):
        (a, fa), k = p
        return a // k, lambda dv, sv: fa(dv, sv) // k

    def mod(p):
        (a, fa), k = p
        return a % k, lambda dv, sv: fa(dv, sv) % k

    return st.one_of(
        pair.map(add), pair.map(sub),
        st.tuples(children, st.integers(-4, 4)).map(mul),
        st.tuples(children, DIVISORS).map(div),
        st.tuples(children, DIVISORS).map(mod),
    )


# One strategy object per arity, built once: indexing_maps draws from it for every result
# and constraint, and a fresh recursive strategy is validated again on its first draw (a
# third of this file's time).  The examples drawn are the same.
@functools.cache
def exprs_with_reference(num_dims, num_syms):
    """(AffineExpr, the same computation as a Python function of (dims, syms))."""
    return st.recursive(_leaf(num_dims, num_syms), _combine, max_leaves=6)


def _as_expr(x):
    return x if not isinstance(x, int) else d(0) * 0 + x


@st.composite
def indexing_maps(draw, num_dims=None, with_rt=True):
    nd = draw(st.integers(0, MAX_DIMS)) if num_dims is None else num_dims
    nr = draw(st.integers(0, MAX_SYMS))
    nt = draw(st.integers(0, 1)) if with_rt else 0
    bound = st.tuples(st.integers(-3, 4), st.integers(0, 4)).map(lambda t: (t[0], t[0] + t[1]))
    dims = [draw(bound) for _ in range(nd)]
    ranges = [draw(bound) for _ in range(nr)]
    rts = [RTVar(draw(bound), f"rt{k} = s32[] parameter({k + 1})") for k in range(nt)]
    expr = exprs_with_reference(nd, nr + nt).map(lambda p: _as_expr(p[0]))
    results = draw(st.lists(expr, min_size=1, max_size=3))
    constraints = draw(st.lists(
        st.tuples(expr, st.tuples(st.integers(-8, 8), st.integers(0, 10))
                  .map(lambda t: (t[0], t[0] + t[1]))), max_size=2))
    return IndexingMap.create(results, dims, ranges, rts, constraints)


def _function(m):
    return {p: m.evaluate(*p) for p in enumerate_points(m)}


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_expression_evaluates_like_python_ints(data):
    nd, ns = 2, 1
    expr, ref = data.draw(exprs_with_reference(nd, ns))
    expr = _as_expr(expr)
    for dv in itertools.product(range(-3, 4), repeat=nd):
        for sv in itertools.product(range(-2, 3), repeat=ns):
            assert expr.evaluate(dv, sv) == ref(dv, sv)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([d(0), d(1), s(0), d(0) // 3, d(1) % 4, s(0) // 2]),
                          st.integers(-5, 5)), max_size=8),
       st.integers(-10, 10), st.randoms(use_true_random=False))
def test_equal_sums_are_equal_and_hash_equal(terms, constant, rnd):
    a = linear_combination(terms, constant)
    shuffled = list(terms)
    rnd.shuffle(shuffled)
    b = const(constant)
    for atom, coeff in shuffled:
        b = atom * coeff + b
    assert a == b and hash(a) == hash(b) and str(a) == str(b)
    assert (a + d(1) - d(1)) == a


@settings(max_examples=150, deadline=None)
@given(indexing_maps())
def test_simplification_preserves_every_point(m):
    simplified = m.simplify()
    assert simplified.num_dims == m.num_dims and simplified.num_symbols == m.num_symbols
    if simplified.is_known_empty:
        assert list(enumerate_points(m)) == []
    else:
        assert _function(simplified) == _function(m)
    assert str(simplified.simplify()) == str(simplified)  # idempotent


@settings(max_examples=100, deadline=None)
@given(indexing_maps())
def test_print_parse_round_trip(m):
    # the multi-line form carries everything; the one-line form (as XLA prints it) omits the
    # runtime variables' instructions and maps
    parsed = IndexingMap.parse(m.to_string(multiline=True))
    assert parsed.structural_key() == m.structural_key()
    assert parsed == m
    without_hlo = m.replace(rt_vars=[RTVar(v.feasible_values) for v in m.rt_vars])
    assert IndexingMap.parse(str(m)).structural_key() == without_hlo.structural_key()
    simplified = m.simplify()
    if simplified.is_known_empty:  # `KNOWN EMPTY` does not carry the arity
        assert IndexingMap.parse(str(simplified)).is_known_empty
    else:
        assert (IndexingMap.parse(simplified.to_string(True)).structural_key()
                == simplified.structural_key())


@settings(max_examples=100, deadline=None)
@given(st.data())
def test_composition_is_pointwise_composition(data):
    inner = data.draw(indexing_maps())
    outer = data.draw(indexing_maps(num_dims=inner.num_results))
    composed = compose(outer, inner, simplify=False)
    rf, tf = outer.num_range_vars, outer.num_rt_vars
    expected = {}
    for x, sg in enumerate_points(inner):
        y = inner.evaluate(x, sg)
        if not all(b.contains(v) for b, v in zip(outer.dim_bounds, y)):
            continue
        for _, sf in enumerate_points(outer.replace(dim_bounds=[(v, v) for v in y])):
            syms = sf[:rf] + sg[:inner.num_range_vars] + sf[rf:rf + tf] + sg[inner.num_range_vars:]
            expected[(x, syms)] = outer.evaluate(y, sf)
    assert _function(composed) == expected
    simplified = compose(outer, inner)
    if simplified.is_known_empty:
        assert expected == {}
    else:
        assert _function(simplified) == expected

