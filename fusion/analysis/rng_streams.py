"""The random stream an ``rng`` op draws from: XLA's ``RngExpander`` decisions, reproducible.

XLA leaves ``rng``'s values to the implementation: only their distribution is specified
(``rng_uniform`` over ``[a, b)``, ``rng_normal`` with mean ``a`` and deviation ``b``).  Its CPU
and GPU compilers expand each ``rng`` (``xla/service/rng_expander.cc``) into a call computing
Philox4x32 bits of ``(key, state)`` (``xla/hlo/builder/lib/prng.cc``) and turning them into the
distribution, where:

* ``state`` is ``rng-get-and-update-state(), delta=D``: a 128-bit counter (``u64[2]``, low word
  first) that starts at ``0x7012395`` in a fresh executable and that every run of the
  instruction advances by ``D``, the number of 32-bit words the op draws (XLA:CPU keeps one
  counter per instruction; so does this project);
* ``key`` is a 64-bit constant XLA draws from a process-wide ``mt19937_64``, so the same
  program gives other values in another process.  Here the key is a hash of the op's name
  instead: reproducible from run to run and process to process, and distinct for every op.

``f16`` and ``bf16`` ops draw as ``f32`` and round (``ConvertSmallFpRngToF32Rng``).  The types
XLA's expander computes are the only ones accepted: floats for both distributions, 32- and
64-bit integers for ``rng_uniform``.

>>> from fusion.ir.shape import ArrayShape
>>> state_delta(ArrayShape("f64", (3, 4))), state_delta(ArrayShape("bf16", (5,)))
(24, 5)
>>> advanced((INITIAL_STATE, 0), 2**64 - INITIAL_STATE)
(0, 1)
>>> rng_key("rng_uniform.2") == rng_key("rng_uniform.2") != rng_key("rng_uniform.3")
True
"""
from __future__ import annotations

import hashlib

from fusion.ir.shape import ArrayShape

#: The counter every ``rng-get-and-update-state`` starts from (XLA's ``kRngStateInitialValue``).
INITIAL_STATE = 0x7012395
#: The element types each distribution is computed in (XLA's expander refuses the others).
DISTRIBUTION_TYPES = {
    "rng_normal": ("bf16", "f16", "f32", "f64"),
    "rng_uniform": ("bf16", "f16", "f32", "f64", "s32", "s64", "u32", "u64"),
}
_WORD = 2**64


def computed_type(dtype: str) -> str:
    """The type the generator computes a ``dtype`` draw in: ``f32`` for the 16-bit floats."""
    return "f32" if dtype in ("bf16", "f16") else dtype


def state_delta(shape: ArrayShape) -> int:
    """How far one draw of ``shape`` advances its state: its 32-bit words (XLA's
    ``GetNumberOf32bitUnits`` of the type it computes in)."""
    words = 2 if computed_type(shape.dtype) in ("f64", "s64", "u64") else 1
    return shape.num_elements * words


def advanced(state: tuple[int, int], delta: int) -> tuple[int, int]:
    """The 128-bit counter ``(low, high)`` plus ``delta``, with the carry (wrapping)."""
    low = state[0] + delta
    return low % _WORD, (state[1] + low // _WORD) % _WORD


def rng_key(name: str) -> int:
    """The ``u64`` Philox key of the ``rng`` op named ``name`` (module docstring)."""
    return int.from_bytes(hashlib.blake2b(name.encode(), digest_size=8).digest(), "little")


__all__ = ["DISTRIBUTION_TYPES", "INITIAL_STATE", "advanced", "computed_type", "rng_key",
           "state_delta"]
