"""``@triton.jit`` combine functions for ``tl.reduce``, generated from a reduce's ``to_apply``.

The generated function takes ``(a_0..a_{n-1}, a_valid, b_0..b_{n-1}, b_valid)`` and returns
``(r_0..r_{n-1}, a_valid | b_valid)`` (flags are int8: the interpreter cannot reduce int1
tuples): the validity flags let a tile padded to a power of two
ignore its padding lanes for *any* combiner, not only those with a known identity (XLA's init
value need not be one; it is combined in once, after the tile is reduced).  16-bit floats are
combined in fp32 (the accumulator precision XLA:GPU uses); the reduce rounds the result.
Where every lane of a tile is valid (no padding, no mask) the reduce combines with the
*plain* form, ``(a_0..a_{n-1}, b_0..b_{n-1}) -> (r_0..r_{n-1})``: no flags to carry through
the reduction tree, no selects per combine.
"""
from __future__ import annotations

from fusion.ir.element_types import ELEMENT_TYPES, ElementType
from fusion.errors import UnsupportedOpError
from fusion.ir.hlo_module import HloComputation
from fusion.ir.instruction_order import dependency_order
from fusion.text.printer import print_computation
from fusion.ir.shape import ArrayShape
from fusion.opcodes import traits
from triton_backend.lowering.rules.memory_rules import scalar_literal
from triton_backend.lowering.rules.elementwise_rules import ELEMENTWISE_RULES, render_elementwise
from triton_backend.lowering.emitter.identifiers import IdentifierAllocator, comment_block
from triton_backend.lowering.emitter.triton_types import NARROW_FLOATS


def lowers_in_reducer(opcode: str) -> bool:
    """Whether a reducer (``to_apply`` of reduce, reduce-window, scatter) holding ``opcode``
    renders as a combine function: its parameters, constants, the tuple of its results, and
    elementwise ops (what ``render_combine_function`` takes; ``scalar_body`` also takes a
    scalar's bitcast or reshape).

    >>> lowers_in_reducer("maximum"), lowers_in_reducer("parameter"), lowers_in_reducer("dot")
    (True, True, False)
    """
    return traits(opcode).given_value or opcode == "tuple" or opcode in ELEMENTWISE_RULES


def accumulator_type(t: ElementType) -> ElementType:
    """The type a combiner computes in: fp32 for narrow floats, the type itself otherwise."""
    return ELEMENT_TYPES["f32"] if t.name in NARROW_FLOATS else t


def render_combine_function(computation: HloComputation, function_name: str, arity: int,
                            masked: bool = True) -> str:
    """Source of the masked (or, ``masked=False``, the plain) combine function for a reduce
    with ``arity`` inputs.

    >>> import fusion
    >>> m = fusion.parse_hlo("HloModule m\\nadd {\\n  a = f32[] parameter(0)\\n"
    ...     "  b = f32[] parameter(1)\\n  ROOT s = f32[] add(a, b)\\n}\\nENTRY e {\\n"
    ...     "  ROOT p = f32[] parameter(0)\\n}\\n")
    >>> print(render_combine_function(m.computation("add"), "combine_add", 1))  # doctest: +NORMALIZE_WHITESPACE
    # add {
    #   a = f32[] parameter(0)
    #   b = f32[] parameter(1)
    #   ROOT s = f32[] add(a, b)
    # }
    @triton.jit
    def combine_add(a0, a_valid, b0, b_valid):
        both = (a_valid & b_valid) != 0
        s = (a0) + (b0)
        r0 = tl.where(both, s, tl.where(a_valid != 0, a0, b0))
        return r0, a_valid | b_valid
    >>> print(render_combine_function(m.computation("add"), "combine_add", 1, masked=False))  # doctest: +NORMALIZE_WHITESPACE
    # add {
    #   a = f32[] parameter(0)
    #   b = f32[] parameter(1)
    #   ROOT s = f32[] add(a, b)
    # }
    @triton.jit
    def combine_add(a0, b0):
        s = (a0) + (b0)
        return s
    """
    names = IdentifierAllocator()
    a_args = [f"a{i}" for i in range(arity)]
    b_args = [f"b{i}" for i in range(arity)]
    for reserved in (*a_args, *b_args, "a_valid", "b_valid", "both"):
        names.fresh(reserved)
    body = ["    both = (a_valid & b_valid) != 0"] if masked else []
    results = scalar_body(computation, names, a_args + b_args, body)
    if len(results) != arity:
        raise UnsupportedOpError(f"reducer {computation.name} returns {len(results)} values for "
                                 f"{arity} inputs", where=computation.name)
    if masked:
        outs = []
        for i, result in enumerate(results):
            out = names.fresh(f"r{i}")
            body.append(f"    {out} = tl.where(both, {result}, tl.where(a_valid != 0, {a_args[i]}, {b_args[i]}))")
            outs.append(out)
        body.append(f"    return {', '.join(outs)}, a_valid | b_valid")
        signature = ", ".join([*a_args, "a_valid", *b_args, "b_valid"])
    else:
        body.append(f"    return {', '.join(results)}")
        signature = ", ".join([*a_args, *b_args])
    header = comment_block(print_computation(computation))
    return header + f"@triton.jit\ndef {function_name}({signature}):\n" + "\n".join(body) + "\n"


def scalar_body(computation: HloComputation, names: IdentifierAllocator, params: list[str],
                body: list[str], widen: bool = True) -> list[str]:
    """Append the lines of a scalar computation of elementwise ops (a reducer, a sort's
    comparator) to ``body``, parameter ``n`` being the identifier ``params[n]``; return the
    identifiers of its results (the root's, or its tuple's elements).  ``widen``: 16-bit
    floats computed in fp32, as reducers combine; otherwise each op in its own type (register
    representation: 16-bit floats held in fp32, rounded where the HLO rounds)."""
    values: dict[str, str] = {}
    types: dict[str, ElementType] = {}
    type_of = accumulator_type if widen else (lambda t: t)
    # Text order may put a use before its definition (valid HLO): emit operands first.
    for instr in map(computation.instruction, dependency_order(computation)):
        if not isinstance(instr.shape, ArrayShape) and instr.opcode != "tuple":
            raise UnsupportedOpError(f"tuple-shaped value inside {computation.name}",
                                     where=instr.name)
        if instr.opcode == "parameter":
            values[instr.name] = params[instr.attr("parameter_number")]
            types[instr.name] = type_of(instr.shape.element_type)
            continue
        if instr.opcode == "tuple":
            continue
        t = type_of(instr.shape.element_type)
        if instr.opcode == "constant":
            expr = scalar_literal(instr.attr("literal").values[0], t)
        elif instr.opcode in ELEMENTWISE_RULES:
            expr = render_elementwise(instr.opcode, [values[o] for o in instr.operands],
                                      [types[o] for o in instr.operands], t, dict(instr.attributes))
        elif traits(instr.opcode).reshape_like and len(instr.operands) == 1:
            # A scalar's bitcast (XLA's optimized form of a bitcast-convert, as in its
            # TOTALORDER comparators) or reshape: the value, its bits read as the new type.
            (o,) = instr.operands
            expr = values[o] if types[o] == t else render_elementwise(
                "bitcast-convert", [values[o]], [types[o]], t, {})
        else:
            raise UnsupportedOpError(
                f"op {instr.opcode} in {computation.name} is not supported (elementwise ops, "
                "constants and parameters are)", where=instr.name)
        values[instr.name] = names.allocate(instr.name)
        types[instr.name] = t
        body.append(f"    {values[instr.name]} = {expr}")
    root = computation.root
    return [values[o] for o in root.operands] if root.opcode == "tuple" else [values[root.name]]
