"""Every opcode this project knows, with one frozen record of its traits.

The phases keep one registry each (``SHAPE_RULES``, ``OP_RULES``, the indexing rules, the
lowering and host rules); what an op *is* (elementwise, fusible, expensive, ...) is said once,
here, and every opcode set the passes test against is derived from :data:`OPCODES`.  A test
checks that every registry's keys are opcodes of this table, so a misspelled key is caught;
another (``tests/test_opcode_literals.py``) that every opcode the code compares with is one, and
that no opcode set is written out anywhere else.

>>> traits("exponential").expensive, traits("convert").flop_free
(True, True)
>>> sorted(opcodes_with("control_flow"))
['async-done', 'async-start', 'async-update', 'call', 'conditional', 'while']
>>> sorted(opcodes_with("contraction")), sorted(opcodes_with("reshape_like"))
(['convolution', 'dot'], ['bitcast', 'reshape'])
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
    as kernels of their own, such as dot, scatter, sort, reduce-window, are not; a gather is:
    it reads one operand element per output element, at clamped runtime indices, so a
    reduction reading the same operand takes it in as a per-row load, as XLA's loop and
    reduction fusions do).  The fusion pass also fuses a reduce-window that is a scan a
    tile runs along (``tiling.policy.tile_scans``): a property of its window, not its opcode.
    ``foldable``: an elementwise op constant folding may evaluate (not a call, no randomness).
    ``expensive``: XLA's ``IsExpensive`` flavour; recomputing it in several consumers costs.
    ``flop_free``: elementwise, yet costs no arithmetic (a conversion or a copy).
    ``index_changing``: an output element reads its operand at another index.
    ``trivial``: no kernel of its own; it only names, groups or aliases values.
    ``control_flow``: runs called computations as host programs (call, conditional, while,
    the async pair).
    ``host_only``: only ever runs on the host; it moves values, never computes them.
    ``side_effect``: its effect is more than its value; never removed as dead code.
    ``own_loop``: its kernel code is a loop or template of its own (a reduction, a
    contraction, a sort, a scatter), not a value rendered at one index of a dot fusion.
    ``kernel_reducer``: its ``to_apply`` reducer is lowered into the kernel (combine function).
    ``reduction``: folds many operand elements into each output element with its
    ``to_apply`` reducer (XLA's reductions: reduce, reduce-window).
    ``contraction``: a product summed over contracted dims, which a ``tl.dot`` template
    computes (a dot; a convolution, as an implicit GEMM).
    ``reshape_like``: gives its operand's elements another shape in the same linear order (a
    reshape; a bitcast, XLA's reshape or transpose that moves no bytes).
    ``physical_transpose``: may reorder its operand's elements in memory: a transpose, or a
    copy that changes the layout (what XLA's ``GetDescriptionForTiledTransposeEmitter`` reads).
    ``keeps_constant``: a constant stays a constant through it: it only repeats, reshapes or
    converts its one operand (broadcast, reshape, bitcast, convert).
    ``passes_counter``: a scalar (a loop counter) comes out of it with its value unchanged
    (XLA's trip-count analysis looks through a counter's copy; JAX also converts, reshapes).
    ``wraps_operands``: its result is its operands themselves in a new wrapper (a bitcast:
    the same bytes, another shape; a tuple: the operands as its elements), as XLA's in-place
    dynamic-update-slice check reads through both.
    ``data_movement``: moves, repeats or drops its operands' elements without computing on
    them (other operands are indices), so it acts on a complex value's parts alike.
    ``complex_to_real``: a complex operand gives a real result of its part type (XLA's
    ``ShapeInference::InferUnaryOpShape``: real, imag, abs).
    ``rt_var_indexing``: where it reads or writes depends on the values of index operands:
    its indexing maps carry runtime variables (XLA's ``RTVar``).
    ``given_value``: its value is given, not computed: by the caller (a parameter) or by the
    HLO text (a constant).
    ``inlinable``: runs its one called computation once, with its operands as that
    computation's parameters (call, fusion), so inlining it only renames.
    ``async_state``: reads an ``async-start``'s state (async-update, async-done).
    ``library_call``: XLA:GPU runs it as a library call (cuSOLVER, cuFFT, cuBLAS, a TopK
    kernel); here torch runs it on the host.
    ``collective``: a cross-device collective (all-reduce, all-gather, reduce-scatter,
    all-to-all, ragged-all-to-all, collective-broadcast, collective-permute, and the
    ``-start``/``-done`` halves XLA splits some into).
    Modules run on one device here, where it has one participant and its value is defined
    (``fusion.analysis.collectives``); the host copies it.
    ``global_ids_flag``: a collective with XLA's ``use_global_device_ids`` flag (all-reduce,
    all-gather, reduce-scatter, their ``-start``s): with a ``channel_id`` and the flag false,
    its groups name replicas across every partition (``fusion.analysis.spmd_groups``).
    ``device_id``: its value is the id of the device running it (``partition-id``,
    ``replica-id``: a ``u32[]``); 0 on one device, the rank among several processes.
    ``implied_shape``: its text may leave the result shape out, which follows from the
    operands' shapes alone (``fusion.text.implied_shapes``); XLA's parser infers it too.
    ``width_dependent``: its value depends on the bit widths of its types, not only on the
    values (it reinterprets bits, rounds to a narrower format, or makes random bits), so the
    module computed in wider floats (``fusion.transforms.promote_floats``) means another thing.
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
    reduction: bool = False
    contraction: bool = False
    reshape_like: bool = False
    physical_transpose: bool = False
    keeps_constant: bool = False
    passes_counter: bool = False
    wraps_operands: bool = False
    data_movement: bool = False
    complex_to_real: bool = False
    rt_var_indexing: bool = False
    given_value: bool = False
    inlinable: bool = False
    async_state: bool = False
    library_call: bool = False
    collective: bool = False
    global_ids_flag: bool = False
    device_id: bool = False
    implied_shape: bool = False
    width_dependent: bool = False


_NONE = OpTraits()
_ELEMENTWISE = OpTraits(elementwise=True, fusible=True, foldable=True, implied_shape=True)
_EXPENSIVE_ELEMENTWISE = replace(_ELEMENTWISE, expensive=True)
_FLOP_FREE_ELEMENTWISE = replace(_ELEMENTWISE, flop_free=True)
# map calls a computation and stochastic-convert is expanded before fusion (as XLA decomposes
# it): neither folds nor fuses as itself.
_OPAQUE_ELEMENTWISE = OpTraits(elementwise=True)
_INDEX_CHANGING = OpTraits(fusible=True, index_changing=True)
_CONTROL_FLOW = OpTraits(control_flow=True, host_only=True)
_PLUMBING = OpTraits(trivial=True, host_only=True)
_SIDE_EFFECT = OpTraits(side_effect=True)
# Data movement that reads its operands at other indices (slice, pad, transpose, ...).
_MOVEMENT = replace(_INDEX_CHANGING, data_movement=True)
_CONTRACTION = OpTraits(own_loop=True, contraction=True)
_LIBRARY_CALL = OpTraits(library_call=True)
_COLLECTIVE = OpTraits(collective=True)
_FLAGGED_COLLECTIVE = OpTraits(collective=True, global_ids_flag=True)
_DEVICE_ID = OpTraits(device_id=True)

#: opcode -> traits, alphabetical, in XLA's HLO text spelling of the opcodes.
OPCODES: dict[str, OpTraits] = {
    "abs": replace(_ELEMENTWISE, complex_to_real=True),
    "add": _ELEMENTWISE,
    "after-all": _SIDE_EFFECT,
    "all-gather": _FLAGGED_COLLECTIVE,
    "all-gather-done": _COLLECTIVE,
    "all-gather-start": _FLAGGED_COLLECTIVE,
    "all-reduce": _FLAGGED_COLLECTIVE,
    "all-reduce-done": _COLLECTIVE,
    "all-reduce-start": _FLAGGED_COLLECTIVE,
    "all-to-all": _COLLECTIVE,
    "and": _ELEMENTWISE,
    "async-done": replace(_CONTROL_FLOW, async_state=True),
    "async-start": _CONTROL_FLOW,
    "async-update": replace(_CONTROL_FLOW, async_state=True),
    "atan2": _EXPENSIVE_ELEMENTWISE,
    # Written as the elementwise ops and reductions they compute before compiling.
    "batch-norm-grad": _NONE,
    "batch-norm-inference": _NONE,
    "batch-norm-training": _NONE,
    "bitcast": replace(_MOVEMENT, trivial=True, reshape_like=True, keeps_constant=True,
                       wraps_operands=True),
    "bitcast-convert": replace(_FLOP_FREE_ELEMENTWISE, implied_shape=False, width_dependent=True),
    "broadcast": replace(_MOVEMENT, keeps_constant=True),
    "call": replace(_CONTROL_FLOW, inlinable=True),
    "cbrt": _EXPENSIVE_ELEMENTWISE,
    "ceil": _ELEMENTWISE,
    "cholesky": _LIBRARY_CALL,
    "clamp": _ELEMENTWISE,
    "collective-broadcast": _COLLECTIVE,
    "collective-permute": _COLLECTIVE,
    "collective-permute-done": _COLLECTIVE,
    "collective-permute-start": _COLLECTIVE,
    "compare": _ELEMENTWISE,
    "complex": _ELEMENTWISE,
    "concatenate": _MOVEMENT,
    "conditional": _CONTROL_FLOW,
    "constant": OpTraits(fusible=True, trivial=True, given_value=True),
    "convert": replace(_FLOP_FREE_ELEMENTWISE, keeps_constant=True, passes_counter=True,
                       implied_shape=False),
    "convolution": _CONTRACTION,
    "copy": replace(_FLOP_FREE_ELEMENTWISE, physical_transpose=True, passes_counter=True,
                    data_movement=True),
    # XLA's asynchronous copy between memory spaces (prefetch, host offloading): the pair
    # passes the value on; on one device's memory there is nothing to move.
    "copy-done": _PLUMBING,
    "copy-start": _PLUMBING,
    "cosine": _EXPENSIVE_ELEMENTWISE,
    "count-leading-zeros": _ELEMENTWISE,
    "custom-call": _SIDE_EFFECT,
    "divide": _EXPENSIVE_ELEMENTWISE,
    "dot": _CONTRACTION,
    "dynamic-slice": replace(_MOVEMENT, rt_var_indexing=True),
    "dynamic-update-slice": OpTraits(data_movement=True, rt_var_indexing=True),
    "erf": _EXPENSIVE_ELEMENTWISE,
    "exponential": _EXPENSIVE_ELEMENTWISE,
    "exponential-minus-one": _EXPENSIVE_ELEMENTWISE,
    "fft": _LIBRARY_CALL,
    "floor": _ELEMENTWISE,
    "fusion": OpTraits(inlinable=True),
    "gather": replace(_MOVEMENT, rt_var_indexing=True),
    # The size of a dim: a constant when the dim is static (canonicalization folds it).
    "get-dimension-size": _NONE,
    "get-tuple-element": replace(_PLUMBING, implied_shape=True),
    "imag": replace(_ELEMENTWISE, complex_to_real=True),
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
    "opt-barrier": _PLUMBING,
    "or": _ELEMENTWISE,
    "outfeed": _SIDE_EFFECT,
    "pad": _MOVEMENT,
    "parameter": replace(_PLUMBING, given_value=True),
    "partition-id": _DEVICE_ID,
    "popcnt": _ELEMENTWISE,
    "power": _EXPENSIVE_ELEMENTWISE,
    "ragged-all-to-all": _COLLECTIVE,
    # Written as the dense dot of its operands masked by group before compiling.
    "ragged-dot": _NONE,
    "real": replace(_ELEMENTWISE, complex_to_real=True),
    "recv": _SIDE_EFFECT,
    "recv-done": _SIDE_EFFECT,
    "reduce": replace(_INDEX_CHANGING, expensive=True, own_loop=True, kernel_reducer=True,
                      reduction=True),
    "reduce-precision": replace(_ELEMENTWISE, implied_shape=False, width_dependent=True),
    "reduce-scatter": _FLAGGED_COLLECTIVE,
    "reduce-window": OpTraits(own_loop=True, kernel_reducer=True, reduction=True),
    "remainder": _EXPENSIVE_ELEMENTWISE,
    "replica-id": _DEVICE_ID,
    "reshape": replace(_MOVEMENT, reshape_like=True, keeps_constant=True, passes_counter=True),
    "reverse": _MOVEMENT,
    "rng": replace(_SIDE_EFFECT, width_dependent=True),
    "rng-bit-generator": OpTraits(width_dependent=True),
    "rng-get-and-update-state": _SIDE_EFFECT,
    "round-nearest-afz": _ELEMENTWISE,
    "round-nearest-even": _ELEMENTWISE,
    "rsqrt": _EXPENSIVE_ELEMENTWISE,
    # Written as the dot of its operands times their repeated scales before compiling.
    "scaled-dot": _NONE,
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
    "slice": _MOVEMENT,
    "sort": OpTraits(own_loop=True),
    "sqrt": _EXPENSIVE_ELEMENTWISE,
    "stochastic-convert": _OPAQUE_ELEMENTWISE,
    "subtract": _ELEMENTWISE,
    "tan": _EXPENSIVE_ELEMENTWISE,
    "tanh": _EXPENSIVE_ELEMENTWISE,
    "topk": _LIBRARY_CALL,
    "transpose": replace(_MOVEMENT, physical_transpose=True),
    "triangular-solve": _LIBRARY_CALL,
    "tuple": replace(_PLUMBING, wraps_operands=True, implied_shape=True),
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

PLUMBING_OPCODES: frozenset[str] = opcodes_with("trivial", "host_only")
"""Ops that only name, group or pass on values, on the host: parameter, tuple,
get-tuple-element, opt-barrier, the copy-start/copy-done pair.

>>> sorted(PLUMBING_OPCODES)
['copy-done', 'copy-start', 'get-tuple-element', 'opt-barrier', 'parameter', 'tuple']
"""

__all__ = ["ELEMENTWISE_OPCODES", "OPCODES", "OpTraits", "PLUMBING_OPCODES", "TRAIT_NAMES",
           "is_known", "opcodes_with", "traits"]
