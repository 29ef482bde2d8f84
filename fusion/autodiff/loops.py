"""Loops a VJP rule writes: a counter stepping from a start to a limit around a body.

>>> from fusion.autodiff.graph_builder import ComputationTable
>>> from fusion.ir.shape import ArrayShape, TupleShape
>>> b = GraphBuilder(ComputationTable({}))
>>> state = TupleShape((ArrayShape("s32", ()), ArrayShape("f32", (2,))))
>>> cond, body = counter_loop(b, "double", state, 1, 3, "LT",
...                           lambda inner, p, i: [inner.add(inner.get_tuple_element(p, 1),
...                                                          inner.get_tuple_element(p, 1))])
>>> cond, body
('double_condition', 'double_body')
"""
from __future__ import annotations

from fusion.autodiff.dead_code import tidy
from fusion.autodiff.graph_builder import GraphBuilder
from fusion.ir.hlo_module import HloComputation
from fusion.ir.shape import TupleShape


def counter_loop(b: GraphBuilder, name: str, state: TupleShape, step: int, limit: int,
                  direction: str, body_of) -> tuple[str, str]:
    """The computations of a loop over ``state`` whose element 0 counts by ``step`` while
    ``counter <direction> limit``; ``body_of(inner, state, counter)`` gives the new values
    of the other elements."""
    cond = GraphBuilder(b.table)
    counter = cond.get_tuple_element(cond.parameter(0, state, "state"), 0)
    test = cond.compare(counter, cond.scalar(limit, "s32"), direction)
    condition = b.table.add(HloComputation(b.table.fresh_name(name + "_condition"),
                                           tuple(cond.instructions), test))
    inner = GraphBuilder(b.table)
    param = inner.parameter(0, state, "state")
    counter = inner.get_tuple_element(param, 0)
    rest = body_of(inner, param, counter)
    root = inner.tuple([inner.add(counter, inner.scalar(step, "s32"))] + rest)
    body = b.table.add(tidy(HloComputation(b.table.fresh_name(name + "_body"),
                                           tuple(inner.instructions), root)))
    return condition, body


__all__ = ["counter_loop"]
