"""Indexing maps, layouts, tile propagation, the tiling choice, and the fusion pass.

Depends on ``fusion`` only; never imports torch or triton.  Folders, in import order (each
imports only the folders listed before it; ``tests/test_import_graph.py`` checks it):

* ``maps/``: the indexing-map algebra (affine expressions, ``IndexingMap``, simplifiers, text);
* ``layouts/``: XLA's tiled layouts as index maps, host-side packing;
* ``indexing_analysis/``: the indexing maps of every op, composed through fusions;
* ``symbolic/``: the mechanism of tiling, XLA's symbolic tile analysis;
* ``policy/``: the choice of tiling (limits, legality, costs, ``choose_tiling``);
* ``fusion_pass/``: the fusion pass for unfused modules (``fuse_module``), as a GPU compiler
  fuses: a normalization with its reductions, a matmul with its epilogue, attention.
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
