"""Affine expressions, indexing maps, indexing analysis, layouts and tile propagation.

Depends on ``fusion`` only; never imports torch or triton.
"""
