"""Affine expressions, indexing maps, indexing analysis, layouts and tile propagation.

Depends on ``fusion`` only; never imports torch or triton.
"""

_LAZY = {
    "input_to_output_indexing": "tiling.indexing_analysis",
    "output_to_input_indexing": "tiling.indexing_analysis",
}


def __getattr__(name: str):
    """Import the indexing analysis only when one of its entry points is asked for."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'tiling' has no attribute {name!r}")
