"""Convolution as an implicit GEMM: ``driver`` (the spec from the fusion, compile) and
``kernel`` (the template, on the dot template's tiling).
"""
