"""Every opcode this project knows, with one frozen record of its traits.

The phases keep one registry each (``SHAPE_RULES``, ``OP_RULES``, the indexing rules, the
lowering and host rules); what an op *is* (elementwise, fusible, expensive, ...) is said once,
here, and every opcode set the passes test against is derived from :data:`OPCODES`.  A test
checks that every registry's keys are opcodes of this table, so a misspelled key is caught.

>>> traits("exponential").expensive, traits("convert").flop_free
(True, True)
>>> sorted(opcodes_with("control_flow"))
['call', 'conditional', 'while']
>>> traits("no-such-op") == OpTraits()
True
"""
from __future__ import annotations

from dataclasses import dataclass, fields, replace


@dataclass(frozen=True)
class OpTraits:
    """What the passes need to know about an opcode, independent of its rules.

    ``elementwise``: XLA's ``HloInstruction::IsOpElementwise`` (``map`` included).
    ``fusible``: priority fusion may make it a member of a fusion (the ops this project keeps
    as kernels of their own, such as dot, gather, scatter, sort, reduce-window, are not).
    ``foldable``: an elementwise op constant folding may evaluate (not a call, no randomness).
    ``expensive``: XLA's ``IsExpensive`` flavour; recomputing it in several consumers costs.
    ``flop_free``: elementwise, yet costs no arithmetic (a conversion or a copy).
    ``index_changing``: an output element reads its operand at another index.
    ``trivial``: no kernel of its own; it only names, groups or aliases values.
    ``control_flow``: runs called computations as host programs (call, conditional, while).
    ``host_only``: only ever runs on the host; it moves values, never computes them.
    ``side_effect``: its effect is more than its value; never removed as dead code.
    ``own_loop``: its kernel code is a loop or template of its own (a reduction, a
    contraction, a sort, a scatter), not a value rendered at one index of a dot fusion.
    ``kernel_reducer``: its ``to_apply`` reducer is lowered into the kernel (combine function).
    """

    elementwise: bool = False
    fusible: bool = False
    foldable: bool = False
    expensive: bool = False
    flop_free: bool = False
    index_changing: bool = False
    trivial: bool = False
    control_flow: bool = False
    host_only: bool = False
    side_effect: bool = False
    own_loop: bool = False
    kernel_reducer: bool = False


_NONE = OpTraits()
_ELEMENTWISE = OpTraits(elementwise=True, fusible=True, foldable=True)
_EXPENSIVE_ELEMENTWISE = replace(_ELEMENTWISE, expensive=True)
_FLOP_FREE_ELEMENTWISE = replace(_ELEMENTWISE, flop_free=True)
# map calls a computation and stochastic-convert draws random bits: neither folds nor fuses.
_OPAQUE_ELEMENTWISE = OpTraits(elementwise=True)
_INDEX_CHANGING = OpTraits(fusible=True, index_changing=True)
_CONTROL_FLOW = OpTraits(control_flow=True, host_only=True)
_PLUMBING = OpTraits(trivial=True, host_only=True)
_SIDE_EFFECT = OpTraits(side_effect=True)

#: opcode -> traits, alphabetical, in XLA's HLO text spelling of the opcodes.
OPCODES: dict[str, OpTraits] = {
    "abs": _ELEMENTWISE,
    "add": _ELEMENTWISE,
    "after-all": _SIDE_EFFECT,
    "all-reduce": _SIDE_EFFECT,
    "and": _ELEMENTWISE,
    "atan2": _EXPENSIVE_ELEMENTWISE,
    "bitcast": replace(_INDEX_CHANGING, trivial=True),
    "bitcast-convert": _FLOP_FREE_ELEMENTWISE,
    "broadcast": _INDEX_CHANGING,
    "call": _CONTROL_FLOW,
    "cbrt": _EXPENSIVE_ELEMENTWISE,
    "ceil": _ELEMENTWISE,
    "cholesky": _NONE,
    "clamp": _ELEMENTWISE,
    "compare": _ELEMENTWISE,
    "complex": _ELEMENTWISE,
    "concatenate": _INDEX_CHANGING,
    "conditional": _CONTROL_FLOW,
    "constant": OpTraits(fusible=True, trivial=True),
    "convert": _FLOP_FREE_ELEMENTWISE,
    "convolution": OpTraits(own_loop=True),
    "copy": _FLOP_FREE_ELEMENTWISE,
    "cosine": _EXPENSIVE_ELEMENTWISE,
    "count-leading-zeros": _ELEMENTWISE,
    "custom-call": _SIDE_EFFECT,
    "divide": _EXPENSIVE_ELEMENTWISE,
    "dot": OpTraits(own_loop=True),
    "dynamic-slice": _INDEX_CHANGING,
    "dynamic-update-slice": _NONE,
    "erf": _EXPENSIVE_ELEMENTWISE,
    "exponential": _EXPENSIVE_ELEMENTWISE,
    "exponential-minus-one": _EXPENSIVE_ELEMENTWISE,
    "fft": _NONE,
    "floor": _ELEMENTWISE,
    "fusion": _NONE,
    "gather": _NONE,
    "get-tuple-element": _PLUMBING,
    "imag": _ELEMENTWISE,
    "infeed": _SIDE_EFFECT,
    "iota": OpTraits(fusible=True),
    "is-finite": _ELEMENTWISE,
    "log": _EXPENSIVE_ELEMENTWISE,
    "log-plus-one": _EXPENSIVE_ELEMENTWISE,
    "logistic": _EXPENSIVE_ELEMENTWISE,
    "map": _OPAQUE_ELEMENTWISE,
    "maximum": _ELEMENTWISE,
    "minimum": _ELEMENTWISE,
    "multiply": _ELEMENTWISE,
    "negate": _ELEMENTWISE,
    "not": _ELEMENTWISE,
    "or": _ELEMENTWISE,
    "outfeed": _SIDE_EFFECT,
    "pad": _INDEX_CHANGING,
    "parameter": _PLUMBING,
    "popcnt": _ELEMENTWISE,
    "power": _EXPENSIVE_ELEMENTWISE,
    "real": _ELEMENTWISE,
    "recv": _SIDE_EFFECT,
    "recv-done": _SIDE_EFFECT,
    "reduce": replace(_INDEX_CHANGING, expensive=True, own_loop=True, kernel_reducer=True),
    "reduce-precision": _ELEMENTWISE,
    "reduce-window": OpTraits(own_loop=True, kernel_reducer=True),
    "remainder": _EXPENSIVE_ELEMENTWISE,
    "reshape": _INDEX_CHANGING,
    "reverse": _INDEX_CHANGING,
    "rng": _SIDE_EFFECT,
    "rng-bit-generator": _SIDE_EFFECT,
    "rng-get-and-update-state": _SIDE_EFFECT,
    "round-nearest-afz": _ELEMENTWISE,
    "round-nearest-even": _ELEMENTWISE,
    "rsqrt": _EXPENSIVE_ELEMENTWISE,
    "scatter": OpTraits(own_loop=True, kernel_reducer=True),
    "select": _ELEMENTWISE,
    "select-and-scatter": _NONE,
    "send": _SIDE_EFFECT,
    "send-done": _SIDE_EFFECT,
    "shift-left": _ELEMENTWISE,
    "shift-right-arithmetic": _ELEMENTWISE,
    "shift-right-logical": _ELEMENTWISE,
    "sign": _ELEMENTWISE,
    "sine": _EXPENSIVE_ELEMENTWISE,
    "slice": _INDEX_CHANGING,
    "sort": OpTraits(own_loop=True),
    "sqrt": _EXPENSIVE_ELEMENTWISE,
    "stochastic-convert": _OPAQUE_ELEMENTWISE,
    "subtract": _ELEMENTWISE,
    "tan": _EXPENSIVE_ELEMENTWISE,
    "tanh": _EXPENSIVE_ELEMENTWISE,
    "topk": _NONE,
    "transpose": _INDEX_CHANGING,
    "triangular-solve": _NONE,
    "tuple": _PLUMBING,
    "while": _CONTROL_FLOW,
    "xor": _ELEMENTWISE,
}

TRAIT_NAMES: tuple[str, ...] = tuple(f.name for f in fields(OpTraits))


def traits(opcode: str) -> OpTraits:
    """The traits of ``opcode``; an unknown opcode has none (every trait False)."""
    return OPCODES.get(opcode, _NONE)


def is_known(opcode: str) -> bool:
    """True when ``opcode`` is in :data:`OPCODES`.

    >>> is_known("add"), is_known("addd")
    (True, False)
    """
    return opcode in OPCODES


def opcodes_with(*names: str) -> frozenset[str]:
    """The opcodes having every trait in ``names``.

    >>> sorted(opcodes_with("elementwise", "flop_free"))
    ['bitcast-convert', 'convert', 'copy']
    """
    for name in names:
        if name not in TRAIT_NAMES:
            raise ValueError(f"unknown opcode trait {name!r}")
    return frozenset(op for op, t in OPCODES.items() if all(getattr(t, n) for n in names))


ELEMENTWISE_OPCODES: frozenset[str] = opcodes_with("elementwise")
"""XLA's ``HloInstruction::IsOpElementwise`` in XLA's spelling of the opcodes (51 ops)."""

__all__ = ["ELEMENTWISE_OPCODES", "OPCODES", "OpTraits", "TRAIT_NAMES", "is_known",
           "opcodes_with", "traits"]
