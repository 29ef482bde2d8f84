"""How many terms the longest sum behind each of a module's results adds.

XLA leaves the order of a reduction's combines unspecified, and so do we: the reference
evaluator adds pairwise, a GPU's kernel per thread then across threads, a split reduction
part by part.  Two orders of a float sum of ``n`` terms differ by about ``sqrt(n)`` roundings of
its terms' size, which a result that cancels (a column sum of random signs near zero) shows
as a large relative error.  ``--check`` widens a result's tolerance by ``sqrt`` of the
longest sum on its path (``triton_backend.host.output_check``); this module finds that length.

A reduce adds the elements of its reduced dims, a reduce-window those of its window, a dot
its contracted dims, a convolution a kernel's window times its input features.  A value's
length is the largest of its own and its operands' (a chain of sums does not multiply: each
rounds its own result); a call, fusion, loop or conditional's is that of its computations.

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... add {
...   a = f32[] parameter(0)
...   b = f32[] parameter(1)
...   ROOT s = f32[] add(a, b)
... }
... ENTRY e {
...   x = f32[8192,768] parameter(0)
...   z = f32[] constant(0)
...   r = f32[768] reduce(x, z), dimensions={0}, to_apply=add
...   n = f32[8192,768] negate(x)
...   ROOT t = (f32[768], f32[8192,768]) tuple(r, n)
... }''')
>>> output_summation_lengths(m)
(8192, 1)
"""
from __future__ import annotations

import math

from fusion.ir.convolution import parse_dim_labels
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.ir.shape import ArrayShape, flatten_shape
from fusion.opcodes import traits


def output_summation_lengths(module: HloModule) -> tuple[int, ...]:
    """Per leaf of the ENTRY result (flattened as a tuple result is), the most terms one sum
    on its path adds (1: no sum)."""
    lengths: dict[tuple[str, str], int] = {}
    return _leaf_lengths(module, module.entry, module.entry.root_name, lengths)


def _leaf_lengths(module: HloModule, comp: HloComputation, name: str,
                  lengths: dict[tuple[str, str], int]) -> tuple[int, ...]:
    """Per leaf of ``name``'s value: a tuple's (or a bitcast's) leaves are its operands'."""
    instr = comp.instruction(name)
    if traits(instr.opcode).wraps_operands:
        return tuple(n for o in instr.operands for n in _leaf_lengths(module, comp, o, lengths))
    return (_length(module, comp, name, lengths),) * len(flatten_shape(instr.shape))


def _length(module: HloModule, comp: HloComputation, name: str,
            lengths: dict[tuple[str, str], int]) -> int:
    """The longest sum behind ``name`` of ``comp`` (operands first, without recursion)."""
    pending = [name]
    while pending:
        current = pending[-1]
        if (comp.name, current) in lengths:
            pending.pop()
            continue
        instr = comp.instruction(current)
        missing = [o for o in instr.operands if (comp.name, o) not in lengths]
        if missing:
            pending.extend(missing)
            continue
        pending.pop()
        longest = max((lengths[(comp.name, o)] for o in instr.operands), default=1)
        lengths[(comp.name, current)] = max(longest, _own_length(comp, instr),
                                            _called_length(module, instr, lengths))
    return lengths[(comp.name, name)]


def _own_length(comp: HloComputation, instr: HloInstruction) -> int:
    """The terms ``instr`` itself adds into one output element."""
    op = traits(instr.opcode)
    if op.reduction and instr.has_attr("dimensions"):
        operand = comp.instruction(instr.operands[0]).shape
        if isinstance(operand, ArrayShape):
            return math.prod(operand.dims[d] for d in instr.attr("dimensions"))
    if op.reduction and instr.has_attr("window"):
        return math.prod(d.size for d in instr.attr("window").dims)
    if op.contraction and instr.has_attr("lhs_contracting_dims"):
        lhs = comp.instruction(instr.operands[0]).shape
        if isinstance(lhs, ArrayShape):
            return math.prod(lhs.dims[d] for d in instr.attr("lhs_contracting_dims"))
    if op.contraction and instr.has_attr("dim_labels"):
        rhs = comp.instruction(instr.operands[1]).shape
        if isinstance(rhs, ArrayShape):
            numbers = parse_dim_labels(instr.attr("dim_labels"))
            return rhs.dims[numbers.rhs_input] * math.prod(rhs.dims[d]
                                                            for d in numbers.rhs_spatial)
    return 1


def _called_length(module: HloModule, instr: HloInstruction,
                   lengths: dict[tuple[str, str], int]) -> int:
    """The longest sum inside the computations ``instr`` runs (a reduction's reducer adds two
    scalars: nothing)."""
    if traits(instr.opcode).reduction:
        return 1
    longest = 1
    for callee in instr.called_computations():
        comp = module.computation(callee)
        for inner in comp.instructions:
            longest = max(longest, _length(module, comp, inner.name, lengths))
    return longest


__all__ = ["output_summation_lengths"]
