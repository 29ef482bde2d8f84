"""Complex numbers as pairs of floats: a fused computation over ``c64``/``c128`` values
rewritten into one over their real and imaginary parts (``f32``/``f64``).

Kernels hold no complex type, so a fusion that reads, computes or returns complex values is
compiled from its *expansion*: every complex value becomes two real values, every complex
operand of the fusion two real operands (its ``real`` and ``imag`` parts, in that order) and
every complex output two real outputs.  The host splits and joins the parts around the launch
(``triton_backend.runtime.complex_fusion``).  Ops on complex values, in XLA's semantics:

* ``add``, ``subtract``, ``negate``: per part; the arithmetic (``multiply``, ``divide``,
  ``abs``, ``sign``, ``exponential``, ``log``, ``sqrt``, ``rsqrt``, ``power``, ``sine``,
  ``cosine``, ``tan``, ``tanh``, ``exponential-minus-one``, ``log-plus-one``) as XLA
  computes it, in ``complex_math``;
* ``complex``, ``real``, ``imag`` build and take parts; ``compare`` EQ/NE compares both;
  ``select`` and ``convert`` (real -> complex, complex -> complex) act per part; a convert
  of a complex value to a real type keeps the real part (as the evaluator does);
* data movement (broadcast, reshape, transpose, slice, copy, reverse, concatenate, pad,
  bitcast, dynamic-slice, dynamic-update-slice, gather) is applied to each part;
* ``reduce`` becomes a variadic reduce over the parts, its reducer expanded the same way
  (a complex sum is a sum of each part); a reduce of real values whose reducer holds complex
  values inside has its reducer expanded too.

The expansion holds no complex value: an op of real values calling another computation that
holds complex ones (other than a reducer) is refused too.

Anything else on complex values is an ``UnsupportedOpError`` naming the op.

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... fc {
...   a = c64[4] parameter(0)
...   ROOT m = c64[4] multiply(a, a)
... }
... ENTRY e {
...   x = c64[4] parameter(0)
...   ROOT f = c64[4] fusion(x), kind=kLoop, calls=fc
... }''')
>>> e = expand_complex_fusion(m, m.entry.root)
>>> e.operands, e.outputs, str(e.fusion.shape)
((True,), (True,), '(f32[4], f32[4])')
"""
from __future__ import annotations

from dataclasses import dataclass, field

from fusion.ir.attributes import Literal
from fusion.analysis.computation_partitioner import post_order
from fusion.errors import UnsupportedOpError
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.ir.element_types import COMPLEX_PART_TYPES
from fusion.ir.shape import ArrayShape, Shape, TupleShape, flatten_shape
from fusion.opcodes import traits
from fusion.transforms.complex_math import COMPLEX_MATH, Pair


@dataclass(frozen=True)
class ComplexExpansion:
    """A fusion over complex values and its expansion into real parts.

    ``module`` holds the expanded fused computation (and its expanded reducers) and an ENTRY
    computation whose parameters are the real operands, calling it with ``fusion``.
    ``operands``/``outputs``: per operand and per output leaf of the original fusion, whether
    it is complex (then two consecutive real operands or outputs: real part, imaginary part).
    """

    module: HloModule
    fusion: HloInstruction
    operands: tuple[bool, ...]
    outputs: tuple[bool, ...]


def is_complex_shape(shape: Shape) -> bool:
    return any(leaf.element_type.is_complex for leaf in flatten_shape(shape))


def involves_complex(module: HloModule, fusion_instr: HloInstruction) -> bool:
    """True when the fused computation (or a computation it calls) holds a complex value.

    >>> from fusion.text.parser import parse_hlo
    >>> m = parse_hlo("HloModule m\\nfc {\\n  a = f32[2] parameter(0)\\n  ROOT n = f32[2] negate(a)\\n}\\n"
    ...               "ENTRY e {\\n  x = f32[2] parameter(0)\\n  ROOT f = f32[2] fusion(x), kind=kLoop, calls=fc\\n}")
    >>> involves_complex(m, m.entry.root)
    False
    """
    return _holds_complex(module, [fusion_instr.attr("calls")])


def _holds_complex(module: HloModule, computations: list[str]) -> bool:
    """Whether one of ``computations``, or a computation they call, holds a complex value."""
    seen: set[str] = set()
    pending = list(computations)
    while pending:
        name = pending.pop()
        if name in seen or not module.has_computation(name):
            continue
        seen.add(name)
        for instr in module.computation(name).instructions:
            if is_complex_shape(instr.shape):
                return True
            pending.extend(instr.called_computations())
    return False


def _part_shape(shape: Shape) -> Shape:
    if isinstance(shape, TupleShape):
        return TupleShape(tuple(_part_shape(e) for e in shape.elements))
    return shape.with_dtype(COMPLEX_PART_TYPES.get(shape.dtype, shape.dtype))


def _leaves(entry) -> list:
    if isinstance(entry, tuple):
        return [leaf for e in entry for leaf in _leaves(e)]
    return [entry]


def _names(entry) -> list[str]:
    out: list[str] = []
    for leaf in _leaves(entry):
        out += [leaf.re, leaf.im] if isinstance(leaf, Pair) else [leaf]
    return out


@dataclass
class _Builder:
    """Builds one expanded computation: instructions, and the entry of every original name."""

    module: HloModule
    source: HloComputation
    new_computations: list[HloComputation]
    taken: set[str]
    instructions: list[HloInstruction] = field(default_factory=list)
    env: dict = field(default_factory=dict)
    names: set[str] = field(default_factory=set)
    shapes: dict[str, Shape] = field(default_factory=dict)

    def fresh(self, hint: str) -> str:
        name, k = hint, 0
        while name in self.names:
            k += 1
            name = f"{hint}.{k}"
        self.names.add(name)
        return name

    def add(self, hint: str, opcode: str, shape: Shape, operands: tuple[str, ...] = (),
            attributes: tuple = (), like: HloInstruction | None = None) -> str:
        name = self.fresh(hint)
        self.instructions.append(HloInstruction(name, opcode, shape, tuple(operands),
                                                tuple(attributes),
                                                like.location if like is not None else None))
        self.shapes[name] = shape
        return name

    def shape(self, name: str) -> ArrayShape:
        shape = self.shapes[name]
        assert isinstance(shape, ArrayShape)
        return shape

    # --- small helpers ---------------------------------------------------------------------
    def binary(self, opcode: str, a: str, b: str, hint: str, attrs: tuple = ()) -> str:
        shape = self.shape(a)
        if opcode == "compare":
            shape = shape.with_dtype("pred")
        return self.add(hint, opcode, shape, (a, b), attrs)

    def unary(self, opcode: str, a: str, hint: str) -> str:
        return self.add(hint, opcode, self.shape(a), (a,))

    def scalar_like(self, value: float, like: str, hint: str) -> str:
        shape = self.shape(like)
        c = self.add(hint + ".c", "constant", ArrayShape(shape.dtype, ()), (),
                     (("literal", Literal((), (value,))),))
        if not shape.dims:
            return c
        return self.add(hint, "broadcast", ArrayShape(shape.dtype, shape.dims), (c,),
                        (("dimensions", ()),))

    def select(self, p: str, a: str, b: str, hint: str) -> str:
        return self.add(hint, "select", self.shape(a), (p, a, b))


def _unsupported(instr: HloInstruction, why: str) -> UnsupportedOpError:
    loc = instr.location
    return UnsupportedOpError(f"{instr.opcode} %{instr.name} on complex values: {why}",
                              line=loc.line if loc else None,
                              column=loc.column if loc else None, where=instr.name)


def _expand_instruction(b: _Builder, instr: HloInstruction) -> None:
    args = [b.env[o] for o in instr.operands]
    involved = is_complex_shape(instr.shape) or any(
        is_complex_shape(b.source.instruction(o).shape) for o in instr.operands)
    grouping = _GROUPING.get(instr.opcode)
    if grouping is not None:  # a tuple of parts, or an element of one, complex or not
        b.env[instr.name] = grouping(instr, args)
        return
    calls_complex = _holds_complex(b.module, list(instr.called_computations()))
    if traits(instr.opcode).kernel_reducer:
        _expand_reducing(b, instr, args) if involved or calls_complex else _copy(b, instr, args)
        return
    if calls_complex:  # copied as is, its callee would keep complex values in the expansion
        raise _unsupported(instr, "a computation it calls holds complex values")
    if not involved:
        _copy(b, instr, args)
        return
    if traits(instr.opcode).data_movement:  # the same op on each part
        b.env[instr.name] = _per_part(b, instr, args)
        return
    rule = _EXPANSIONS.get(instr.opcode, COMPLEX_MATH.get(instr.opcode))
    if rule is None:
        raise _unsupported(instr, "no expansion into real parts for this op")
    b.env[instr.name] = rule(b, instr, args)


#: Ops that group values: they take and give parts as they are, complex or not.
_GROUPING = {
    "get-tuple-element": lambda instr, args: args[0][instr.attr("index")],
    "tuple": lambda instr, args: tuple(args),
}


def _per_part(b: _Builder, instr: HloInstruction, args: list) -> Pair:
    """A data-movement op applied to each part with the same attributes (its other operands
    are indices)."""
    part = _part_shape(instr.shape)
    return Pair(*(
        b.add(f"{instr.name}.{k}", instr.opcode, part,
              tuple(getattr(a, k) if isinstance(a, Pair) else a for a in args),
              instr.attributes, instr)
        for k in ("re", "im")))


def _constant(b, instr, args):
    name, part = instr.name, _part_shape(instr.shape)
    literal = instr.attr("literal")
    values = [complex(v) for v in literal.values]
    parts = [Literal(literal.dims, tuple(v.real for v in values)),
             Literal(literal.dims, tuple(v.imag for v in values))]
    return Pair(*(b.add(f"{name}.{k}", "constant", part, (), (("literal", p),), instr)
                  for k, p in zip(("re", "im"), parts)))


def _complex(b, instr, args):
    return Pair(args[0], args[1])


def _real(b, instr, args):
    x = args[0]
    return x.re if isinstance(x, Pair) else x


def _imag(b, instr, args):
    x = args[0]
    return x.im if isinstance(x, Pair) else b.scalar_like(0.0, x, instr.name)


def _convert(b, instr, args):
    name, shape = instr.name, instr.shape
    part = _part_shape(shape)
    x = args[0]
    if isinstance(x, Pair) and not is_complex_shape(shape):
        return b.add(name, "convert", shape, (x.re,), (), instr)  # the real part
    if isinstance(x, Pair):
        return Pair(b.add(name + ".re", "convert", part, (x.re,), (), instr),
                    b.add(name + ".im", "convert", part, (x.im,), (), instr))
    if isinstance(shape, ArrayShape) and shape.element_type.is_complex:
        re = b.add(name + ".re", "convert", part, (x,), (), instr)
        return Pair(re, b.scalar_like(0.0, re, name + ".im"))
    raise _unsupported(instr, "XLA converts complex values only to complex types")


def _select(b, instr, args):
    name = instr.name
    p, x, y = args
    if isinstance(p, Pair):
        raise _unsupported(instr, "a complex predicate")
    return Pair(b.select(p, x.re, y.re, name + ".re"), b.select(p, x.im, y.im, name + ".im"))


def _copy(b: _Builder, instr: HloInstruction, args: list) -> None:
    """An instruction without complex values, kept (its operands renamed)."""
    attrs = instr.attributes
    operands = tuple(a if isinstance(a, str) else _names(a)[0] for a in args)
    b.env[instr.name] = b.add(instr.name, instr.opcode, instr.shape, operands, attrs, instr)


def _add(b, instr, args):
    x, y = args
    op = instr.opcode
    return Pair(b.binary(op, x.re, y.re, instr.name + ".re"), b.binary(op, x.im, y.im, instr.name + ".im"))


def _negate(b, instr, args):
    (x,) = args
    return Pair(b.unary("negate", x.re, instr.name + ".re"), b.unary("negate", x.im, instr.name + ".im"))


def _compare(b, instr, args):
    x, y = args
    direction = instr.attr("direction")
    if direction not in ("EQ", "NE"):
        raise _unsupported(instr, f"compare direction {direction} (complex values are unordered)")
    n = instr.name
    attrs = tuple((k, v) for k, v in instr.attributes if k != "type")
    re = b.binary("compare", x.re, y.re, n + ".re", attrs)
    im = b.binary("compare", x.im, y.im, n + ".im", attrs)
    return b.add(n, "and" if direction == "EQ" else "or", b.shape(re), (re, im), (), instr)


#: The ops on complex values other than data movement -> their expansion into parts.
_EXPANSIONS = {
    "add": _add,
    "compare": _compare,
    "complex": _complex,
    "constant": _constant,
    "convert": _convert,
    "imag": _imag,
    "negate": _negate,
    "real": _real,
    "select": _select,
    "subtract": _add,
}


def _expand_reducing(b: _Builder, instr: HloInstruction, args: list) -> None:
    """A reduce, reduce-window or scatter over complex values: the variadic op over their
    parts, each complex operand two consecutive real ones (``reduce(x.re, x.im, init.re,
    init.im)``, ``scatter(o.re, o.im, indices, u.re, u.im)``), its ``to_apply`` expanded
    alike, which keeps XLA's order of the reducer's parameters (the values, then the
    others)."""
    reducer = real_parts_computation(b.module, b.module.computation(instr.attr("to_apply")),
                                  b.new_computations, b.taken)
    leaves = flatten_shape(instr.shape)
    parts = [_part_shape(leaf) for leaf in leaves for _ in range(2 if leaf.element_type.is_complex else 1)]
    attrs = tuple((k, reducer.name if k == "to_apply" else v) for k, v in instr.attributes)
    operands = tuple(n for a in args for n in _names(a))
    reduce = b.add(instr.name, instr.opcode, TupleShape(tuple(parts)), operands, attrs, instr)
    out, k = [], 0
    for leaf in leaves:
        gte = lambda i: b.add(f"{instr.name}.{i}", "get-tuple-element", parts[i], (reduce,),  # noqa: E731
                              (("index", i),))
        if leaf.element_type.is_complex:
            out.append(Pair(gte(k), gte(k + 1)))
            k += 2
        else:
            out.append(gte(k))
            k += 1
    b.env[instr.name] = tuple(out) if isinstance(instr.shape, TupleShape) else out[0]


def real_parts_computation(module: HloModule, comp: HloComputation,
                        new_computations: list[HloComputation], taken: set[str]) -> HloComputation:
    """``comp`` with every complex value as two real ones; parameters renumbered so that a
    complex parameter becomes two consecutive ones, and the root a tuple of all parts when it
    holds a complex value (or several); appended to ``new_computations``."""
    b = _Builder(module, comp, new_computations, taken)
    number = 0
    for param in sorted(comp.parameters, key=lambda p: p.attr("parameter_number")):
        shape = param.shape
        if isinstance(shape, ArrayShape) and shape.element_type.is_complex:
            part = _part_shape(shape)
            b.env[param.name] = Pair(
                b.add(param.name + ".re", "parameter", part, (), (("parameter_number", number),), param),
                b.add(param.name + ".im", "parameter", part, (), (("parameter_number", number + 1),), param))
            number += 2
        elif is_complex_shape(shape):
            raise _unsupported(param, "a tuple-shaped complex parameter")
        else:
            b.env[param.name] = b.add(param.name, "parameter", shape, (),
                                      (("parameter_number", number),), param)
            number += 1
    for name in post_order(comp):
        instr = comp.instruction(name)
        if instr.opcode != "parameter":
            _expand_instruction(b, instr)
    # A part is laid out as the op it came from (real(select(t)) as the transpose t): the
    # root's parts take the layouts the root declares, which its readers read.
    declared = [_part_shape(leaf) for leaf in flatten_shape(comp.root.shape)
                for _ in range(2 if leaf.element_type.is_complex else 1)]
    root = [r if b.shapes[r].effective_layout == d.effective_layout else
            b.add(r + ".laid_out", "copy", d, (r,))
            for r, d in zip(_names(b.env[comp.root_name]), declared)]
    if len(root) == 1 and not isinstance(comp.root.shape, TupleShape):
        root_name = root[0]
    else:
        root_name = b.add("tuple.pairs", "tuple", TupleShape(tuple(b.shapes[r] for r in root)), tuple(root))
    name, k = f"{comp.name}.pairs", 0
    while name in taken:
        k += 1
        name = f"{comp.name}.pairs{k}"
    taken.add(name)
    # Only what the root reaches (a complex value's unused part is not computed).
    expanded = HloComputation(name, tuple(b.instructions), root_name)
    live = set(post_order(expanded)) | {i.name for i in b.instructions if i.opcode == "parameter"}
    expanded = HloComputation(name, tuple(i for i in b.instructions if i.name in live), root_name)
    new_computations.append(expanded)
    return expanded


def expand_complex_fusion(module: HloModule, fusion_instr: HloInstruction) -> ComplexExpansion:
    """The expansion of ``fusion_instr`` (a fusion of ``module`` over complex values) into a
    fusion over real parts, in a module of its own (:class:`ComplexExpansion`)."""
    fused = module.computation(fusion_instr.attr("calls"))
    taken = {c.name for c in module.computations}
    new: list[HloComputation] = []
    expanded = real_parts_computation(module, fused, new, taken)
    params = sorted(fused.parameters, key=lambda p: p.attr("parameter_number"))
    operands = tuple(is_complex_shape(p.shape) for p in params)
    outputs = tuple(leaf.element_type.is_complex for leaf in flatten_shape(fused.root.shape))
    entry_params = sorted(expanded.parameters, key=lambda p: p.attr("parameter_number"))
    entry_name = f"{fusion_instr.name}.entry"
    while entry_name in taken:
        entry_name += "_"
    entry_instrs = [HloInstruction(f"arg{p.attr('parameter_number')}", "parameter", p.shape, (),
                                   (("parameter_number", p.attr("parameter_number")),))
                    for p in entry_params]
    attrs = tuple((k, expanded.name if k == "calls" else v) for k, v in fusion_instr.attributes
                  if k != "backend_config")
    fusion = HloInstruction(fusion_instr.name, "fusion", expanded.root.shape,
                            tuple(i.name for i in entry_instrs), attrs, fusion_instr.location)
    entry = HloComputation(entry_name, (*entry_instrs, fusion), fusion.name, is_entry=True)
    kept = tuple(c for c in module.computations if c.name != module.entry_name)
    expanded_module = HloModule(module.name, (*kept, *new, entry), entry_name)
    return ComplexExpansion(expanded_module, fusion, operands, outputs)


__all__ = ["ComplexExpansion", "Pair", "expand_complex_fusion", "involves_complex",
           "is_complex_shape", "real_parts_computation"]
