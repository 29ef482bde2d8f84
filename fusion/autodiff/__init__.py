"""Reverse-mode automatic differentiation of HLO modules.

``vjp(module, wrt=None)`` derives the backward module of a forward module: parameters are
the forward's parameters followed by one cotangent per forward output, the result a tuple of
one gradient per differentiated parameter (every floating-point or complex parameter by
default; complex cotangents in JAX's convention).  The backward module is plain HLO: it
verifies, evaluates, prints and compiles like any other.

>>> import numpy as np
>>> from fusion.evaluator import evaluate
>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... ENTRY e {
...   x = f32[2] parameter(0)
...   ROOT y = f32[2] sine(x)
... }''')
>>> x, ct = np.float32([0.0, 1.0]), np.float32([1.0, 2.0])
>>> np.allclose(evaluate(vjp(m), x, ct)[0], 2 * np.cos(1.0) * np.float32([0, 1]) + [1, 0])
True
"""
from __future__ import annotations

from fusion.autodiff.vjp_module import default_wrt, vjp

__all__ = ["default_wrt", "vjp"]
