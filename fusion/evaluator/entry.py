"""``evaluate``: run a module's ENTRY computation on NumPy arrays."""
from __future__ import annotations

from typing import Any

import numpy as np

from fusion.errors import EvaluationError
from fusion.evaluator.input_binding import bind_value
from fusion.evaluator.control_flow_ops import check_iteration_limit
from fusion.evaluator.interpreter import Evaluator, flatten_value
from fusion.evaluator.size_limit import check_module_size
from fusion.ir.hlo_module import HloModule


def evaluate(module: HloModule, *arrays: Any,
             max_while_iterations: int | None = None) -> tuple[np.ndarray, ...]:
    """The ENTRY result for ``arrays`` (one per ENTRY parameter), flattened depth first.

    A ``while`` loop runs until its condition is false, as in XLA; ``max_while_iterations``
    (default ``None``: unbounded) stops any loop after that many iterations with an
    ``EvaluationError`` naming the while instruction.

    Narrow floats (f16, bf16, f8) are computed in f32 and rounded per op, as XLA does.
    Raises ``EvaluationError`` naming the parameter or the instruction on bad input, and on a
    module too large to evaluate (see ``fusion.evaluator.size_limit``).

    >>> import fusion
    >>> m = fusion.parse_hlo("HloModule m\\nENTRY e {\\n  p = f32[2] parameter(0)\\n"
    ...                      "  ROOT n = f32[2] negate(p)\\n}\\n")
    >>> evaluate(m, np.array([1.5, -2.0], np.float32))[0].tolist()
    [-1.5, 2.0]
    """
    check_iteration_limit(max_while_iterations)
    if not module.has_computation(module.entry_name):
        raise EvaluationError(f"module has no ENTRY computation {module.entry_name!r}",
                              where=f"module {module.name}")
    check_module_size(module)
    entry = module.entry
    parameters = entry.parameters
    if len(arrays) != len(parameters):
        raise EvaluationError(
            f"ENTRY {entry.name} takes {len(parameters)} arguments, got {len(arrays)}",
            where=f"computation {entry.name}",
        )
    bound = [
        bind_value(a, p.shape, f"parameter {i} (%{p.name})")
        for i, (a, p) in enumerate(zip(arrays, parameters))
    ]
    result = Evaluator(module, max_while_iterations).call(entry.name, bound)
    return tuple(np.array(leaf, order="C") for leaf in flatten_value(result))
