"""Shape inference, one rule per op (``rules_*``, registered in ``inference``), and the verifier
that checks a parsed module against it.
"""
