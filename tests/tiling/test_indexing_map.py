"""IndexingMap construction, composition (seed fusion examples), transforms and speed."""

import pytest

from fusion.ir.hlo_module import HloInstruction
from fusion.ir.shape import ArrayShape
from tiling.maps.affine_expr import d, s
from tiling.maps.indexing_map import (
    AffineMap,
    IndexingMap,
    RTVar,
    compose,
    compose_indexing_maps,
    enumerate_points,
)


def _transpose(out_sizes, dims):
    """Output -> input map of transpose(dimensions=dims): input dim dims[i] = output dim i."""
    inv = [0] * len(dims)
    for i, p in enumerate(dims):
        inv[p] = i
    return IndexingMap.from_sizes(tuple(d(inv[j]) for j in range(len(dims))), out_sizes)


def test_seed_transpose_and_reduce_maps_print_as_the_seed():
    t = _transpose((3, 6, 128, 12288), (0, 2, 3, 1))
    assert str(t) == ("(d0, d1, d2, d3) -> (d0, d3, d1, d2), domain: d0 in [0, 2], d1 in [0, 5],"
                      " d2 in [0, 127], d3 in [0, 12287]")
    init = IndexingMap.create((), [(0, 9)])
    assert init.to_string(True) == "(d0) -> ()\ndomain:\nd0 in [0, 9]"


def test_transpose_chain_maps_deduplicate():
    # the seed's fusion: p0[20,10,50] read through two different transpose chains
    lhs = compose(_transpose((10, 20, 50), (1, 0, 2)), _transpose((10, 50, 20), (0, 2, 1)))
    rhs = compose(_transpose((50, 10, 20), (2, 1, 0)), _transpose((10, 50, 20), (1, 0, 2)))
    assert str(lhs.affine_map) == "(d0, d1, d2) -> (d2, d0, d1)"
    assert lhs == rhs and len({lhs, rhs}) == 1
    p0_plus_transpose = {IndexingMap.identity((1000, 1000)), _transpose((1000, 1000), (1, 0))}
    assert len(p0_plus_transpose) == 2


def test_compose_order_and_xla_alias():
    broadcast = IndexingMap.from_sizes((d(1),), (10, 20, 30))     # bc output -> p0
    reverse = IndexingMap.from_sizes((d(0), -d(1) + 19, d(2)), (10, 20, 30))
    fused = compose(broadcast, reverse)                            # reverse(broadcast(p0))
    assert str(fused.affine_map) == "(d0, d1, d2) -> (-d1 + 19)"
    assert compose_indexing_maps(reverse, broadcast) == fused
    for p in enumerate_points(IndexingMap.from_sizes((), (3, 4, 2))):
        assert fused.evaluate(*p) == broadcast.evaluate(reverse.evaluate(*p))


def test_compose_symbols_order_and_codomain_constraint():
    # slice(pad): the pad's output -> input has a stride constraint, the slice restricts dims
    pad = IndexingMap.create(((d(0) - 1) // 2, d(1) - 4), [(1, 7), (4, 7)],
                             constraints={(d(0) - 1) % 2: (0, 0)})
    slice_ = IndexingMap.from_sizes((d(0) + 3, d(1) + 4), (4, 3))
    fused = compose(pad, slice_)
    assert str(fused) == ("(d0, d1) -> (d0 floordiv 2 + 1, d1), domain: d0 in [0, 3], "
                          "d1 in [0, 2], d0 mod 2 in [0, 0]")
    reduce = IndexingMap.from_sizes((s(0), d(0)), (10,), (256,))
    rt = RTVar((0, 5), "off = s32[] parameter(1)", AffineMap(1, 0, ()))
    ds = IndexingMap.create((d(0) + s(0), s(1)), [(0, 255), (0, 9)], [(0, 3)], [rt])
    fused = compose(ds, reduce)  # symbols: range(ds), range(reduce), rt(ds)
    assert str(fused) == ("(d0)[s0, s1]{rt0} -> (s0 + s1, rt0), domain: d0 in [0, 9], "
                          "s0 in [0, 3], s1 in [0, 255], rt0 in [0, 5]")
    clipped = compose(ds, IndexingMap.from_sizes((d(0) * 2, d(0)), (200,)))
    assert str(clipped) == ("(d0)[s0]{rt0} -> (d0 * 2 + s0, rt0), domain: d0 in [0, 9], "
                            "s0 in [0, 3], rt0 in [0, 5]")
    assert str(fused.rt_vars[0].map) == "(d0) -> ()"


def test_compose_arity_mismatch_is_an_error():
    with pytest.raises(ValueError, match="2 results"):
        compose(IndexingMap.identity((3,)), IndexingMap.identity((3, 4)))


def test_undefined_and_known_empty_propagate():
    u = IndexingMap.undefined()
    assert u.is_undefined and compose(u, IndexingMap.identity((2,))).is_undefined
    empty = IndexingMap.create((d(0),), [(0, 3)], constraints={d(0): (5, 6)}).simplify()
    assert empty.is_known_empty
    assert compose(IndexingMap.identity((4,)), empty).is_known_empty


def test_rt_var_with_hlo_instruction():
    of1 = HloInstruction("of1", "parameter", ArrayShape("s32", ()), (),
                         (("parameter_number", 1),))
    m = IndexingMap.create((d(0) + s(0),), [(0, 0)], rt_vars=[RTVar((0, 1), of1, AffineMap(1, 0, ()))])
    assert m.to_string(True).splitlines()[-2:] == ["  hlo: of1 = s32[] parameter(1)", "  (d0) -> ()"]


def test_remove_unused_symbols_and_dims():
    m = IndexingMap.create((d(0) + s(2),), [(0, 3), (0, 5)], [(0, 1), (0, 2), (0, 4)],
                           constraints={s(1) + s(2): (0, 5), s(0) % 2: (0, 0)})
    out = m.remove_unused_symbols()
    assert str(out) == ("(d0, d1)[s0, s1] -> (d0 + s1), domain: d0 in [0, 3], d1 in [0, 5], "
                        "s0 in [0, 2], s1 in [0, 4], s0 + s1 in [0, 5]")
    no_dims, removed = out.remove_unused_dims()
    assert removed == (1,) and str(no_dims.affine_map) == "(d0)[s0, s1] -> (d0 + s1)"


def test_validation_errors():
    with pytest.raises(ValueError, match="uses a variable"):
        IndexingMap.create((d(2),), [(0, 3)])
    with pytest.raises(ValueError, match="dim bounds"):
        IndexingMap(AffineMap(2, 0, (d(0),)), ((0, 1),))
    with pytest.raises(TypeError, match="not affine"):
        d(0) * d(1)


def test_contains_and_enumerate_honor_constraints():
    m = IndexingMap.create((d(0),), [(0, 9)], constraints={d(0) % 3: (0, 0)})
    assert [p[0][0] for p in enumerate_points(m)] == [0, 3, 6, 9]
    assert m.contains((6,)) and not m.contains((7,)) and not m.contains((12,))


def test_chain_of_1000_maps_composes_to_the_identity():
    shape = (4, 6, 10)
    to_flat = IndexingMap.from_sizes((d(0) * 60 + d(1) * 10 + d(2),), shape)     # [240] <- ...
    from_flat = IndexingMap.from_sizes((d(0) // 60, (d(0) // 10) % 6, d(0) % 10), (240,))
    t1 = _transpose((4, 6, 10), (1, 0, 2))      # X[4,6,10] = transpose(Y[6,4,10])
    t2 = _transpose((6, 4, 10), (1, 0, 2))      # Y = transpose(Z[4,6,10])
    chain = [from_flat, t1, t2, to_flat] * 250
    acc = IndexingMap.identity((240,))
    for op in chain:            # walking from the fusion root towards the parameter
        acc = compose(op, acc)
    assert str(acc) == "(d0) -> (d0), domain: d0 in [0, 239]"


def test_wide_sum_reshape_chain_cancels():
    # 1000 reshapes [2]*10 <-> [1024], never simplified in between except by compose
    dims = (2,) * 10
    lin = 0
    for i in range(10):
        lin = lin * 2 + d(i)
    flatten = IndexingMap.from_sizes((lin,), dims)
    unflatten = IndexingMap.from_sizes(tuple((d(0) // (2 ** (9 - i))) % 2 for i in range(10)),
                                       (1024,))
    acc = IndexingMap.identity(dims)
    for _ in range(500):
        acc = compose(unflatten, compose(flatten, acc))
    assert str(acc.affine_map) == str(IndexingMap.identity(dims).affine_map)
