"""How large a module the reference evaluator agrees to run.

The evaluator materializes every instruction's result as a NumPy array, so a module whose
shapes are huge (``f32[1099511627776]``, as hostile or mistyped input has them) must be refused
up front with a clear error rather than make NumPy try to allocate terabytes.  The limit is on
the total number of elements of all instruction results in the module (every computation,
every tuple leaf): ``DEFAULT_MAX_ELEMENTS`` (2**31) unless the environment variable
``FUSION_EVAL_MAX_ELEMENTS`` sets another (a non-negative integer).

>>> from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
>>> from fusion.ir.shape import ArrayShape
>>> p = HloInstruction("p", "parameter", ArrayShape("f32", (2**40,)), (), (("parameter_number", 0),))
>>> m = HloModule("m", (HloComputation("e", (p,), "p", is_entry=True),), "e")
>>> check_module_size(m)
Traceback (most recent call last):
  ...
fusion.errors.EvaluationError: parameter %p: module m is too large to evaluate: its instructions hold 1099511627776 elements, over the limit of 2147483648 elements (the largest is %p, f32[1099511627776]); set FUSION_EVAL_MAX_ELEMENTS to change the limit
>>> check_module_size(m, limit=2**41) is None
True
"""
from __future__ import annotations

import os

from fusion.errors import EvaluationError
from fusion.evaluator.failures import op_error
from fusion.ir.hlo_module import HloModule
from fusion.ir.shape import ArrayShape, flatten_shape

DEFAULT_MAX_ELEMENTS = 2**31
ENV_VAR = "FUSION_EVAL_MAX_ELEMENTS"


def max_elements() -> int:
    """The limit: ``FUSION_EVAL_MAX_ELEMENTS`` when set, else ``DEFAULT_MAX_ELEMENTS``."""
    text = os.environ.get(ENV_VAR, "").strip()
    if not text:
        return DEFAULT_MAX_ELEMENTS
    if not text.isdigit():
        raise EvaluationError(f"{ENV_VAR}={text!r} is not a non-negative integer",
                              where=ENV_VAR, expected="a number of elements, e.g. 2147483648")
    return int(text)


def check_module_size(module: HloModule, limit: int | None = None) -> None:
    """Raise ``EvaluationError`` (at the largest instruction) when the total number of
    elements of the module's instruction results exceeds ``limit`` (default: ``max_elements()``)."""
    limit = max_elements() if limit is None else limit
    total = 0
    largest, largest_size = None, -1
    for comp in module.computations:
        for instr in comp.instructions:
            size = sum(leaf.num_elements for leaf in flatten_shape(instr.shape)
                       if isinstance(leaf, ArrayShape))
            total += size
            if size > largest_size:
                largest, largest_size = instr, size
    if total > limit and largest is not None:
        raise op_error(largest, f"module {module.name} is too large to evaluate: its instructions "
                       f"hold {total} elements, over the limit of {limit} elements (the largest "
                       f"is %{largest.name}, {largest.shape}); set {ENV_VAR} to change the limit")
