"""Indexing through computations (fusions): now ``tiling.indexing_analysis.fusion_indexing``,
inside the package whose entry points use it; its public names are re-exported here."""
from __future__ import annotations

from tiling.indexing_analysis.fusion_indexing import (
    fusion_input_to_output,
    fusion_output_to_input,
    output_to_input_indexing_of_computation,
)

__all__ = [
    "fusion_input_to_output",
    "fusion_output_to_input",
    "output_to_input_indexing_of_computation",
]
