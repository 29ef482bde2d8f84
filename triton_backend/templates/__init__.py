"""Kernel templates for the fusions the index-expression emitter does not cover, one folder per
template, each with its driver half (``driver``: the spec read from the fusion, compile)
beside its kernel (``kernel``) and block sizes (``tiling``): ``dot`` (which ``attention`` and
``conv`` build on), ``attention``, ``conv``, ``ragged_dot`` (grouped GEMMs), ``scatter``,
``select_and_scatter``, ``sort``.
"""
