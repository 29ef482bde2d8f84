"""A QR's ``Q`` written as ``A R^-1`` before differentiating, so the pair has JAX's gradient.

JAX computes ``jnp.linalg.qr`` (and XLA dumps it) as LAPACK's ``geqrf``, which packs ``R``
and the Householder reflectors of ``Q`` into one matrix, then ``orgqr``
(``householder_product``) of the reflectors.  A gradient of the reflectors means nothing to
a program; JAX differentiates the pair ``(Q, R)`` as a function of ``A``
(``jax._src.lax.linalg.qr_jvp_rule``).  For the thin QR of a matrix with at least as many
rows as columns, ``Q = A R^-1`` exactly, so before the reverse pass each such
``householder_product`` becomes the triangular solve of ``A`` by ``R`` (the upper triangle
of the packed factor): its VJP and the ``geqrf`` rule (``rules_library``: ``R``'s cotangent
alone) then give JAX's gradient.  The backward recomputes ``Q`` this way; the forward's
``Q`` is LAPACK's.

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... ENTRY e {
...   a = f32[5,3]{0,1} parameter(0)
...   g = (f32[5,3]{0,1}, f32[3]) custom-call(a), custom_call_target="lapack_sgeqrf_ffi"
...   p = f32[5,3]{0,1} get-tuple-element(g), index=0
...   t = f32[3] get-tuple-element(g), index=1
...   ROOT q = f32[5,3]{0,1} custom-call(p, t), custom_call_target="lapack_sorgqr_ffi"
... }''')
>>> [i.opcode for i in qr_as_solve(m).entry][-2:]
['select', 'triangular-solve']
"""
from __future__ import annotations

from dataclasses import replace

from fusion.analysis.library_calls import is_library_call, library_call
from fusion.ir.attributes import SliceDim
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.ir.instruction_writer import InstructionWriter
from fusion.ir.shape import ArrayShape
from fusion.opcodes import traits
from fusion.transforms.map_inlining import fresh_names
from fusion.transforms.naming import taken_names


def _routine(instr: HloInstruction) -> str | None:
    return library_call(instr).routine if is_library_call(instr) else None


def _through_copies(comp: HloComputation, name: str) -> HloInstruction:
    """The instruction ``name`` copies (XLA's optimized modules copy into LAPACK's layout)."""
    instr = comp.instruction(name)
    while traits(instr.opcode).passes_counter and len(instr.operands) == 1:
        source = comp.instruction(instr.operands[0])
        same = isinstance(source.shape, ArrayShape) and isinstance(instr.shape, ArrayShape) \
            and (source.shape.dims, source.shape.dtype) == (instr.shape.dims, instr.shape.dtype)
        if not same:
            break
        instr = source
    return instr


def _factorization(comp: HloComputation, instr: HloInstruction) -> HloInstruction | None:
    """The thin ``geqrf`` whose packed factor and ``tau`` ``instr`` (a householder product)
    multiplies out, or None."""
    if _routine(instr) != "householder_product" or len(instr.operands) != 2:
        return None
    parts = [_through_copies(comp, o) for o in instr.operands]
    if any(p.opcode != "get-tuple-element" for p in parts) or \
            [p.attr("index") for p in parts] != [0, 1] or parts[0].operands != parts[1].operands:
        return None
    qr = comp.instruction(parts[0].operands[0])
    packed = parts[0].shape
    if _routine(qr) != "qr" or not isinstance(instr.shape, ArrayShape) \
            or packed.dims[-2] < packed.dims[-1] or instr.shape.dims != packed.dims:
        return None
    return qr


def _solve(ops: InstructionWriter, comp: HloComputation, qr: HloInstruction,
           packed: str) -> None:
    shape = comp.instruction(packed).shape.with_layout(None)
    n, rank = shape.dims[-1], shape.rank
    square = ArrayShape(shape.dtype, shape.dims[:-2] + (n, n))
    corner = ops.add("slice", square, (packed,), slice=tuple(
        SliceDim(0, d, 1) for d in square.dims))
    rows, columns = (ops.add("iota", square.with_dtype("s32"), (), iota_dimension=d)
                     for d in (rank - 2, rank - 1))
    upper = ops.add("compare", square.with_dtype("pred"), (columns, rows), direction="GE")
    zero = ops.add("broadcast", square, (ops.scalar(0, shape.dtype),), dimensions=())
    r = ops.add("select", square, (upper, corner, zero))
    ops.add("triangular-solve", ops.instr.shape, (r, qr.operands[0]), left_side=False,
            lower=False, unit_diagonal=False, transpose_a="NO_TRANSPOSE")


def qr_as_solve(module: HloModule) -> HloModule:
    """``module`` with each thin QR's ``householder_product`` written as ``A R^-1`` (module
    docstring); ``module`` itself when it has none."""
    taken = taken_names(module)
    changed = False
    computations = []
    for comp in module.computations:
        out: list[HloInstruction] = []
        for instr in comp:
            qr = _factorization(comp, instr)
            if qr is None:
                out.append(instr)
                continue
            ops = InstructionWriter(instr, fresh_names(instr.name, taken, "qr"))
            _solve(ops, comp, qr, instr.operands[0])
            out.extend(ops.named_last(instr.name))
            changed = True
        computations.append(replace(comp, instructions=tuple(out)))
    return replace(module, computations=tuple(computations)) if changed else module


__all__ = ["qr_as_solve"]
