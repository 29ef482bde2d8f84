"""Affine expressions, indexing maps, indexing analysis, layouts and tile propagation.

The tiling choice is split in two: ``tiling.symbolic`` (the mechanism, XLA's symbolic tile
analysis) and ``tiling.policy`` (the limits, legality, costs and ``choose_tiling``).

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
