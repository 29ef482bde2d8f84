"""``rng-bit-generator`` written as the integer ops that compute its bits, as XLA's
``RngBitGeneratorExpander`` writes it before fusion on CPU and GPU.

The bits are a counter-based generator (``fusion.evaluator.random_ops`` defines them, from
XLA's ``prng.cc``): each output word is one of the words Philox4x32-10 or Threefry2x32-20
makes of a counter its index gives, keyed by the state's first element.  XLA computes the
generator once per counter and puts its words in order with a concatenate, a reshape and a
slice; here each element computes its own counter from iotas and selects its word, so every
op (``u32``/``u64`` adds, multiplies, shifts, xors and selects) is elementwise in the output
index.  The fusion pass then fuses the generator into the kernel of whatever reads it (a
dropout mask is computed where it is applied, never stored) with identity indexing maps, and
the kernels need nothing new.  The op's users read a ``tuple`` of the new state and the bits
under its name.  A module without
``rng-bit-generator`` is returned as is; an invalid one is an ``HloVerifyError`` located at
the op.

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... ENTRY e {
...   s = u64[2] parameter(0)
...   r = (u64[2], u32[32]) rng-bit-generator(s), algorithm=rng_default
...   ROOT b = u32[32] get-tuple-element(r), index=1
... }''')
>>> ops = [i.opcode for i in expand_rng_bit_generators(m).entry]
>>> "rng-bit-generator" in ops, ops.count("multiply"), ops[-2:]  # Philox: 2 per round
(False, 20, ['tuple', 'get-tuple-element'])
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from fusion.evaluator.random_ops import (DEFAULT_ALGORITHM, PHILOX_M4X32, PHILOX_ROUNDS,
                                         PHILOX_W32, THREEFRY_PARITY, THREEFRY_ROTATIONS,
                                         halving_dim)
from fusion.ir.attributes import SliceDim
from fusion.ir.element_types import element_type
from fusion.ir.hlo_module import HloInstruction, HloModule
from fusion.ir.instruction_writer import InstructionWriter
from fusion.ir.shape import ArrayShape, TupleShape
from fusion.transforms.op_expansion import expand_ops

Dims = tuple[int, ...]


def expand_rng_bit_generators(module: HloModule) -> HloModule:
    """``module`` with every ``rng-bit-generator`` written as ops (module docstring)."""
    return expand_ops(module, "rng-bit-generator", _write, "rng", writer=GeneratorOps)


def _write(ops: "GeneratorOps", instr: HloInstruction, shapes: tuple, adder) -> None:
    (state,), declared = shapes, instr.shape
    assert isinstance(declared, TupleShape)  # the shape rule checked it
    new_state, bits = ops.generate(instr.operands[0], state.dims[0], declared.elements[1])
    ops.add("tuple", declared, (new_state, bits))


class GeneratorOps(InstructionWriter):
    """The ops one generator becomes, with the few helpers the algorithms need.  Every value
    is over the bits' dims (or a scalar of the state), so the generator is elementwise in the
    output index; constants are made once."""

    def __init__(self, instr: HloInstruction, fresh: Callable[[], str]) -> None:
        super().__init__(instr, fresh)
        self.shapes: dict[str, ArrayShape] = {}
        self.made: dict[tuple, str] = {}

    def add(self, opcode: str, shape, operands: tuple[str, ...], **attrs) -> str:
        name = super().add(opcode, shape, operands, **attrs)
        if isinstance(shape, ArrayShape):
            self.shapes[name] = shape
        return name

    def op(self, opcode: str, *operands: str, **attrs) -> str:
        """An elementwise op, shaped like its first operand (``pred`` for a compare; a
        select like its values)."""
        like = self.shapes[operands[1] if opcode == "select" else operands[0]]
        shape = replace(like, dtype="pred") if opcode == "compare" else like
        return self.add(opcode, shape, operands, **attrs)

    def const(self, value: int, dtype: str, dims: Dims = ()) -> str:
        key = ("constant", value, dtype, dims)
        if key not in self.made:
            scalar = self.scalar(value, dtype)
            self.made[key] = scalar if not dims else self.spread(scalar, dims)
        return self.made[key]

    def spread(self, scalar: str, dims: Dims) -> str:
        if self.shapes[scalar].dims == dims:
            return scalar
        return self.add("broadcast", ArrayShape(self.shapes[scalar].dtype, dims), (scalar,),
                        dimensions=())

    def convert(self, x: str, dtype: str) -> str:
        like = self.shapes[x]
        return x if like.dtype == dtype else self.add("convert", replace(like, dtype=dtype),
                                                      (x,))

    def with_const(self, opcode: str, x: str, value: int, **attrs) -> str:
        """``x opcode value`` (``value`` of ``x``'s type, broadcast to its dims)."""
        like = self.shapes[x]
        return self.op(opcode, x, self.const(value, like.dtype, like.dims), **attrs)

    def element(self, state: str, index: int) -> str:
        """``state[index]`` as a ``u64[]``."""
        one = self.add("slice", ArrayShape("u64", (1,)), (state,),
                       slice=(SliceDim(index, index + 1, 1),))
        return self.add("reshape", ArrayShape("u64", ()), (one,))

    def words(self, x: str) -> tuple[str, str]:
        """A ``u64`` value's (low, high) ``u32`` words."""
        return self.convert(x, "u32"), self.convert(self.with_const("shift-right-logical",
                                                                    x, 32), "u32")

    def joined(self, low: str, high: str) -> str:
        """``low | high << 32`` as ``u64``."""
        return self.op("or", self.convert(low, "u64"),
                       self.with_const("shift-left", self.convert(high, "u64"), 32))

    def linear(self, coordinates: list[str], dims: Dims) -> str:
        """The row-major linear index, in ``dims``, of the ``u64`` ``coordinates``."""
        total, stride = None, 1
        for d in reversed(range(len(dims))):
            if dims[d] > 1:
                term = coordinates[d] if stride == 1 else \
                    self.with_const("multiply", coordinates[d], stride)
                total = term if total is None else self.op("add", total, term)
            stride *= dims[d]
        return self.const(0, "u64", self.shapes[coordinates[0]].dims) if total is None \
            else total

    def coordinates(self, dims: Dims) -> list[str]:
        """An ``u64`` iota along each of ``dims``."""
        return [self.add("iota", ArrayShape("u64", dims), (), iota_dimension=d)
                for d in range(len(dims))]

    def picked(self, index: str, parts: list[str]) -> str:
        """``parts[index]`` element by element (``index``: a ``u64`` below ``len(parts)``)."""
        value = parts[-1]
        for k in reversed(range(len(parts) - 1)):
            value = self.op("select", self.with_const("compare", index, k, direction="EQ"),
                            parts[k], value)
        return value

    def output_index(self, dims: Dims) -> str:
        """The row-major linear index of each element of ``dims`` (a ``u64`` array)."""
        if not dims:
            return self.const(0, "u64")
        return self.linear(self.coordinates(dims), dims)

    # ---- the generators -------------------------------------------------------------------

    def generate(self, state: str, length: int, bits: ArrayShape) -> tuple[str, str]:
        """(new state, the bits as ``bits`` declares them) for the op's algorithm."""
        algorithm = self.instr.attr("algorithm", "rng_default")
        if algorithm == "rng_default":
            algorithm = DEFAULT_ALGORITHM
        size = element_type(bits.dtype).bits
        width = 64 if size == 64 else 32
        generator = self.threefry if algorithm == "rng_three_fry" else self.philox
        new_state, words = generator(state, length, bits.dims, width)
        unsigned = f"u{size}"
        words = self.convert(words, unsigned)  # a narrower type keeps the low bits
        if bits.dtype != unsigned:
            words = self.add("bitcast-convert", replace(self.shapes[words], dtype=bits.dtype),
                             (words,))
        return new_state, words

    def philox(self, state: str, length: int, dims: Dims, width: int) -> tuple[str, str]:
        """(new state, bits) of ``rng-bit-generator``: the counter counts from ``state[1]``
        (low) and ``state[2]`` (high; the key for a ``u64[2]`` state)."""
        key = self.element(state, 0)
        low = self.element(state, 1)
        high = key if length == 2 else self.element(state, 2)
        words = self.philox_words(key, low, high, self.output_index(dims), width)
        count = math.prod(dims) * width // 32
        new_low = self.with_const("add", low, -(-count // 4))
        tail = [new_low]
        if length == 3:
            wrapped = self.op("compare", new_low, low, direction="LT")
            tail.append(self.op("select", wrapped, self.with_const("add", high, 1), high))
        return self.joined_state([key, *tail]), words

    def philox_words(self, key: str, low: str, high: str, index: str, width: int) -> str:
        """Word ``index`` (a ``u64`` array) of the flattened bits Philox makes from the
        128-bit counter ``(low, high)`` (``u64`` scalars) under ``key``: output ``L % 4`` of
        counter ``L // 4`` for 32-bit bits; a 64-bit element ``L`` joins outputs
        ``2 (L % 2)`` and ``2 (L % 2) + 1`` of counter ``L // 2``."""
        dims = self.shapes[index].dims
        per_counter = 4 if width == 32 else 2
        shift = per_counter.bit_length() - 1
        counter_low = self.op("add", self.spread(low, dims),
                              self.with_const("shift-right-logical", index, shift))
        carried = self.op("select", self.op("compare", counter_low, self.spread(low, dims),
                                            direction="LT"),
                          self.spread(self.with_const("add", high, 1), dims),
                          self.spread(high, dims))
        x = self.philox4x32([*self.words(counter_low), *self.words(carried)], key, dims)
        parts = x if width == 32 else [self.joined(x[0], x[1]), self.joined(x[2], x[3])]
        return self.picked(self.with_const("and", index, per_counter - 1), parts)

    def philox4x32(self, x: list[str], key: str, dims: Dims) -> list[str]:
        k0, k1 = self.words(key)
        for round_ in range(PHILOX_ROUNDS):
            round_keys = [self.spread(self.with_const("add", k, w * round_ & 0xFFFFFFFF)
                                      if round_ else k, dims)
                          for k, w in zip((k0, k1), PHILOX_W32)]
            hi0, lo0 = self.product_words(x[0], PHILOX_M4X32[0])
            hi1, lo1 = self.product_words(x[2], PHILOX_M4X32[1])
            x = [self.op("xor", self.op("xor", hi1, x[1]), round_keys[0]), lo1,
                 self.op("xor", self.op("xor", hi0, x[3]), round_keys[1]), lo0]
        return x

    def product_words(self, x: str, multiplier: int) -> tuple[str, str]:
        """(high, low) ``u32`` words of ``x * multiplier`` computed in ``u64``."""
        product = self.with_const("multiply", self.convert(x, "u64"), multiplier)
        low, high = self.words(product)
        return high, low

    def joined_state(self, scalars: list[str]) -> str:
        vectors = tuple(self.add("reshape", ArrayShape("u64", (1,)), (s,)) for s in scalars)
        return self.add("concatenate", ArrayShape("u64", (len(vectors),)), vectors,
                        dimensions=(0,))

    def threefry(self, state: str, length: int, dims: Dims, width: int) -> tuple[str, str]:
        """A 64-bit element's counter is its linear index; a 32-bit element at index ``c``
        along the halved dim is output ``c % 2`` of the counter of its index with ``c // 2``
        there, in the halved dims (a scalar: output 0 of counter 0)."""
        key = self.element(state, 0)
        start = self.element(state, 1)
        if width == 64 or not dims:
            x0, x1 = self.threefry2x32(self.op("add", self.spread(start, dims),
                                               self.output_index(dims)), key, dims)
            count = max(1, math.prod(dims))
            return self.joined_state([key, self.with_const("add", start, count)]), \
                (self.joined(x0, x1) if width == 64 else x0)
        split = halving_dim(dims)
        half = dims[:split] + (-(-dims[split] // 2),) + dims[split + 1:]
        at = self.coordinates(dims)
        odd = self.with_const("and", at[split], 1)
        at[split] = self.with_const("shift-right-logical", at[split], 1)
        counter = self.op("add", self.spread(start, dims), self.linear(at, half))
        x0, x1 = self.threefry2x32(counter, key, dims)
        return self.joined_state([key, self.with_const("add", start, math.prod(half))]), \
            self.picked(odd, [x0, x1])

    def threefry2x32(self, counter: str, key: str, dims: Dims) -> tuple[str, str]:
        k0, k1 = self.words(key)
        k2 = self.op("xor", self.op("xor", self.const(THREEFRY_PARITY, "u32"), k0), k1)
        scalars = (k0, k1, k2)
        ks = [self.spread(k, dims) for k in scalars]
        x0, x1 = self.words(counter)
        x0, x1 = self.op("add", x0, ks[0]), self.op("add", x1, ks[1])
        for block in range(5):
            for rotation in THREEFRY_ROTATIONS[block % 2]:
                x0 = self.op("add", x0, x1)
                rotated = self.op("or", self.with_const("shift-left", x1, rotation),
                                  self.with_const("shift-right-logical", x1, 32 - rotation))
                x1 = self.op("xor", rotated, x0)
            x0 = self.op("add", x0, ks[(block + 1) % 3])
            x1 = self.op("add", x1, self.spread(self.with_const(
                "add", scalars[(block + 2) % 3], block + 1), dims))
        return x0, x1


__all__ = ["GeneratorOps", "expand_rng_bit_generators"]
