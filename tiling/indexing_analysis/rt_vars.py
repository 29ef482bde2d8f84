"""Runtime variables whose value is known from their producer, replaced as XLA does.

A runtime variable (a dynamic-slice offset, a gather start index) reads an element of its
producer ``hlo`` at ``map`` (from the indexing map's dims).  When that producer is an integer
``constant`` read at a constant index, the variable is that value clamped to its feasible
values (XLA clamps offsets the same way); when it is an ``iota``, the variable is the read
index along the iota dimension, provided its range lies within the feasible values.  The
variable is then substituted into the results and constraints and dropped.

>>> from fusion.text.parser import parse_hlo
>>> from tiling.indexing_analysis.operands import Operand
>>> from tiling.indexing_analysis.dynamic_rules import o2i_dynamic_slice
>>> c = parse_hlo('''HloModule m
... ENTRY e {
...   src = s32[8] parameter(0)
...   of = s32[] constant(9)
...   ROOT ds = s32[3] dynamic-slice(src, of), dynamic_slice_sizes={3}
... }''').entry
>>> ops = tuple(Operand(c.instruction(n).shape, c.instruction(n)) for n in c.root.operands)
>>> print(replace_known_rt_vars(o2i_dynamic_slice(c.root, ops, 0)[0]))
(d0) -> (d0 + 5), domain: d0 in [0, 2]
"""
from __future__ import annotations

from fusion.ir.attributes import Literal
from fusion.ir.hlo_module import HloInstruction
from fusion.ir.shape import ArrayShape
from tiling.maps.affine_expr import AffineExpr, Constant, DimExpr, SymbolExpr
from tiling.maps.expr_variables import substitute
from tiling.maps.indexing_map import AffineMap, IndexingMap, RTVar
from tiling.maps.interval import Interval


def replace_known_rt_vars(m: IndexingMap) -> IndexingMap:
    """``m`` with every runtime variable of a constant or iota producer substituted away."""
    if m.is_undefined or m.is_known_empty or not m.rt_vars:
        return m
    nr = m.num_range_vars
    repl: list[AffineExpr] = [SymbolExpr(j) for j in range(m.num_symbols)]
    changed = False
    for k, var in enumerate(m.rt_vars):
        value = _known_value(var, m)
        if value is not None:
            repl[nr + k] = value
            changed = True
    if not changed:
        return m
    memo: dict = {}
    results = tuple(substitute(r, None, repl, memo) for r in m.results)
    constraints = tuple((substitute(c, None, repl, memo), iv) for c, iv in m.constraints)
    rt_vars = tuple(RTVar(v.feasible_values, v.hlo, _substituted(v.map, repl, memo))
                    for v in m.rt_vars)
    replaced = m.replace(affine_map=AffineMap(m.num_dims, m.num_symbols, results),
                         rt_vars=rt_vars, constraints=constraints)
    return replaced.remove_unused_symbols()


def _substituted(am: AffineMap | None, repl, memo) -> AffineMap | None:
    if am is None or am.num_symbols == 0:
        return am
    return AffineMap(am.num_dims, am.num_symbols,
                     tuple(substitute(r, None, repl[:am.num_symbols], memo) for r in am.results))


def _known_value(var: RTVar, m: IndexingMap) -> AffineExpr | None:
    hlo = var.hlo
    if not isinstance(hlo, HloInstruction) or not isinstance(hlo.shape, ArrayShape):
        return None
    read = var.map.results if var.map is not None else ()
    if len(read) != hlo.shape.rank:
        return None
    lo, hi = var.feasible_values.lower, var.feasible_values.upper
    if hlo.opcode == "constant" and hlo.shape.element_type.is_integer:
        literal = hlo.attr("literal", None)
        if not isinstance(literal, Literal) or not all(isinstance(e, Constant) for e in read):
            return None
        flat = 0
        for e, n in zip(read, hlo.shape.dims):
            flat = flat * n + e.value
        if not 0 <= flat < len(literal.values):
            return None
        return Constant(min(max(int(literal.values[flat]), lo), hi))
    if hlo.opcode == "iota":
        e = read[hlo.attr("iota_dimension")]
        bounds = _bounds(e, m)
        if bounds is not None and lo <= bounds.lower and bounds.upper <= hi:
            return e
    return None


def _bounds(e: AffineExpr, m: IndexingMap) -> Interval | None:
    """The values of a variable or constant over ``m``'s domain (None for anything else)."""
    if isinstance(e, Constant):
        return Interval(e.value, e.value)
    if isinstance(e, DimExpr):
        return m.dim_bounds[e.index]
    if isinstance(e, SymbolExpr) and e.index < m.num_range_vars:
        return m.range_bounds[e.index]
    return None
