"""Rules that call computations: ``async-start`` (and its ``async-update``, ``async-done``),
``call``, ``conditional``, ``fusion``, ``map``, ``while``.

A ``conditional`` with an s32 branch index out of range runs the last branch, as XLA does.

>>> _branch_index(np.array(7, np.int32), 3), _branch_index(np.array(-1, np.int32), 3)
(2, 2)
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from fusion.errors import EvaluationError
from fusion.evaluator.failures import op_error
from fusion.evaluator.numerics import numpy_dtype


def eval_async_start(ev: Any, instr: Any, args: list) -> Any:
    """``((args...), the wrapped computation's result, context...)``: the context is the
    runtime's (zeros here); only async-done reads the result."""
    context = tuple(np.zeros(s.dims, numpy_dtype(s)) for s in instr.shape.elements[2:])
    return (tuple(args), ev.call(instr.attr("calls"), args, caller=instr), *context)


def eval_async_update(ev: Any, instr: Any, args: list) -> Any:
    return args[0]


def eval_async_done(ev: Any, instr: Any, args: list) -> Any:
    return args[0][1]


def eval_call(ev: Any, instr: Any, args: list) -> Any:
    return ev.call(instr.attr("to_apply"), args, caller=instr)


def eval_fusion(ev: Any, instr: Any, args: list) -> Any:
    return ev.call(instr.attr("calls"), args, caller=instr)


def _branch_index(index: np.ndarray, branch_count: int) -> int:
    value = int(np.asarray(index).reshape(()))
    return value if 0 <= value < branch_count else branch_count - 1


def eval_conditional(ev: Any, instr: Any, args: list) -> Any:
    selector = args[0]
    if instr.has_attr("branch_computations"):
        branches = tuple(instr.attr("branch_computations"))
        if len(branches) != len(args) - 1:
            raise op_error(instr, f"{len(branches)} branches but {len(args) - 1} branch operands")
        if selector.dtype == np.bool_:
            # A pred selector with branch_computations: true runs branch 0, false branch 1.
            chosen = 0 if bool(selector) else 1
        else:
            chosen = _branch_index(selector, len(branches))
        return ev.call(branches[chosen], [args[1 + chosen]], caller=instr)
    if len(args) != 3:
        raise op_error(instr, f"pred conditional takes 3 operands, got {len(args)}")
    if bool(np.asarray(selector).reshape(())):
        return ev.call(instr.attr("true_computation"), [args[1]], caller=instr)
    return ev.call(instr.attr("false_computation"), [args[2]], caller=instr)


def eval_map(ev: Any, instr: Any, args: list) -> np.ndarray:
    results = ev.call_scalar(instr.attr("to_apply"), args, caller=instr)
    return results[0]


def check_iteration_limit(limit: int | None) -> None:
    """``max_while_iterations`` must be None or a non-negative int.

    >>> check_iteration_limit(-1)
    Traceback (most recent call last):
    ...
    fusion.errors.EvaluationError: max_while_iterations: must be None or an integer >= 0, got -1
    """
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 0):
        raise EvaluationError(f"must be None or an integer >= 0, got {limit!r}",
                              where="max_while_iterations")


def while_limit_message(limit: int) -> str:
    """What a while loop stopped by ``max_while_iterations`` says (evaluator and host alike)."""
    return (f"while loop still running after {limit} iteration(s), the limit set by "
            f"--max-iterations / max_while_iterations={limit}")


def eval_while(ev: Any, instr: Any, args: list) -> Any:
    if len(args) != 1:
        raise op_error(instr, f"while takes one operand, got {len(args)}")
    state = args[0]
    condition = instr.attr("condition")
    body = instr.attr("body")
    limit = ev.max_while_iterations
    done = 0
    while bool(np.asarray(ev.call(condition, [state], caller=instr)).reshape(())):
        if limit is not None and done >= limit:
            raise op_error(instr, while_limit_message(limit))
        state = ev.call(body, [state], caller=instr)
        done += 1
    return state


CONTROL_FLOW_RULES: dict[str, Callable[..., Any]] = {
    "async-done": eval_async_done,
    "async-start": eval_async_start,
    "async-update": eval_async_update,
    "call": eval_call,
    "conditional": eval_conditional,
    "fusion": eval_fusion,
    "map": eval_map,
    "while": eval_while,
}
