"""Size expressions and constraints over tile parameters (XLA's ``ConstraintExpression``).

A symbolic tile's sizes depend on the tile parameters: ``ts<i>`` (the output tile size along
output dim ``i``) and ``rs<l>`` (the chunk of reduced range variable ``l``).  Sizes of merged
dims are products (``ts0 * ts1``), which ``tiling.maps.affine_expr`` cannot hold, so sizes are small
trees of ``+ const``, ``*``, ``floordiv const`` and ``mod const`` over the parameters.

Constraints are in disjunctive normal form: a tuple of conjunctions of atoms; ``TRUE`` is one
empty conjunction, ``FALSE`` none.  An atom says ``expr divides K``, ``expr is a multiple of
K`` or ``expr == K`` -- XLA's reshape constraint "the tile size of d0 must divide 8 or be a
multiple of 8" is ``divides(ts0, 8) | multiple_of(ts0, 8)``:

>>> c = divides(param(0), 8) | multiple_of(param(0), 8)
>>> print(c)
8 mod ts0 == 0 || ts0 mod 8 == 0
>>> [c.holds((n,)) for n in (2, 8, 12, 16)]
[True, True, False, True]
>>> str(ceil_div_size(param(0) * param(1), 8)), (ceil_div_size(param(0), 8)).evaluate((17,))
('(ts0 * ts1 - 1) floordiv 8 + 1', 3)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


def _param_name(index: int, num_dims: int | None) -> str:
    if num_dims is None or index < num_dims:
        return f"ts{index}"
    return f"rs{index - num_dims}"


@dataclass(frozen=True)
class SizeExpr:
    """A size: ``op`` in ``const`` (``args=(value,)``), ``param`` (``(index,)``), ``add``
    (``(expr, const)``), ``mul`` (``(a, b)``), ``floordiv``/``mod`` (``(expr, const)``)."""

    op: str
    args: tuple

    def evaluate(self, params: Sequence[int]) -> int:
        op, a = self.op, self.args
        if op == "const":
            return a[0]
        if op == "param":
            return params[a[0]]
        if op == "add":
            return a[0].evaluate(params) + a[1]
        if op == "mul":
            return a[0].evaluate(params) * a[1].evaluate(params)
        if op == "floordiv":
            return a[0].evaluate(params) // a[1]
        return a[0].evaluate(params) % a[1]

    @property
    def constant(self) -> int | None:
        return self.args[0] if self.op == "const" else None

    def __mul__(self, other: "SizeExpr | int") -> "SizeExpr":
        other = other if isinstance(other, SizeExpr) else const_size(other)
        if self.constant is not None and other.constant is not None:
            return const_size(self.constant * other.constant)
        if self.constant == 1:
            return other
        if other.constant == 1:
            return self
        if other.constant is not None:  # constants first: "8 * ts0" reads as a stride
            return SizeExpr("mul", (other, self))
        return SizeExpr("mul", (self, other))

    def plus(self, value: int) -> "SizeExpr":
        if value == 0:
            return self
        if self.constant is not None:
            return const_size(self.constant + value)
        if self.op == "add":
            return self.args[0].plus(self.args[1] + value)
        return SizeExpr("add", (self, value))

    def to_str(self, num_dims: int | None = None) -> str:
        op, a = self.op, self.args
        if op == "const":
            return str(a[0])
        if op == "param":
            return _param_name(a[0], num_dims)
        if op == "add":
            sign = "+" if a[1] >= 0 else "-"
            return f"{a[0].to_str(num_dims)} {sign} {abs(a[1])}"
        if op == "mul":
            return f"{_paren(a[0], num_dims)} * {_paren(a[1], num_dims)}"
        return f"{_paren(a[0], num_dims)} {op} {a[1]}"

    def __str__(self) -> str:
        return self.to_str()


def _paren(e: SizeExpr, num_dims: int | None) -> str:
    text = e.to_str(num_dims)
    return f"({text})" if e.op in ("add", "floordiv", "mod") else text


def const_size(value: int) -> SizeExpr:
    return SizeExpr("const", (int(value),))


def param(index: int) -> SizeExpr:
    """Tile parameter ``index`` (``ts<index>`` when printed without a dim count)."""
    return SizeExpr("param", (index,))


def ceil_div_size(e: SizeExpr, k: int) -> SizeExpr:
    """``(e - 1) floordiv k + 1``: ``ceil(e / k)`` for ``e >= 1``."""
    if k == 1:
        return e
    if e.constant is not None:
        return const_size(-(-e.constant // k))
    return SizeExpr("floordiv", (e.plus(-1), k)).plus(1)


def wrap_size(e: SizeExpr, k: int) -> SizeExpr:
    """``(e - 1) mod k + 1``: ``min(e, k)`` when ``e`` divides ``k`` or ``k`` divides ``e``."""
    if e.constant is not None:
        return const_size((e.constant - 1) % k + 1)
    return SizeExpr("mod", (e.plus(-1), k)).plus(1)


@dataclass(frozen=True)
class Atom:
    """``kind`` in ``divides`` (``k mod expr == 0``), ``multiple_of`` (``expr mod k == 0``),
    ``eq`` (``expr == k``)."""

    kind: str
    expr: SizeExpr
    k: int

    def holds(self, params: Sequence[int]) -> bool:
        v = self.expr.evaluate(params)
        if self.kind == "eq":
            return v == self.k
        if self.kind == "divides":
            return v != 0 and self.k % v == 0
        return v % self.k == 0

    def to_str(self, num_dims: int | None = None) -> str:
        e = _paren(self.expr, num_dims) if self.expr.op != "mul" else f"({self.expr.to_str(num_dims)})"
        if self.kind == "eq":
            return f"{self.expr.to_str(num_dims)} == {self.k}"
        if self.kind == "divides":
            return f"{self.k} mod {e} == 0"
        return f"{e} mod {self.k} == 0"


@dataclass(frozen=True)
class Constraints:
    """A disjunction of conjunctions of atoms over the tile parameters."""

    conjunctions: tuple[tuple[Atom, ...], ...]

    @property
    def is_always_true(self) -> bool:
        return any(not c for c in self.conjunctions)

    @property
    def is_unsatisfiable(self) -> bool:
        return not self.conjunctions

    def holds(self, params: Sequence[int]) -> bool:
        return any(all(a.holds(params) for a in conj) for conj in self.conjunctions)

    def __and__(self, other: "Constraints") -> "Constraints":
        return _make(tuple(a + b for a in self.conjunctions for b in other.conjunctions))

    def __or__(self, other: "Constraints") -> "Constraints":
        return _make(self.conjunctions + other.conjunctions)

    def to_str(self, num_dims: int | None = None) -> str:
        if self.is_always_true:
            return "true"
        if self.is_unsatisfiable:
            return "false"
        parts = [" && ".join(a.to_str(num_dims) for a in conj) for conj in self.conjunctions]
        return " || ".join(parts)

    def __str__(self) -> str:
        return self.to_str()


def _make(conjunctions) -> Constraints:
    """Fold constant atoms, deduplicate, and drop conjunctions subsumed by a shorter one."""
    out: list[tuple[Atom, ...]] = []
    for conj in conjunctions:
        kept: list[Atom] = []
        dead = False
        for atom in conj:
            if atom.expr.constant is not None:
                if not atom.holds(()):
                    dead = True
                    break
                continue
            if atom not in kept:
                kept.append(atom)
        if dead:
            continue
        key = tuple(sorted(kept, key=repr))
        if key not in out:
            out.append(key)
    out = [c for c in out if not any(o != c and set(o) <= set(c) for o in out)]
    return Constraints(tuple(out))


TRUE = Constraints(((),))
FALSE = Constraints(())


def atom(kind: str, expr: SizeExpr, k: int) -> Constraints:
    return _make(((Atom(kind, expr, int(k)),),))


def divides(expr: SizeExpr, k: int) -> Constraints:
    """``expr`` divides ``k`` (``k == 0`` always holds)."""
    return atom("divides", expr, k) if k != 0 else TRUE


def multiple_of(expr: SizeExpr, k: int) -> Constraints:
    return atom("multiple_of", expr, k)


def equals(expr: SizeExpr, k: int) -> Constraints:
    return atom("eq", expr, k)
