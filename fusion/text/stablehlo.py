"""StableHLO text in, HLO text out: what ``jax.jit(f).lower(x).as_text()`` prints by default.

A JAX user's first try is ``lowered.as_text()``, which is StableHLO (MLIR: ``module @jit_f``,
``func.func public @main``, ``stablehlo.tanh``), not HLO.  XLA converts it to HLO with its own
converter, the one ``as_text(dialect="hlo")`` runs; so does this module, through jaxlib when it
is installed (jax is this project's optional extra, never a hard dependency).  The HLO is then
exactly what ``as_text(dialect="hlo")`` prints, and error locations name its lines.  Without
jaxlib, or for MLIR XLA cannot read, the error says what the text is and what to do.

>>> looks_like_stablehlo('module @jit_f {\\n  func.func public @main() {')
True
>>> looks_like_stablehlo('HloModule m\\nENTRY e { ROOT c = s32[] constant(7) }')
False
>>> looks_like_stablehlo('module {\\n  ROOT c = s32[] constant(7)\\n}')  # an HLO computation
False
"""
from __future__ import annotations

import re

from fusion.errors import HloParseError

# The start of an MLIR module, after comments: ``module @name attributes {...} {`` (an HLO
# computation may be named ``module`` too: the text must also hold an MLIR function or op),
# or a bare function.
_MLIR_START = re.compile(r"\A(?:\s*(?://[^\n]*|#loc[^\n]*)\n)*\s*(?:module\s*[@{a]|func\.func\b)")
_MLIR_BODY = re.compile(r"\bfunc\.func\b|\b(?:stablehlo|mhlo|chlo)\.[a-z]")
_MLIR_LOCATION = re.compile(r"-:(\d+):(\d+): error: ([^\n]*)")
_HOW = ("print HLO instead with jax.jit(f).lower(*args).as_text(dialect='hlo') (or "
        ".compile().as_text() for XLA's optimized module)")


def looks_like_stablehlo(text: str) -> bool:
    """Whether ``text`` is an MLIR module (StableHLO/MHLO) rather than HLO text."""
    return _MLIR_START.match(text) is not None and _MLIR_BODY.search(text) is not None


def _converter():
    """XLA's MLIR-to-HLO converter from jaxlib, or None without jaxlib."""
    try:
        from jaxlib import _jax  # noqa: PLC0415 - optional, and slow to import
    except ImportError:
        return None
    return getattr(getattr(_jax, "mlir", None), "mlir_module_to_xla_computation", None)


def stablehlo_to_hlo(text: str) -> str:
    """The HLO text of the StableHLO module ``text`` (module docstring); ``HloParseError``
    when jaxlib is missing or XLA cannot read it."""
    convert = _converter()
    if convert is None:
        raise HloParseError("this is StableHLO (MLIR) text, not HLO; converting it needs jax "
                            f"installed (pip install 'hlo-triton-fusion[jax]'), or {_HOW}",
                            line=1, column=1)
    try:
        computation = convert(text, use_tuple_args=False, return_tuple=False)
    except Exception as err:  # noqa: BLE001 - jaxlib's errors are RuntimeErrors of its own
        found = _MLIR_LOCATION.search(str(err))
        message = found.group(3) if found else str(err).strip().splitlines()[0]
        raise HloParseError(f"XLA could not read this StableHLO (MLIR) text: {message}; {_HOW}",
                            line=int(found.group(1)) if found else 1,
                            column=int(found.group(2)) if found else 1) from None
    return computation.as_hlo_text()


__all__ = ["looks_like_stablehlo", "stablehlo_to_hlo"]
