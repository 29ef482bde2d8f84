"""The text form of affine maps and indexing maps, read back: the public entry points.

``parse_indexing_map`` is ``IndexingMap.parse``; the grammar (one-line and the seed's
multi-line form, ``UNDEFINED``, ``KNOWN EMPTY``, the accepted spellings of the operators) is
in ``indexing_map_parser``, below ``indexing_map``; printing is ``indexing_map_printer``.

>>> m = parse_indexing_map(
...     "(d0, d1)[s0]{rt0} -> (d1, s0 + rt0), domain: d0 in [0, 9], d1 in [0, 19], "
...     "s0 in [0, 255], rt0 in [0, 3], d0 mod 2 in [0, 0]")
>>> m.num_range_vars, m.num_rt_vars, str(m.constraints[0][0])
(1, 1, 'd0 mod 2')
>>> str(parse_affine_map("(d0, d1) -> (d0 + d1 / 16, d1 % 16)"))
'(d0, d1) -> (d0 + d1 floordiv 16, d1 mod 16)'
"""
from __future__ import annotations

from fusion.errors import IndexingMapParseError  # defined there with every user error; re-exported here
from tiling.indexing_map import IndexingMap
from tiling.indexing_map_parser import parse_affine_map

__all__ = ["IndexingMapParseError", "parse_affine_map", "parse_indexing_map"]


def parse_indexing_map(text: str) -> IndexingMap:
    """Parse the one-line or multi-line text form.  Raises ``IndexingMapParseError``."""
    return IndexingMap.parse(text)
