"""Attention (two dots and the normalization between them) as one kernel: ``driver`` (the
pattern from the fusion, compile), ``kernel`` (the template), ``tiling`` (block sizes).
"""
