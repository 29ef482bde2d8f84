"""HLO indexing analysis: for an instruction, the indexing maps between its output and its
operands (seed ``indexing_analysis.ja.txt``), for every op and through fusions.

``output_to_input_indexing(instr, module)`` gives one ``frozenset`` of maps per operand (from
the output to that operand); ``input_to_output_indexing(instr, k, module)`` the maps from
operand ``k`` to the output.  Maps are simplified; equal maps are deduplicated; an operand
that is not read gets an empty set; an op without a known map gets ``{IndexingMap.undefined()}``.

The instruction's operand shapes come from ``module`` (an ``HloModule``, or the
``HloComputation`` holding ``instr``), or from ``operand_shapes``.  A fusion needs the module
to reach its fused computation.

The seed's broadcast ``f32[20] -> f32[10,20,30], dimensions={1}``:

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... ENTRY e {
...   p0 = f32[20] parameter(0)
...   ROOT bc0 = f32[10,20,30] broadcast(p0), dimensions={1}
... }''')
>>> [str(x) for x in output_to_input_indexing(m.entry.root, m)[0]]
['(d0, d1, d2) -> (d1), domain: d0 in [0, 9], d1 in [0, 19], d2 in [0, 29]']
>>> [str(x) for x in input_to_output_indexing(m.entry.root, 0, m)]
['(d0)[s0, s1] -> (s0, d0, s1), domain: d0 in [0, 19], s0 in [0, 9], s1 in [0, 29]']
"""
from __future__ import annotations

from tiling.indexing_analysis.api import (
    input_to_output_indexing,
    input_to_output_indexing_per_output,
    output_to_input_indexing,
)

__all__ = [
    "input_to_output_indexing",
    "input_to_output_indexing_per_output",
    "output_to_input_indexing",
]
