"""AffineExpr: MLIR printing, canonical form, floor semantics, operator errors."""
import pytest

from tiling.maps.affine_expr import Constant, ceildiv, const, d, s
from tiling.maps.expr_variables import substitute, used_variables


@pytest.mark.parametrize(
    "expr, text",
    [
        (d(0) // 8, "d0 floordiv 8"),
        ((d(1) - 3) % 7, "(d1 - 3) mod 7"),
        (16 - d(1), "-d1 + 16"),
        (d(0) * 4 + d(1), "d0 * 4 + d1"),
        (d(1) * 4 + d(0) * 8, "d0 * 8 + d1 * 4"),
        (d(2) + (d(1) % 2) * 4, "d2 + (d1 mod 2) * 4"),
        ((d(0) % 2) * 2 + d(1) // 4, "d1 floordiv 4 + (d0 mod 2) * 2"),
        (d(0) * 2 + d(1) // 2, "d0 * 2 + d1 floordiv 2"),
        (d(0) - s(0), "d0 - s0"),
        (s(0) - d(0) * 3 - 2, "d0 * -3 + s0 - 2"),
        (-(d(0) // 11) + 9, "-(d0 floordiv 11) + 9"),
        ((d(0) + 1).floordiv(2).mod(3), "((d0 + 1) floordiv 2) mod 3"),
        (d(0) * 0 + 5, "5"),
        (const(-3), "-3"),
    ],
)
def test_printing_matches_mlir(expr, text):
    assert str(expr) == text


def test_floor_semantics_for_negative_operands():
    for x in range(-20, 21):
        for c in (1, 2, 3, 7, -2, -5):
            assert (d(0) // c).evaluate((x,)) == x // c
            assert (d(0) % c).evaluate((x,)) == x % c
            assert ceildiv(d(0), c).evaluate((x,)) == -((-x) // c)


def test_canonical_forms_compare_equal():
    assert d(0) + d(1) == d(1) + d(0)
    assert hash((d(0) + 1) * 2) == hash(d(0) * 2 + 2)
    assert d(0) - d(0) == Constant(0)
    assert (d(0) // 2) // 3 == d(0) // 6
    assert (d(0) % 12) % 4 == d(0) % 4
    assert d(0) * 1 is not None and d(0) * 1 == d(0)
    assert d(0) != s(0) and d(0) != d(1)


def test_non_affine_operations_are_rejected():
    with pytest.raises(TypeError, match="not affine"):
        d(0) * s(0)
    with pytest.raises(TypeError, match="not affine"):
        d(0) // s(0)
    with pytest.raises(ZeroDivisionError):
        d(0) % 0
    with pytest.raises(TypeError):
        d(0) + 1.5


def test_substitute_and_used_variables():
    e = d(0) * 2 + s(1) // 4
    out = substitute(e, [d(1) - 1], [s(0), d(0) * 4])
    assert str(out) == "d1 * 2 + (d0 * 4) floordiv 4 - 2"  # constructors do not simplify
    assert used_variables(out) == (frozenset({0, 1}), frozenset())
