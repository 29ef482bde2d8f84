"""Operand index expressions from the indexing analysis' output -> operand maps.

The index story of an op lives in one place, ``tiling.indexing_analysis``: for the output at
index expressions ``indices`` the emitter reads operand ``k`` at the map's results with
``d_i -> indices[i]``.  A runtime variable (a dynamic-slice offset, a gather start) is read
from the instruction the map names, at the index its own map gives, and clamped to its
feasible values -- exactly XLA's clamping of offsets -- then bound to a kernel symbol.  Range
variables (reduce, reduce-window) are not handled here: they become reduction axes
(``reduction_rules``).  A map whose domain is narrower than the output (pad, concatenate) is
only exact on that domain: the caller honours it with :func:`domain_mask` or a selection.

>>> from fusion.text.parser import parse_hlo
>>> from tiling.maps.affine_expr import d
>>> c = parse_hlo('''HloModule m
... ENTRY e {
...   p = f32[4,6] parameter(0)
...   ROOT t = f32[6,2] slice(p), slice={[1:4:2],[0:6]}
... }''').entry
>>> (m,) = analysis_maps(c, c.root)[0]
>>> [str(e) for e in substitute_results(m, (d(1), d(0)))]
['d1 * 2 + 1', 'd0']
"""
from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING

from fusion.errors import UnsupportedOpError
from fusion.ir.hlo_module import HloComputation, HloInstruction
from tiling.maps.affine_expr import AffineExpr, FloorDivExpr, ModExpr, SumExpr, SymbolExpr, const
from tiling.maps.expr_variables import substitute
from tiling.indexing_analysis import output_to_input_indexing
from tiling.maps.indexing_map import IndexingMap
from tiling.maps.interval import Interval
from tiling.maps.range_evaluator import RangeEvaluator
from tiling.maps.expr_simplifier import ExprSimplifier

if TYPE_CHECKING:  # the emitter imports the rules that import this module
    from triton_backend.lowering.emitter.value_emitter import ValueEmitter

Indices = tuple[AffineExpr, ...]


def analysis_maps(computation: HloComputation,
                  instr: HloInstruction) -> tuple[frozenset[IndexingMap], ...]:
    """The analysis' output -> operand maps of ``instr`` (one set per operand).

    Instructions that differ only by name share one analysis (memoized by signature); maps
    with runtime variables name their producers, so those are computed per instruction.
    """
    if not instr.operands:
        return ()
    shapes = tuple(computation.instruction(o).shape for o in instr.operands)
    try:
        maps = _maps_by_signature(instr.opcode, instr.shape, instr.attributes, shapes)
    except TypeError:  # an attribute value that cannot be hashed: no memoization
        return output_to_input_indexing(instr, computation)
    if any(var.hlo is None for found in maps for m in found for var in m.rt_vars):
        maps = output_to_input_indexing(instr, computation)
    return maps


@functools.lru_cache(maxsize=4096)
def _maps_by_signature(opcode: str, shape, attributes, operand_shapes):
    # Pure memoization: the maps depend on the op, its attributes and the shapes only.
    probe = HloInstruction("probe", opcode, shape,
                           tuple(f"operand{k}" for k in range(len(operand_shapes))), attributes)
    return output_to_input_indexing(probe, operand_shapes=operand_shapes)


def operand_map(em: ValueEmitter, instr: HloInstruction, k: int,
                why: str = "") -> IndexingMap | None:
    """The one map from ``instr``'s output to operand ``k``; None when it is never read.

    Computed once per instruction and emitter (rules run once per distinct index tuple).
    ``UnsupportedOpError`` when the analysis has no single defined map for the operand
    (``why`` says what that means for the op).
    """
    maps = em.index_maps.get(instr.name)
    if maps is None:
        maps = analysis_maps(em.computation, instr)
        em.index_maps[instr.name] = maps
    found = maps[k]
    if not found:
        return None
    (m,) = found if len(found) == 1 else (None,)
    if m is None or m.is_undefined:
        raise UnsupportedOpError(
            f"{instr.opcode} ({instr.name}): the indexing analysis has no single map from the "
            f"output to operand {k} ({instr.operands[k]}){': ' + why if why else ''}",
            where=instr.name)
    return m


def is_full_domain(m: IndexingMap, dims: Sequence[int]) -> bool:
    """True when ``m`` holds on the whole output ``dims``: no constraints, full dim bounds."""
    return not m.constraints and all(
        b.lower == 0 and b.upper == n - 1 for b, n in zip(m.dim_bounds, dims))


def substitute_results(m: IndexingMap, indices: Sequence[AffineExpr],
                       symbols: Sequence[AffineExpr] = ()) -> Indices:
    """``m``'s results with ``d_i -> indices[i]`` and ``s_j -> symbols[j]``."""
    memo: dict = {}
    return tuple(substitute(r, list(indices), list(symbols), memo) for r in m.results)


def runtime_symbols(em: ValueEmitter, m: IndexingMap, indices: Indices, hint: str) -> list[AffineExpr]:
    """Kernel symbols holding ``m``'s runtime variables at ``indices``, clamped as XLA does.

    Each is read from its instruction at the index its map gives (a scalar when empty).
    """
    symbols = []
    for j, var in enumerate(m.rt_vars):
        if var.hlo is None or var.map is None:
            raise UnsupportedOpError(f"runtime variable {j} of a map has no instruction to read",
                                     where=hint)
        at = substitute_results(var.map, indices)
        raw = em.value(var.hlo.name, at)
        if not isinstance(raw, str):
            raise UnsupportedOpError("tuple-shaped offset operand", where=var.hlo.name)
        low, high = var.feasible_values.lower, var.feasible_values.upper
        symbols.append(em.new_symbol(
            f"tl.minimum(tl.maximum(({raw}).to(tl.int64), {low}), {high}).to({em.index_dtype})",
            f"{hint}{j}", at, value=raw))
    return symbols


def operand_indices(em: ValueEmitter, instr: HloInstruction, k: int, indices: Indices,
                    hint: str = "start", why: str = "") -> Indices | None:
    """Where ``instr`` at ``indices`` reads operand ``k`` (None: never read).

    The map must have no range variables; runtime variables are read and clamped.  Whether
    the map's domain covers the output is the caller's business (see :func:`domain_mask`).
    """
    m = operand_map(em, instr, k, why)
    if m is None:
        return None
    if m.num_range_vars:
        raise UnsupportedOpError(
            f"{instr.opcode} ({instr.name}) reads operand {k} over range variables, which only "
            "a reduction rule can emit", where=instr.name)
    return compact_indices(em, substitute_results(m, indices, runtime_symbols(em, m, indices,
                                                                              hint)))


#: Index expressions of at most this many nodes are emitted as substituted.  Larger ones are
#: simplified under the kernel's variable bounds first: a chain of reshapes substitutes each
#: map's ``x floordiv c``/``x mod c`` into the next, doubling the expression per reshape,
#: while ``tiling.maps.expr_simplifier`` folds ``(x floordiv c) * c + x mod c`` back to ``x`` (one map
#: for the whole chain, so the cost stays linear in its length).
COMPACT_ABOVE = 24


def compact_indices(em: ValueEmitter, indices: Indices) -> Indices:
    """``indices`` simplified under the bounds of the emitter's dim variables when they are
    larger than ``COMPACT_ABOVE`` nodes; kept as they are when they read symbols, or when
    some ``floordiv``/``mod`` operand (before or after) may be negative (Triton's ``//`` and
    ``%`` truncate toward zero, the simplifier's identities are floor identities).

    >>> from tiling.maps.affine_expr import d
    >>> from triton_backend.lowering.emitter.value_emitter import IndexVar, ValueEmitter
    >>> em = ValueEmitter(None, None, [16, 8], None, {},
    ...                   dims=[IndexVar("i0", 0, 16, 16, 15), IndexVar("i1", 1, 8, 8, 7)])
    >>> x = d(0) * 8 + d(1)
    >>> for _ in range(3):  # f32[16,8] -> [4,32] -> [128] three times, unsimplified
    ...     x = (x // 32) * 32 + x % 32
    >>> [str(e) for e in compact_indices(em, (x // 8, x % 8))]
    ['d0', 'd1']
    """
    if _nodes(indices, COMPACT_ABOVE + 1) <= COMPACT_ABOVE:
        return indices
    evaluator = RangeEvaluator([Interval(0, v.upper) for v in em.dims], [])
    if not _floor_safe(indices, evaluator):
        return indices
    simplifier = ExprSimplifier(evaluator)
    simplified = tuple(simplifier.simplify(e) for e in indices)
    return simplified if _floor_safe(simplified, evaluator) else indices


def _nodes(exprs: Sequence[AffineExpr], limit: int) -> int:
    """How many nodes ``exprs`` have (shared ones counted each time), counting to ``limit``."""
    count, stack = 0, list(exprs)
    while stack and count < limit:
        e = stack.pop()
        count += 1
        if isinstance(e, SumExpr):
            stack.extend(a for a, _ in e.terms)
        elif isinstance(e, (FloorDivExpr, ModExpr)):
            stack.append(e.dividend)
    return count


def _floor_safe(exprs: Sequence[AffineExpr], evaluator: RangeEvaluator) -> bool:
    """No symbol, and every ``floordiv``/``mod`` operand is non-negative over the bounds
    (where truncation and floor agree); walks each distinct node once, without recursion."""
    seen: set[int] = set()
    stack = list(exprs)
    while stack:
        e = stack.pop()
        if id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, SymbolExpr):
            return False
        if isinstance(e, SumExpr):
            stack.extend(a for a, _ in e.terms)
        elif isinstance(e, (FloorDivExpr, ModExpr)):
            stack.append(e.dividend)
    for e in _bottom_up(exprs):  # fill the evaluator's memo leaves first: no deep recursion
        if isinstance(e, (FloorDivExpr, ModExpr)) and evaluator.compute(e.dividend).lower < 0:
            return False
        evaluator.compute(e)
    return True


def _bottom_up(exprs: Sequence[AffineExpr]) -> list[AffineExpr]:
    """The distinct nodes of ``exprs``, every node after its operands (iterative DFS)."""
    order: list[AffineExpr] = []
    done: set[int] = set()
    stack: list[tuple[AffineExpr, bool]] = [(e, False) for e in exprs]
    while stack:
        e, expanded = stack.pop()
        if id(e) in done:
            continue
        if expanded:
            done.add(id(e))
            order.append(e)
            continue
        stack.append((e, True))
        if isinstance(e, SumExpr):
            stack.extend((a, False) for a, _ in e.terms)
        elif isinstance(e, (FloorDivExpr, ModExpr)):
            stack.append((e.dividend, False))
    return order


def exact_operand_indices(em: ValueEmitter, instr: HloInstruction, k: int, indices: Indices,
                          hint: str = "start", why: str = "") -> Indices:
    """Like :func:`operand_indices` for an operand read at every output element by one
    unconstrained map (transpose, broadcast, reshape, slice, elementwise, ...).

    A zero-size output has no element: any map holds on it vacuously (the analysis drops
    its KNOWN EMPTY maps), and its kernel's grid is empty, so the read is never run; it is
    placed at the operand's index 0, which keeps the generated code well formed.
    """
    dims = getattr(instr.shape, "dims", None)
    if dims is not None and 0 in dims:
        operand = em.computation.instruction(instr.operands[k]).shape
        return tuple(const(0) for _ in getattr(operand, "dims", ()))
    m = operand_map(em, instr, k, why)
    if m is None or dims is None or not is_full_domain(m, dims):
        raise UnsupportedOpError(
            f"{instr.opcode} ({instr.name}): operand {k} is not read through one map over the "
            "whole output", where=instr.name)
    result = operand_indices(em, instr, k, indices, hint, why)
    assert result is not None
    return result


def domain_mask(em: ValueEmitter, m: IndexingMap, indices: Indices) -> str | None:
    """A mask true where ``indices`` lie in ``m``'s domain (dim bounds and constraints);
    None when the emitter proves it always holds.  Symbol-free maps only."""
    checks = []
    for e, b in zip(indices, m.dim_bounds):
        checks += _interval_checks(em, e, b.lower, b.upper)
    for e, b in m.constraints:
        checks += _interval_checks(em, substitute(e, list(indices), None), b.lower, b.upper)
    return " & ".join(checks) if checks else None


def _interval_checks(em: ValueEmitter, e: AffineExpr, lower: int, upper: int) -> list[str]:
    low, high = em.bounds(e)
    text = em.index_text(e)
    if lower == upper and (low < lower or high > upper):
        return [f"({text} == {lower})"]
    checks = []
    if low < lower:
        checks.append(f"({text} >= {lower})")
    if high > upper:
        checks.append(f"({text} <= {upper})")
    return checks


__all__ = ["analysis_maps", "compact_indices", "domain_mask", "exact_operand_indices", "is_full_domain",
           "operand_indices", "operand_map", "runtime_symbols", "substitute_results"]
