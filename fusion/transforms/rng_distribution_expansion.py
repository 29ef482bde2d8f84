"""``rng`` written as the ops that draw it, as XLA's ``RngExpander`` writes it before fusion.

Each ``rng(a, b)`` becomes its stream (``fusion.analysis.rng_streams``): a ``u64`` key constant,
``rng-get-and-update-state(), delta=D`` (the one op left with a state, which the host runs),
and Philox words (``rng_expansion.GeneratorOps.philox_words``) turned into the distribution
as ``fusion.evaluator.rng_distribution_ops`` defines it.  XLA computes the words once per
counter and reorders them with concatenates and slices; here every element computes the word
at its own linear index, and a normal element both words of its Box-Muller pair, so every op
is elementwise in the output index: the fusion pass fuses the whole draw into the kernel of
whatever reads it, with identity indexing maps.  ``f16``/``bf16`` draws are computed in
``f32`` and rounded.  A module without ``rng`` is returned as is.

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... ENTRY e {
...   a = f32[] constant(0)
...   b = f32[] constant(1)
...   ROOT r = f32[4,6] rng(a, b), distribution=rng_normal
... }''')
>>> ops = [i.opcode for i in expand_rngs(m).entry]
>>> "rng" in ops, ops.count("rng-get-and-update-state"), ops.count("sine"), ops[-1]
(False, 1, 1, 'add')
"""
from __future__ import annotations

import math
from dataclasses import replace

from fusion.analysis.rng_streams import computed_type, rng_key, state_delta
from fusion.evaluator.rng_distribution_ops import LEAST_U1, normal_halves
from fusion.ir.element_types import element_type
from fusion.ir.hlo_module import HloModule
from fusion.ir.shape import ArrayShape
from fusion.transforms.op_expansion import expand_ops
from fusion.transforms.rng_expansion import GeneratorOps

#: A float type's stored mantissa bits (XLA's ``SignificandWidth - 1``).
_MANTISSA = {"f32": 23, "f64": 52}


def expand_rngs(module: HloModule) -> HloModule:
    """``module`` with every ``rng`` written as plain ops (module docstring); an invalid one
    is an ``HloVerifyError`` located at it."""
    return expand_ops(module, "rng", lambda ops, instr, shapes, adder: ops.draw(), "rng", writer=_DrawOps)


class _DrawOps(GeneratorOps):
    """The ops of one ``rng``'s draw, over its dims."""

    def draw(self) -> str:
        shape = self.instr.shape
        assert isinstance(shape, ArrayShape)
        computed = computed_type(shape.dtype)
        self.dims = shape.dims
        self.width = element_type(computed).bits
        self.key = self.const(rng_key(self.instr.name), "u64")
        state = self.add("rng-get-and-update-state", ArrayShape("u64", (2,)), (),
                         delta=state_delta(shape))
        self.low, self.high = self.element(state, 0), self.element(state, 1)
        a, b = (self._scalar_operand(o, computed) for o in self.instr.operands)
        if self.instr.attr("distribution", None) == "rng_normal":
            value = self.op("add", self.spread(a, self.dims),
                            self.op("multiply", self.spread(b, self.dims), self._normal()))
        elif computed in _MANTISSA:
            span = self.add("subtract", ArrayShape(computed, ()), (b, a))
            value = self.op("add", self.op("multiply", self._unit(self.output_index(self.dims)),
                                           self.spread(span, self.dims)),
                            self.spread(a, self.dims))
        else:
            value = self._uniform_int(a, b)
        return self.convert(value, shape.dtype)

    def _scalar_operand(self, name: str, dtype: str) -> str:
        self.shapes.setdefault(name, ArrayShape(self.instr.shape.dtype, ()))
        return self.convert(name, dtype)

    def _unit(self, index: str) -> str:
        """The ``[0, 1)`` float at word ``index`` of the draw: its top mantissa-width bits
        scaled by ``2**-mantissa``."""
        floats = "f64" if self.width == 64 else "f32"
        mantissa = _MANTISSA[floats]
        bits = self.philox_words(self.key, self.low, self.high, index, self.width)
        shifted = self.with_const("shift-right-logical", bits, self.width - mantissa)
        return self.with_const("multiply", self.convert(shifted, floats), 2.0 ** -mantissa)

    def _uniform_int(self, a: str, b: str) -> str:
        dtype = self.shapes[a].dtype
        unsigned = f"u{self.width}"
        span = self.add("subtract", ArrayShape(unsigned, ()), (self._bitcast(b, unsigned),
                                                             self._bitcast(a, unsigned)))
        bits = self.philox_words(self.key, self.low, self.high, self.output_index(self.dims),
                                 self.width)
        dist = self.op("remainder", bits, self.spread(span, self.dims))
        half = self.with_const("shift-right-logical", dist, 1)
        rest = self.op("subtract", dist, half)
        return self.op("add", self.op("add", self.spread(a, self.dims), self._bitcast(half, dtype)),
                       self._bitcast(rest, dtype))

    def _bitcast(self, x: str, dtype: str) -> str:
        like = self.shapes[x]
        return x if like.dtype == dtype else self.add("bitcast-convert",
                                                      replace(like, dtype=dtype), (x,))

    def _normal(self) -> str:
        """Standard normal values: Box-Muller on the uniform pair at linear indices ``L0``
        and ``L0 + stride`` of the draw's halved shape (``rng_distribution_ops``)."""
        dims = self.dims
        if not dims:
            first, second, parity = self.const(0, "u64"), self.const(1, "u64"), None
        else:
            pair_dim, drawn = normal_halves(dims)
            split = pair_dim - 1
            strides = [math.prod(drawn[d + 1:]) for d in range(len(drawn))]
            at = self.coordinates(dims)
            parity = self.with_const("and", at[split], 1)
            at[split] = self.with_const("shift-right-logical", at[split], 1)
            first = None
            for d, coordinate in enumerate(at):
                stride = strides[d if d <= split else d + 1]
                if dims[d] > 1:
                    term = self.with_const("multiply", coordinate, stride)
                    first = term if first is None else self.op("add", first, term)
            first = self.const(0, "u64", dims) if first is None else first
            second = self.with_const("add", first, strides[split + 1])
        x0, x1 = self._unit(first), self._unit(second)
        u1 = self.with_const("maximum", x0, LEAST_U1)
        angle = self.with_const("multiply", x1, 2 * math.pi)
        radius = self.op("sqrt", self.with_const("multiply", self.op("log", u1), -2.0))
        pair = [self.op("multiply", self.op(f, angle), radius) for f in ("sine", "cosine")]
        if parity is None:
            return pair[0]
        return self.op("select", self.with_const("compare", parity, 0, direction="EQ"), *pair)


__all__ = ["expand_rngs"]
