"""The NumPy reference evaluator: runs an HLO module with XLA's semantics.

``evaluate(module, *arrays)`` returns the ENTRY result as a tuple of arrays (a tuple result is
flattened depth first).

>>> from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
>>> from fusion.ir.shape import ArrayShape
>>> s = ArrayShape("s32", (3,))
>>> entry = HloComputation("main", (
...     HloInstruction("p", "parameter", s, (), (("parameter_number", 0),)),
...     HloInstruction("r", "add", s, ("p", "p"))), "r", is_entry=True)
>>> evaluate(HloModule("m", (entry,), "main"), np.array([1, 2, 3], np.int32))[0].tolist()
[2, 4, 6]
"""
from __future__ import annotations

import numpy as np

from fusion.evaluator.entry import evaluate

__all__ = ["evaluate"]
