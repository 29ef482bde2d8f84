"""Reference rule of ``rng-bit-generator``: the bits XLA's ``RngBitGeneratorExpander`` makes.

The op is a pure function of its state (a ``u64`` vector whose first element is the key):
``(new_state, bits) = rng-bit-generator(state), algorithm=...``.  XLA defines the bits by the
expander it runs on CPU and GPU (``xla/hlo/builder/lib/prng.cc``), and JAX's ``rbg`` and
``unsafe_rbg`` keys depend on them, so they are computed here exactly as it computes them:

* ``rng_philox`` (and ``rng_default``, which XLA's CPU and GPU compilers expand as Philox):
  Philox4x32 with 10 rounds, keyed by ``state[0]``, counting from the 128-bit counter
  ``(state[1], state[0])`` for a ``u64[2]`` state (``(state[1], state[2])`` for a longer
  one) by one per 4 words; word ``4 i + k`` of the flattened result is output ``k`` of
  counter ``i``.  64-bit results pair words ``(0, 1)`` and ``(2, 3)`` (low word first).
* ``rng_three_fry``: Threefry2x32 with 20 rounds, keyed by ``state[0]``, counting from
  ``state[1]``.  The result is split in halves along its first even dim (else its longest):
  the element at index ``c`` along it is output ``c % 2`` of the counter of its index in the
  halved shape (row-major); 64-bit results are ``x0 | x1 << 32`` of each element's counter.

Results narrower than 32 bits keep the low bits of the 32-bit ones.  The new state keeps the
key and advances the counter by the counters used.

>>> state = np.array([42, 0], np.uint64)
>>> new, bits = rng_bits(state, "rng_philox", (2, 3), np.dtype(np.uint32))
>>> new.tolist(), bits.shape, bits.dtype.name
([42, 2], (2, 3), 'uint32')
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from fusion.evaluator.failures import op_error
from fusion.evaluator.numerics import numpy_dtype
from fusion.ir.hlo_module import HloInstruction

#: The algorithm XLA's CPU and GPU compilers give ``rng_default`` (``RngBitGeneratorExpander``).
DEFAULT_ALGORITHM = "rng_philox"
ALGORITHMS = ("rng_default", "rng_philox", "rng_three_fry")

PHILOX_W32 = (0x9E3779B9, 0xBB67AE85)  # the key schedule's increments
PHILOX_M4X32 = (0xD2511F53, 0xCD9E8D57)  # the round multipliers
PHILOX_ROUNDS = 10
THREEFRY_PARITY = 0x1BD11BDA
THREEFRY_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_MASK32 = np.uint64(0xFFFFFFFF)


def _u32(x: Any) -> np.ndarray:
    return np.asarray(x, np.uint64) & _MASK32


def _words(value: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A u64 as its (low, high) u32 words (held in u64 arrays)."""
    return _u32(value), _u32(value >> np.uint64(32))


def philox4x32(counter: list[np.ndarray], key: tuple[Any, Any]) -> list[np.ndarray]:
    """Philox4x32-10 of the four counter words (u32 values in u64 arrays) under ``key``."""
    x = [_u32(w) for w in counter]
    k0, k1 = _u32(key[0]), _u32(key[1])
    for _ in range(PHILOX_ROUNDS):
        p0 = x[0] * np.uint64(PHILOX_M4X32[0])
        p1 = x[2] * np.uint64(PHILOX_M4X32[1])
        x = [(p1 >> np.uint64(32)) ^ x[1] ^ k0, _u32(p1),
             (p0 >> np.uint64(32)) ^ x[3] ^ k1, _u32(p0)]
        k0, k1 = _u32(k0 + np.uint64(PHILOX_W32[0])), _u32(k1 + np.uint64(PHILOX_W32[1]))
    return x


def _rotl(v: np.ndarray, distance: int) -> np.ndarray:
    return _u32((v << np.uint64(distance)) | (v >> np.uint64(32 - distance)))


def threefry2x32(counter: tuple[np.ndarray, np.ndarray], key: tuple[Any, Any]
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Threefry2x32-20 of the two counter words (u32 values in u64 arrays) under ``key``."""
    ks = (_u32(key[0]), _u32(key[1]), _u32(np.uint64(THREEFRY_PARITY) ^ _u32(key[0]) ^
                                           _u32(key[1])))
    x0, x1 = _u32(counter[0] + ks[0]), _u32(counter[1] + ks[1])
    for block in range(5):
        for rotation in THREEFRY_ROTATIONS[block % 2]:
            x0 = _u32(x0 + x1)
            x1 = _rotl(x1, rotation) ^ x0
        x0 = _u32(x0 + ks[(block + 1) % 3])
        x1 = _u32(x1 + ks[(block + 2) % 3] + np.uint64(block + 1))
    return x0, x1


def _philox(state: np.ndarray, dims: tuple[int, ...], bits: int
            ) -> tuple[np.ndarray, np.ndarray]:
    n = math.prod(dims)
    words = n * (2 if bits == 64 else 1)
    counters = -(-words // 4)
    low, high = (state[1], state[0]) if state.size < 3 else (state[1], state[2])
    index = np.arange(counters, dtype=np.uint64)
    with np.errstate(over="ignore"):
        counter_low = low + index
        counter_high = np.where(counter_low < low, high + np.uint64(1), high)
        new_low = low + np.uint64(counters)
        new_high = high + np.uint64(1) if new_low < low else high
    out = philox4x32([*_words(counter_low), *_words(counter_high)], _words(state[0]))
    if bits == 64:
        pairs = [out[0] | (out[1] << np.uint64(32)), out[2] | (out[3] << np.uint64(32))]
        flat = np.stack(pairs, axis=1).reshape(-1)[:n]
    else:
        flat = np.stack(out, axis=1).reshape(-1)[:n]
    tail = [new_low] if state.size < 3 else [new_low, new_high]
    new_state = np.concatenate([state[:1], np.array(tail, np.uint64)])
    return new_state, flat.reshape(dims)


def halving_dim(dims: tuple[int, ...]) -> int:
    """The dim Threefry splits in halves: the first of even extent, else the first longest."""
    even = [d for d, extent in enumerate(dims) if extent % 2 == 0]
    return even[0] if even else max(range(len(dims)), key=lambda d: (dims[d], -d))


def _threefry(state: np.ndarray, dims: tuple[int, ...], bits: int
              ) -> tuple[np.ndarray, np.ndarray]:
    key = _words(state[0])
    start = state[1]
    with np.errstate(over="ignore"):
        if bits == 64:
            x0, x1 = threefry2x32(_words(start + np.arange(math.prod(dims), dtype=np.uint64)),
                                  key)
            return (np.array([state[0], start + np.uint64(math.prod(dims))], np.uint64),
                    (x0 | (x1 << np.uint64(32))).reshape(dims))
        if not dims:
            x0, _ = threefry2x32(_words(np.array([start])), key)
            return np.array([state[0], start + np.uint64(1)], np.uint64), x0.reshape(())
        split = halving_dim(dims)
        half = dims[:split] + (-(-dims[split] // 2),) + dims[split + 1:]
        x0, x1 = threefry2x32(_words(start + np.arange(math.prod(half), dtype=np.uint64)), key)
        pair = np.stack([x0.reshape(half), x1.reshape(half)], axis=split + 1)
        whole = pair.reshape(dims[:split] + (2 * half[split],) + dims[split + 1:])
        new_state = np.array([state[0], start + np.uint64(math.prod(half))], np.uint64)
    return new_state, whole[tuple(slice(0, extent) for extent in dims)]


def rng_bits(state: np.ndarray, algorithm: str, dims: tuple[int, ...], dtype: np.dtype
             ) -> tuple[np.ndarray, np.ndarray]:
    """``(new_state, bits)`` of ``rng-bit-generator(state), algorithm=algorithm`` with a
    ``dtype[dims]`` result (an integer type of 8 to 64 bits)."""
    state = np.asarray(state, np.uint64).reshape(-1)
    bits = dtype.itemsize * 8
    generate = _threefry if algorithm == "rng_three_fry" else _philox
    new_state, words = generate(state, tuple(dims), 64 if bits == 64 else 32)
    if bits < 32:
        words = words & np.uint64((1 << bits) - 1)
    unsigned = np.dtype(f"u{dtype.itemsize}")
    return new_state, words.astype(unsigned).view(dtype)


def eval_rng_bit_generator(ev: Any, instr: HloInstruction, args: list
                           ) -> tuple[np.ndarray, np.ndarray]:
    algorithm = instr.attr("algorithm", "rng_default")
    if algorithm not in ALGORITHMS:
        raise op_error(instr, f"unknown rng algorithm {algorithm!r} (known: "
                              f"{', '.join(ALGORITHMS)})")
    data = instr.shape.elements[1]
    return rng_bits(args[0], algorithm, data.dims, numpy_dtype(data))


RANDOM_RULES = {"rng-bit-generator": eval_rng_bit_generator}

__all__ = ["ALGORITHMS", "DEFAULT_ALGORITHM", "PHILOX_M4X32", "PHILOX_ROUNDS", "PHILOX_W32",
           "RANDOM_RULES", "THREEFRY_PARITY", "THREEFRY_ROTATIONS", "eval_rng_bit_generator",
           "halving_dim", "philox4x32", "rng_bits", "threefry2x32"]
