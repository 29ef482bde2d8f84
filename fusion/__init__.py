"""The HLO front end: IR, text, analysis, shape inference and verifier, the reference evaluator,
module rewrites and reverse-mode differentiation.  (The fusion *pass* is ``tiling.fusion_pass``.)

Public entry points (imported lazily so that ``import fusion`` stays cheap)::

    module = fusion.parse_hlo(text)
    text = fusion.print_hlo(module)
    outputs = fusion.evaluate(module, *numpy_arrays)

Its own modules are the base every folder uses: ``errors`` (every user-facing error),
``opcodes`` (every opcode and its traits), ``logs``, ``rule_tables``, ``gc_pause``.
Folders, in import order (each imports only the base and the folders listed before it;
``tests/test_import_graph.py`` checks it):

* ``ir/``: the HLO IR as frozen dataclasses (modules, instructions, shapes, layouts, types);
* ``text/``: HLO text, read and written (lexer, parser, printer, ``backend_config``);
* ``analysis/``: hero, emitter kind, reduction kind, partitioner, library calls;
* ``shapes/``: shape inference (one rule per op) and the verifier;
* ``evaluator/``: the NumPy reference evaluator, and ``.npz`` inputs and outputs;
* ``transforms/``: canonicalization and complex expansion;
* ``autodiff/``: reverse-mode differentiation (``vjp``).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "parse_hlo": "fusion.text.parser",
    "print_hlo": "fusion.text.printer",
    "verify_module": "fusion.shapes.verifier",
    "evaluate": "fusion.evaluator",
    "HloModule": "fusion.ir.hlo_module",
    "HloComputation": "fusion.ir.hlo_module",
    "HloInstruction": "fusion.ir.hlo_module",
    "ArrayShape": "fusion.ir.shape",
    "TupleShape": "fusion.ir.shape",
    "Layout": "fusion.ir.layout",
    "Tile": "fusion.ir.layout",
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
