"""Ragged dots (a mixture of experts' grouped matmuls) as grouped GEMMs: the plan, the
template and its compile, in ``kernel``.
"""
