"""Dot fusions (prologues and an elementwise epilogue around one ``tl.dot``): ``driver`` (the spec
and numerics from the fusion, compile), ``kernel`` (the template), ``gemm_kernel`` (what it
shares with the convolution template: program ids, K loop, stores, file), ``tiling`` (block
sizes, shared memory, grid).
"""
