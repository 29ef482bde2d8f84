"""Dot fusions (prologues and an elementwise epilogue around one ``tl.dot``): ``driver`` (the spec
and numerics from the fusion, compile), ``kernel`` (the template), ``tiling`` (block sizes,
shared memory, grid).
"""
