"""What a compiled module's call decides once, not on every call.

A call validates its arguments (``validate_arguments``: type, layout, dtype, shape, device,
contiguity, autograd, neg/conj views) and makes sure no output shares memory with an input, a
constant or another output (``_fresh_outputs``).  Both cost microseconds per tensor, per call,
and their outcome depends only on facts a cheap signature holds:

* :class:`AcceptedSignatures`: a signature of the arguments (per tensor: its type, dtype,
  shape, device, and whether it is contiguous, requires grad, or is a neg/conj view) that the
  full validation passed unchanged once is passed again without it.  Only modules whose
  parameters are plain arrays qualify (no tiled or packed layout, which validation packs, and
  no sub-byte type, whose values validation range-checks); any other signature, and any
  failure, takes the full validation with its clear error.  The signature met last is also
  checked by one C++ call (``torch._C._dynamo.guards.TensorGuards``, the check behind
  torch.compile's guards: type, dispatch keys, dtype, device, sizes, strides, requires_grad),
  about 0.1 us per tensor where building the Python signature costs 0.6; a torch without it
  builds the signature.
* :func:`outputs_are_fresh`: the ENTRY root's values are the outputs of kernels (each
  allocated by its launch, each once), which share memory with nothing: the aliasing check is
  skipped (a call still returns contiguous tensors).

>>> import torch
>>> accepted = AcceptedSignatures(enabled=True)
>>> x = torch.zeros(2, 3)
>>> accepted.matches((x,)), accepted.remember((x,), [x]), accepted.matches((torch.ones(2, 3),))
(False, True, True)
>>> accepted.remember((x.t(),), [x.t().contiguous()])  # changed by validation: not remembered
False
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch

try:  # torch.compile's C++ tensor check; private, so its absence only costs speed
    from torch._C._dynamo.guards import TensorGuards
except ImportError:  # pragma: no cover - every torch this project supports has it
    TensorGuards = None

from fusion.ir.hlo_module import HloInstruction, HloModule
from fusion.ir.shape import ArrayShape, flatten_shape
from fusion.opcodes import traits
from triton_backend.host.input_validation import SUB_BYTE_CARRIERS, physical_buffer

#: Signatures remembered per module (a caller cycling through more shapes validates again).
MAX_SIGNATURES = 64


@dataclass
class AcceptedSignatures:
    """The argument signatures a module's full validation passed unchanged (see the module
    docstring); ``enabled`` is False for a module with packed, tiled or sub-byte parameters."""

    enabled: bool
    known: set = field(default_factory=set)
    guard: object = None  # the C++ check of the signature met last (see the module docstring)

    def matches(self, args: Sequence[object]) -> bool:
        """True when ``args`` have a remembered signature (the last one met, checked first in C++)."""
        guard = self.guard
        if guard is not None:
            try:  # guard_passes, inlined: every call of a module comes through here
                if guard.check(*args):
                    return True
            except TypeError:  # another number of arguments
                pass
        if not self.known or self.key(args) not in self.known:
            return False
        self.guard = tensor_guard(args)
        return True

    @staticmethod
    def key(args: Sequence[object]) -> tuple | None:
        """The signature of ``args``; None when one is not a plain ``torch.Tensor``."""
        out = []
        for a in args:
            if type(a) is not torch.Tensor:
                return None
            out.append((a.dtype, a.shape, a.device, a.is_contiguous(), a.requires_grad,
                        a.is_neg(), a.is_conj()))
        return tuple(out)

    def remember(self, args: Sequence[object], validated: Sequence[torch.Tensor]) -> bool:
        """Remember ``args``' signature when validation returned them as they were (the same
        data, contiguous, no autograd); True when it did."""
        if not self.enabled or len(self.known) >= MAX_SIGNATURES:
            return False
        key = self.key(args)
        if key is None or any(a.requires_grad or not a.is_contiguous() or a.is_neg() or a.is_conj()
                              or v.data_ptr() != a.data_ptr() or v.dtype != a.dtype
                              or v.shape != a.shape for a, v in zip(args, validated)):
            return False
        self.known.add(key)
        self.guard = tensor_guard(args)
        return True


def guard_passes(guard, args: Sequence[object]) -> bool:
    """Whether ``args`` pass ``guard`` (a :func:`tensor_guard`); False for another number
    of arguments, which the C++ check raises on."""
    try:
        return guard.check(*args)
    except TypeError:
        return False


def tensor_guard(tensors: Sequence[torch.Tensor]):
    """A C++ check passing exactly tensors like ``tensors`` (type, dispatch keys, dtype,
    device, sizes, strides, requires_grad), or None when this torch has none.

    >>> x = torch.zeros(2, 3)
    >>> guard = tensor_guard([x])
    >>> guard is None or (guard.check(torch.ones(2, 3)), guard.check(x.t()), guard.check(x.double()))
    (True, False, False)
    """
    if TensorGuards is None:
        return None
    return TensorGuards(*tensors, dynamic_dims_sizes=[list(t.shape) for t in tensors],
                        dynamic_dims_strides=[list(t.stride()) for t in tensors])


@dataclass(frozen=True)
class ResultForm:
    """How the ENTRY result becomes the flat outputs, decided once from its shape: ``shapes``
    the flat result shapes, ``physical`` whether any is a physical (tiled or packed) buffer
    to unpack, ``depth`` 0 for an array, 1 for a tuple of arrays, 2 for nested tuples.

    >>> from fusion.ir.shape import TupleShape
    >>> form = ResultForm.of(TupleShape((ArrayShape("f32", (2,)), ArrayShape("s32", ()))))
    >>> form.depth, form.physical, form.flatten(("a", "b"))
    (1, False, ('a', 'b'))
    """

    shapes: tuple
    physical: bool
    depth: int

    @staticmethod
    def of(shape) -> "ResultForm":
        shapes = flatten_shape(shape)
        if isinstance(shape, ArrayShape):
            depth = 0
        else:
            depth = 1 if all(isinstance(e, ArrayShape) for e in shape.elements) else 2
        return ResultForm(shapes, any(physical_buffer(s) is not None for s in shapes), depth)

    def flatten(self, value) -> Sequence:
        """The result ``value`` as a flat sequence of tensors."""
        if self.depth == 0:
            return (value,)
        if self.depth == 1:
            return value
        return _flatten(value)


def _flatten(value) -> list:
    if isinstance(value, tuple):
        return [t for v in value for t in _flatten(v)]
    return [value]


def accepted_signatures(parameters: Sequence[HloInstruction]) -> AcceptedSignatures:
    """An empty record for a module with these ENTRY parameters."""
    plain = all(isinstance(p.shape, ArrayShape) and physical_buffer(p.shape) is None
                and p.shape.dtype not in SUB_BYTE_CARRIERS for p in parameters)
    return AcceptedSignatures(enabled=plain)


def outputs_are_fresh(module: HloModule, fusions: Mapping[str, object]) -> bool:
    """True when every ENTRY result is an output of a launched kernel, or a host view of one
    (a ``reshape``/``bitcast`` left to the host), each taken once: such a value is a buffer
    its launch allocated, sharing memory with no input, constant or other result."""
    entry = module.entry
    root = _through_views(entry, entry.root)
    if root.opcode == "fusion":
        return root.name in fusions
    if root.opcode != "tuple":
        return False
    seen = set()
    for name in root.operands:
        instr, index = _through_views(entry, entry.instruction(name)), None
        if instr.opcode == "get-tuple-element":
            instr, index = entry.instruction(instr.operands[0]), instr.attr("index")
        elif not isinstance(instr.shape, ArrayShape):
            return False  # a whole tuple beside its own elements could repeat one
        if instr.opcode != "fusion" or instr.name not in fusions or (instr.name, index) in seen:
            return False
        seen.add((instr.name, index))
    return True


def _through_views(entry, instr: HloInstruction) -> HloInstruction:
    """``instr``, or the value the host views it from: ENTRY ``reshape``/``bitcast`` ops left
    unfused are ``Tensor.view`` on the host (``host_ops``), sharing their operand's buffer."""
    while traits(instr.opcode).reshape_like and len(instr.operands) == 1:
        instr = entry.instruction(instr.operands[0])
    return instr


__all__ = ["AcceptedSignatures", "MAX_SIGNATURES", "ResultForm", "accepted_signatures", "guard_passes",
           "outputs_are_fresh", "tensor_guard"]
