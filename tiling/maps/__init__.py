"""The indexing-map algebra (XLA's ``xla/hlo/analysis/indexing_map*``): affine expressions and
maps, intervals, ``IndexingMap`` with its simplifiers and transforms, and its text form
(``parser``, ``printer``).
"""
