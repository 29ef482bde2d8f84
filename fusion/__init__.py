"""The HLO front end: IR, parser, printer, verifier, reference evaluator, fusion analysis.

Public entry points (imported lazily so that ``import fusion`` stays cheap)::

    module = fusion.parse_hlo(text)
    text = fusion.print_hlo(module)
    outputs = fusion.evaluate(module, *numpy_arrays)
"""
from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "parse_hlo": "fusion.parser",
    "print_hlo": "fusion.printer",
    "verify_module": "fusion.verifier",
    "evaluate": "fusion.evaluator",
    "HloModule": "fusion.hlo_module",
    "HloComputation": "fusion.hlo_module",
    "HloInstruction": "fusion.hlo_module",
    "ArrayShape": "fusion.shape",
    "TupleShape": "fusion.shape",
    "Layout": "fusion.layout",
    "Tile": "fusion.layout",
    "FusionCompilerError": "fusion.errors",
    "HloParseError": "fusion.errors",
    "HloVerifyError": "fusion.errors",
    "UnsupportedOpError": "fusion.errors",
    "EvaluationError": "fusion.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'fusion' has no attribute {name!r}")
