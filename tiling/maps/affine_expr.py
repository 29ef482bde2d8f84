"""Affine expressions over dimensions ``d_i`` and symbols ``s_j``, in canonical form.

Nodes are frozen dataclasses: ``Constant``, ``DimExpr``, ``SymbolExpr``, ``SumExpr`` (a linear
combination of non-constant *atoms* plus a constant), ``FloorDivExpr`` and ``ModExpr`` (by a
positive constant).  Build them with ``d(i)``, ``s(j)``, ``const(c)`` and Python operators; the
smart constructors keep every expression canonical (sums flattened, like terms merged, terms
sorted, constants folded) so algebraically equal sums compare and hash equal.  ``ceildiv`` is
stored as ``(e + c - 1) floordiv c``.  Semantics follow MLIR: ``floordiv`` rounds toward minus
infinity and ``mod`` is non-negative for a positive divisor.  ``expr_variables`` replaces an
expression's variables (``substitute``) and lists which occur (``used_variables``).

>>> e = d(0) * 4 + d(1)
>>> str(e), e.evaluate((2, 3))
('d0 * 4 + d1', 11)
>>> str((d(1) - 3) % 7), str(16 - d(1)), str(d(0) // 8)
('(d1 - 3) mod 7', '-d1 + 16', 'd0 floordiv 8')
>>> (d(1) + d(0)) == (d(0) + d(1) * 2 - d(1))
True
>>> (-d(0)).floordiv(2).evaluate((3,))   # floor(-1.5)
-2
"""
from __future__ import annotations

from dataclasses import dataclass, field
from math import gcd
from typing import Callable, Iterable, Sequence, Union

IntOrExpr = Union[int, "AffineExpr"]

# Sort ranks of the node kinds; sums print their terms in this order (dims, symbols,
# floordivs, mods), which reproduces the seed's printed maps, e.g. `d2 + (d1 mod 2) * 4`.
_RANK_CONST, _RANK_DIM, _RANK_SYM, _RANK_FLOORDIV, _RANK_MOD, _RANK_SUM = -1, 0, 1, 2, 3, 4


class AffineExpr:
    """Base of all affine expression nodes; provides operators, evaluation and printing.

    Subclasses set ``_order`` (a tuple that identifies the expression structurally and totally
    orders expressions) and ``_hash`` at construction.
    """

    __slots__ = ()
    _order: tuple
    _hash: int

    # --- identity -------------------------------------------------------------------------
    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, AffineExpr):
            return NotImplemented
        return self._hash == other._hash and _compare_orders(self._order, other._order) == 0

    def __ne__(self, other: object) -> bool:
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    def __lt__(self, other: "AffineExpr") -> bool:
        return _compare_orders(self._order, other._order) < 0

    # --- operators ------------------------------------------------------------------------
    def __add__(self, other: IntOrExpr) -> "AffineExpr":
        return add(self, as_expr(other))

    def __radd__(self, other: IntOrExpr) -> "AffineExpr":
        return add(as_expr(other), self)

    def __sub__(self, other: IntOrExpr) -> "AffineExpr":
        return add(self, scale(as_expr(other), -1))

    def __rsub__(self, other: IntOrExpr) -> "AffineExpr":
        return add(as_expr(other), scale(self, -1))

    def __neg__(self) -> "AffineExpr":
        return scale(self, -1)

    def __pos__(self) -> "AffineExpr":
        return self

    def __mul__(self, other: IntOrExpr) -> "AffineExpr":
        return multiply(self, as_expr(other))

    def __rmul__(self, other: IntOrExpr) -> "AffineExpr":
        return multiply(as_expr(other), self)

    def __floordiv__(self, divisor: IntOrExpr) -> "AffineExpr":
        return floordiv(self, _const_value(divisor, "floordiv"))

    def __mod__(self, divisor: IntOrExpr) -> "AffineExpr":
        return mod(self, _const_value(divisor, "mod"))

    def floordiv(self, divisor: IntOrExpr) -> "AffineExpr":
        return floordiv(self, _const_value(divisor, "floordiv"))

    def ceildiv(self, divisor: IntOrExpr) -> "AffineExpr":
        return ceildiv(self, _const_value(divisor, "ceildiv"))

    def mod(self, divisor: IntOrExpr) -> "AffineExpr":
        return mod(self, _const_value(divisor, "mod"))

    # --- queries --------------------------------------------------------------------------
    def evaluate(self, dims: Sequence[int], symbols: Sequence[int] = ()) -> int:
        """The value at integer dims/symbols (floor semantics).

        >>> ((d(0) - 5) // 3).evaluate((0,))
        -2
        """
        return _evaluate(self, dims, symbols)

    def is_constant(self) -> bool:
        return isinstance(self, Constant)

    def to_str(
        self,
        dim_names: Callable[[int], str] | Sequence[str] | None = None,
        symbol_names: Callable[[int], str] | Sequence[str] | None = None,
    ) -> str:
        """Print in MLIR/XLA syntax with the given variable names (default ``d{i}``/``s{j}``)."""
        return _format(self, _namer(dim_names, "d"), _namer(symbol_names, "s"))

    def __str__(self) -> str:
        return self.to_str()

    def __repr__(self) -> str:
        return f"AffineExpr({self.to_str()!r})"


def _compare_orders(a: tuple, b: tuple) -> int:
    """-1, 0 or 1 as ``a`` sorts before, equal to or after ``b``.  The orders nest as deep
    as the expressions: Python compares nested tuples recursively, so an order deeper than
    its recursion limit is compared here with an explicit stack instead."""
    try:
        return (a > b) - (a < b)
    except RecursionError:
        pass
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if x is y:
            continue
        if not (isinstance(x, tuple) and isinstance(y, tuple)):
            if x != y:
                return -1 if x < y else 1
            continue
        # Lexicographic: the first differing element decides, so push them last-first.
        common = min(len(x), len(y))
        if len(x) != len(y):
            stack.append((len(x), len(y)))
        stack.extend((x[i], y[i]) for i in range(common - 1, -1, -1))
    return 0


def _namer(names: Callable[[int], str] | Sequence[str] | None, prefix: str) -> Callable[[int], str]:
    if names is None:
        return lambda i: f"{prefix}{i}"
    if callable(names):
        return names
    seq = tuple(names)
    return lambda i: seq[i] if i < len(seq) else f"{prefix}{i}"


@dataclass(frozen=True, eq=False, repr=False)
class Constant(AffineExpr):
    value: int
    _order: tuple = field(init=False, compare=False)
    _hash: int = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_order", (_RANK_CONST, self.value))
        object.__setattr__(self, "_hash", hash(("c", self.value)))


@dataclass(frozen=True, eq=False, repr=False)
class DimExpr(AffineExpr):
    index: int
    _order: tuple = field(init=False, compare=False)
    _hash: int = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_order", (_RANK_DIM, self.index))
        object.__setattr__(self, "_hash", hash(("d", self.index)))


@dataclass(frozen=True, eq=False, repr=False)
class SymbolExpr(AffineExpr):
    index: int
    _order: tuple = field(init=False, compare=False)
    _hash: int = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_order", (_RANK_SYM, self.index))
        object.__setattr__(self, "_hash", hash(("s", self.index)))


@dataclass(frozen=True, eq=False, repr=False)
class SumExpr(AffineExpr):
    """``sum(coeff * atom) + constant``; terms sorted, coefficients non-zero, atoms distinct.

    Never built directly with fewer than two parts: use ``add``/``linear_combination``.
    """

    terms: tuple[tuple[AffineExpr, int], ...]
    constant: int = 0
    _order: tuple = field(init=False, compare=False)
    _hash: int = field(init=False, compare=False)

    def __post_init__(self) -> None:
        order = (_RANK_SUM, tuple((a._order, c) for a, c in self.terms), self.constant)
        object.__setattr__(self, "_order", order)
        h = hash(("+", tuple((a._hash, c) for a, c in self.terms), self.constant))
        object.__setattr__(self, "_hash", h)


@dataclass(frozen=True, eq=False, repr=False)
class FloorDivExpr(AffineExpr):
    dividend: AffineExpr
    divisor: int
    _order: tuple = field(init=False, compare=False)
    _hash: int = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_order", (_RANK_FLOORDIV, self.dividend._order, self.divisor))
        object.__setattr__(self, "_hash", hash(("/", self.dividend._hash, self.divisor)))


@dataclass(frozen=True, eq=False, repr=False)
class ModExpr(AffineExpr):
    dividend: AffineExpr
    divisor: int
    _order: tuple = field(init=False, compare=False)
    _hash: int = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_order", (_RANK_MOD, self.dividend._order, self.divisor))
        object.__setattr__(self, "_hash", hash(("%", self.dividend._hash, self.divisor)))


# --- constructors ---------------------------------------------------------------------------
def d(index: int) -> DimExpr:
    """Dimension variable ``d<index>``."""
    return DimExpr(index)


def s(index: int) -> SymbolExpr:
    """Symbol ``s<index>`` (range variables first, then runtime variables)."""
    return SymbolExpr(index)


def const(value: int) -> Constant:
    return Constant(int(value))


def as_expr(value: IntOrExpr) -> AffineExpr:
    if isinstance(value, AffineExpr):
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"cannot use {value!r} in an affine expression")
    return Constant(value)


def _const_value(value: IntOrExpr, op: str) -> int:
    if isinstance(value, Constant):
        return value.value
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise TypeError(f"{op} by a non-constant ({value!r}) is not affine")


def linear_parts(e: AffineExpr) -> tuple[tuple[tuple[AffineExpr, int], ...], int]:
    """``e`` as (terms, constant): a sum's own parts, an atom as ``((e, 1),)``."""
    if isinstance(e, SumExpr):
        return e.terms, e.constant
    if isinstance(e, Constant):
        return (), e.value
    return ((e, 1),), 0


def linear_combination(terms: Iterable[tuple[AffineExpr, int]], constant: int = 0) -> AffineExpr:
    """Canonical ``sum(coeff * expr) + constant``; ``expr`` may itself be any expression.

    >>> str(linear_combination([(d(1), 2), (d(0), 1), (d(1), -2)], 5))
    'd0 + 5'
    """
    acc: dict[AffineExpr, int] = {}
    for expr, coeff in terms:
        if coeff == 0:
            continue
        sub_terms, sub_const = linear_parts(expr)
        constant += sub_const * coeff
        for atom, c in sub_terms:
            acc[atom] = acc.get(atom, 0) + c * coeff
    items = [(a, c) for a, c in acc.items() if c != 0]
    if not items:
        return Constant(constant)
    if len(items) == 1 and items[0][1] == 1 and constant == 0:
        return items[0][0]
    items.sort(key=lambda t: t[0]._order)
    return SumExpr(tuple(items), constant)


def add(a: AffineExpr, b: AffineExpr) -> AffineExpr:
    if isinstance(b, Constant):
        if b.value == 0:
            return a
        if isinstance(a, Constant):
            return Constant(a.value + b.value)
        return _make_sum(*linear_parts(a), b.value)
    if isinstance(a, Constant):
        return add(b, a)
    return linear_combination(((a, 1), (b, 1)))


def _make_sum(terms: tuple[tuple[AffineExpr, int], ...], constant: int, extra: int = 0) -> AffineExpr:
    """A sum from already canonical (sorted, merged, non-zero) terms."""
    constant += extra
    if not terms:
        return Constant(constant)
    if constant == 0 and len(terms) == 1 and terms[0][1] == 1:
        return terms[0][0]
    return SumExpr(terms, constant)


def scale(e: AffineExpr, factor: int) -> AffineExpr:
    if factor == 1:
        return e
    if factor == 0:
        return Constant(0)
    if isinstance(e, Constant):
        return Constant(e.value * factor)
    terms, c = linear_parts(e)
    return _make_sum(tuple((a, k * factor) for a, k in terms), c * factor)


def multiply(a: AffineExpr, b: AffineExpr) -> AffineExpr:
    if isinstance(b, Constant):
        return scale(a, b.value)
    if isinstance(a, Constant):
        return scale(b, a.value)
    raise TypeError(f"product of two non-constant expressions ({a}) * ({b}) is not affine")


def floordiv(e: AffineExpr, divisor: int) -> AffineExpr:
    """``e floordiv divisor`` (rounds toward minus infinity)."""
    if divisor == 0:
        raise ZeroDivisionError(f"({e}) floordiv 0")
    if divisor < 0:
        return floordiv(scale(e, -1), -divisor)
    if divisor == 1:
        return e
    if isinstance(e, Constant):
        return Constant(e.value // divisor)
    if isinstance(e, FloorDivExpr):  # floor(floor(x/a)/b) == floor(x/(a*b)) for a, b > 0
        return FloorDivExpr(e.dividend, e.divisor * divisor)
    return FloorDivExpr(e, divisor)


def ceildiv(e: AffineExpr, divisor: int) -> AffineExpr:
    """``e ceildiv divisor``, stored as ``(e + divisor - 1) floordiv divisor``."""
    if divisor == 0:
        raise ZeroDivisionError(f"({e}) ceildiv 0")
    if divisor < 0:
        return ceildiv(scale(e, -1), -divisor)
    return floordiv(add(e, Constant(divisor - 1)), divisor)


def mod(e: AffineExpr, divisor: int) -> AffineExpr:
    """``e mod divisor``: in ``[0, divisor)`` for a positive divisor."""
    if divisor == 0:
        raise ZeroDivisionError(f"({e}) mod 0")
    if divisor < 0:  # x mod -c == -((-x) mod c), matching Python and MLIR's floor semantics
        return scale(mod(scale(e, -1), -divisor), -1)
    if divisor == 1:
        return Constant(0)
    if isinstance(e, Constant):
        return Constant(e.value % divisor)
    if isinstance(e, ModExpr) and e.divisor % divisor == 0:
        return mod(e.dividend, divisor)
    return ModExpr(e, divisor)


# --- traversal ------------------------------------------------------------------------------
def post_order(roots: Iterable[AffineExpr], done=None) -> list[AffineExpr]:
    """The distinct nodes (by identity) under ``roots``, each after its operands, found
    without recursion (an expression may be thousands of levels deep).  Nodes for which
    ``done(node)`` is true are neither listed nor entered.

    >>> [str(n) for n in post_order([d(0) * 2 + 1])]
    ['d0', 'd0 * 2 + 1']
    """
    order: list[AffineExpr] = []
    visited: set[int] = set()
    stack: list[tuple[AffineExpr, bool]] = [(r, False) for r in reversed(list(roots))]
    while stack:
        e, expanded = stack.pop()
        if expanded:
            order.append(e)
            continue
        if id(e) in visited or (done is not None and done(e)):
            continue
        visited.add(id(e))
        stack.append((e, True))
        if isinstance(e, SumExpr):
            stack.extend((a, False) for a, _ in reversed(e.terms))
        elif isinstance(e, (FloorDivExpr, ModExpr)):
            stack.append((e.dividend, False))
    return order


def _evaluate(e: AffineExpr, dims: Sequence[int], symbols: Sequence[int]) -> int:
    # Recursion is the fast path for the shallow expressions of every day; an expression
    # deeper than the interpreter's recursion limit is evaluated bottom-up instead.
    try:
        return _evaluate_recursive(e, dims, symbols)
    except RecursionError:
        return _evaluate_iterative(e, dims, symbols)


def _evaluate_recursive(e: AffineExpr, dims: Sequence[int], symbols: Sequence[int]) -> int:
    if isinstance(e, SumExpr):
        total = e.constant
        for atom, coeff in e.terms:
            total += coeff * _evaluate_recursive(atom, dims, symbols)
        return total
    if isinstance(e, DimExpr):
        return dims[e.index]
    if isinstance(e, SymbolExpr):
        return symbols[e.index]
    if isinstance(e, Constant):
        return e.value
    if isinstance(e, FloorDivExpr):
        return _evaluate_recursive(e.dividend, dims, symbols) // e.divisor
    if isinstance(e, ModExpr):
        return _evaluate_recursive(e.dividend, dims, symbols) % e.divisor
    raise TypeError(f"not an affine expression: {e!r}")


def _evaluate_iterative(e: AffineExpr, dims: Sequence[int], symbols: Sequence[int]) -> int:
    values: dict[int, int] = {}
    for x in post_order([e]):
        if isinstance(x, SumExpr):
            total = x.constant
            for atom, coeff in x.terms:
                total += coeff * values[id(atom)]
            values[id(x)] = total
        elif isinstance(x, DimExpr):
            values[id(x)] = dims[x.index]
        elif isinstance(x, SymbolExpr):
            values[id(x)] = symbols[x.index]
        elif isinstance(x, Constant):
            values[id(x)] = x.value
        elif isinstance(x, FloorDivExpr):
            values[id(x)] = values[id(x.dividend)] // x.divisor
        elif isinstance(x, ModExpr):
            values[id(x)] = values[id(x.dividend)] % x.divisor
        else:
            raise TypeError(f"not an affine expression: {x!r}")
    return values[id(e)]


def coefficient_gcd(terms: Iterable[tuple[AffineExpr, int]]) -> int:
    g = 0
    for _, c in terms:
        g = gcd(g, c)
    return g


# --- printing -------------------------------------------------------------------------------
def _format(e: AffineExpr, dn: Callable[[int], str], sn: Callable[[int], str]) -> str:
    try:  # recursion: the fast path for shallow expressions
        return _format_recursive(e, dn, sn)
    except RecursionError:
        return _format_iterative(e, dn, sn)


def _format_recursive(e: AffineExpr, dn, sn) -> str:
    def sub(x: AffineExpr) -> str:
        return _format_recursive(x, dn, sn)

    return _format_node(e, dn, sn, sub, lambda x: _parenthesized(x, sub(x)))


def _parenthesized(x: AffineExpr, text: str) -> str:
    """An operand of ``*``, ``floordiv``, ``mod`` or unary minus: parenthesized unless
    atomic."""
    if isinstance(x, (DimExpr, SymbolExpr)) or (isinstance(x, Constant) and x.value >= 0):
        return text
    return f"({text})"


def _format_iterative(e: AffineExpr, dn, sn) -> str:
    # Bottom-up (each distinct node's text once, from its operands' texts): no recursion.
    text: dict[int, str] = {}

    def sub(x: AffineExpr) -> str:
        return text[id(x)]

    for x in post_order([e]):
        text[id(x)] = _format_node(x, dn, sn, sub, lambda y: _parenthesized(y, text[id(y)]))
    return text[id(e)]


def _format_node(e: AffineExpr, dn, sn, sub, operand) -> str:
    """One node's text from its operands' (``sub``: plain, ``operand``: parenthesized)."""
    if isinstance(e, DimExpr):
        return dn(e.index)
    if isinstance(e, SymbolExpr):
        return sn(e.index)
    if isinstance(e, Constant):
        return str(e.value)
    if isinstance(e, (FloorDivExpr, ModExpr)):
        op = "floordiv" if isinstance(e, FloorDivExpr) else "mod"
        return f"{operand(e.dividend)} {op} {e.divisor}"
    if isinstance(e, SumExpr):
        parts: list[str] = []
        for i, (atom, coeff) in enumerate(e.terms):
            if i == 0:
                if coeff == 1:
                    parts.append(sub(atom))
                elif coeff == -1:
                    parts.append("-" + operand(atom))
                else:
                    parts.append(f"{operand(atom)} * {coeff}")
                continue
            sign = " + " if coeff > 0 else " - "
            mag = abs(coeff)
            body = sub(atom) if mag == 1 else f"{operand(atom)} * {mag}"
            parts.append(sign + body)
        if e.constant > 0:
            parts.append(f" + {e.constant}")
        elif e.constant < 0:
            parts.append(f" - {-e.constant}")
        return "".join(parts)
    raise TypeError(f"not an affine expression: {e!r}")
