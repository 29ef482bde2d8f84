"""Scatter fusions: the plan, the template and its compile, in ``kernel``.
"""
