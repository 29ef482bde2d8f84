"""Canonicalization before fusion: the algebraic clean-ups XLA runs before its fusion passes.

JAX lowers programs with many no-op ops (``reshape`` to the same shape, ``broadcast`` with the
identity mapping, ``reshape(reshape(x))`` round trips), calls to tiny helper computations and
scalar constants broadcast only to be combined by identity elements (``max(x, -inf)``).  XLA's
``CallInliner``, ``TupleSimplifier``, ``AlgebraicSimplifier``, ``HloConstantFolding``,
``HloCSE`` and ``HloDCE`` remove them; this module does the same, with one rule per opcode in
``REWRITE_RULES`` (alphabetical), plus constant folding of small all-constant elementwise ops,
merging of equal instructions (``common_subexpressions``) and dead-code elimination.  Like XLA's
``ReshapeMover``, a convert of a reshape becomes a reshape of the convert, so the reshape (a
view) is last and the convert can join the kernel of the value it converts.

Every rewrite preserves the value bit for bit under the reference evaluator: identities are
only applied where they are exact (``x * 1``, ``x - 0``, ``x + (-0.0)`` for floats; ``x + 0``
for integers; ``max(x, -inf)``), and constants are folded with the evaluator itself, which
rounds per op exactly as the unfolded program would.

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... ENTRY e {
...   p = f32[4] parameter(0)
...   r = f32[4,1] reshape(p)
...   b = f32[4,1] broadcast(r), dimensions={0,1}
...   s = f32[4] reshape(b)
...   one = f32[] constant(1)
...   ones = f32[4] broadcast(one), dimensions={}
...   ROOT m = f32[4] multiply(s, ones)
... }''')
>>> [i.opcode for i in canonicalize(m).entry.instructions]
['parameter']
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from fusion.analysis.dimension_size import dimension_of, static_dimension_size
from fusion.analysis.splat import splat_value
from fusion.ir.attributes import Literal
from fusion.ir.call_graph import reachable_computations
from fusion.ir.element_types import element_type
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.ir.instruction_order import in_dependency_order
from fusion.opcodes import opcodes_with, traits
from fusion.ir.shape import ArrayShape
from fusion.evaluator import evaluate
from fusion.transforms.common_subexpressions import merge_common_subexpressions
from fusion.transforms.map_inlining import inline_scalar_computation, is_scalar_elementwise

# Constants whose folded value has at most this many elements are folded (XLA folds larger
# ones too, but materializing big literals only makes the HLO text harder to read).
MAX_FOLDED_ELEMENTS = 64

# Ops whose effect is more than their value: never removed as dead code.
SIDE_EFFECT_OPCODES = opcodes_with("side_effect")

# Rewrites enable rewrites (an inlined call exposes a reshape pair): iterate, bounded.
_MAX_ITERATIONS = 20


@dataclass(frozen=True)
class Rewrite:
    """What a rule does to one instruction: replace its uses by ``alias`` (an existing value),
    or emit ``instructions`` in its place (the last one takes over the instruction's name)."""

    alias: str | None = None
    instructions: tuple[HloInstruction, ...] = ()


@dataclass
class _Context:
    """The computation being rewritten so far (instructions already emitted, by name)."""

    module: HloModule
    emitted: dict[str, HloInstruction]
    taken: set[str]

    def get(self, name: str) -> HloInstruction:
        return self.emitted[name]

    def fresh(self, base: str) -> str:
        """A module-unique name derived from ``base`` (XLA style ``name.N``)."""
        stem = base.rsplit(".", 1)[0] if base.rsplit(".", 1)[-1].isdigit() else base
        n = 1
        while f"{stem}.{n}" in self.taken:
            n += 1
        name = f"{stem}.{n}"
        self.taken.add(name)
        return name


Rule = Callable[[HloInstruction, _Context], "Rewrite | None"]


def _same_shape(a, b) -> bool:
    return (isinstance(a, ArrayShape) and isinstance(b, ArrayShape)
            and a.same_dims_and_type(b) and a.effective_layout == b.effective_layout)


def _alias_if_same(instr: HloInstruction, operand: HloInstruction) -> Rewrite | None:
    return Rewrite(alias=operand.name) if _same_shape(instr.shape, operand.shape) else None


def _is(value: object, target: float) -> bool:
    """``value`` equals ``target`` including the sign of zero."""
    if isinstance(value, bool) or value is None:
        return False
    if isinstance(value, complex):
        return False
    return value == target and math.copysign(1, float(value)) == math.copysign(1, target)


def _kind(instr: HloInstruction) -> str:
    shape = instr.shape
    return element_type(shape.dtype).kind if isinstance(shape, ArrayShape) else "tuple"


def _identity_operand(instr: HloInstruction, ctx: _Context, operand_index: int,
                      accepts: Callable[[object, str], bool]) -> Rewrite | None:
    """Alias ``instr`` to its other operand when operand ``operand_index`` is an identity."""
    other = ctx.get(instr.operands[1 - operand_index])
    value = splat_value(ctx.get(instr.operands[operand_index]), ctx.get)
    if value is None or not accepts(value, _kind(instr)):
        return None
    return _alias_if_same(instr, other)


def _rule_add(instr: HloInstruction, ctx: _Context) -> Rewrite | None:
    # x + 0.0 is not x for x = -0.0, but x + (-0.0) is; integers have one zero.
    def zero(v, kind):
        return _is(v, -0.0) if kind == "float" else kind in ("signed", "unsigned") and v == 0
    return _identity_operand(instr, ctx, 1, zero) or _identity_operand(instr, ctx, 0, zero)


def _rule_broadcast(instr: HloInstruction, ctx: _Context) -> Rewrite | None:
    operand = ctx.get(instr.operands[0])
    dims = tuple(instr.attr("dimensions", ()))
    if dims == tuple(range(len(dims))) and _same_shape(instr.shape, operand.shape):
        return Rewrite(alias=operand.name)
    if operand.opcode == "broadcast":
        inner = tuple(operand.attr("dimensions", ()))
        composed = tuple(dims[d] for d in inner)
        return Rewrite(instructions=(instr.replace(
            operands=operand.operands, attributes=_with_attr(instr, "dimensions", composed)),))
    return None


def _rule_call(instr: HloInstruction, ctx: _Context) -> Rewrite | None:
    # XLA's CallInliner: the callee's instructions take the call's place, renamed apart.
    callee = ctx.module.computation(instr.attr("to_apply"))
    renamed: dict[str, str] = {}
    out: list[HloInstruction] = []
    for inner in callee.instructions:
        if inner.opcode == "parameter":
            renamed[inner.name] = instr.operands[inner.attr("parameter_number")]
            continue
        new_name = inner.name if inner.name not in ctx.taken else ctx.fresh(inner.name)
        ctx.taken.add(new_name)
        renamed[inner.name] = new_name
        out.append(inner.replace(name=new_name,
                                 operands=tuple(renamed[o] for o in inner.operands)))
    root = renamed[callee.root_name]
    if out and out[-1].name == root:
        # The root keeps the call's name, so users and the computation root stay valid.
        out[-1] = out[-1].replace(name=instr.name)
        out = [i.replace(operands=tuple(instr.name if o == root else o for o in i.operands))
               for i in out]
        return Rewrite(instructions=tuple(out))
    return Rewrite(alias=root, instructions=tuple(out)) if out else Rewrite(alias=root)


def _rule_convert(instr: HloInstruction, ctx: _Context) -> Rewrite | None:
    operand = ctx.get(instr.operands[0])
    if operand.opcode == "reshape":
        # XLA's ReshapeMover: convert(reshape(x)) is reshape(convert(x)), element for element.
        # With the reshape last, the convert joins the kernel producing ``x`` (a dot's or
        # attention's epilogue writes the narrow type) and the reshape stays a view: grouped-
        # query attention's output [b, kv_heads, group, ...] -> [b, heads, ...], then bf16.
        source = ctx.get(operand.operands[0])
        if isinstance(source.shape, ArrayShape) and isinstance(instr.shape, ArrayShape):
            converted = instr.replace(name=ctx.fresh(instr.name), operands=(source.name,),
                                      shape=source.shape.with_dtype(instr.shape.dtype))
            return Rewrite(instructions=(converted, operand.replace(
                name=instr.name, shape=instr.shape, operands=(converted.name,),
                location=instr.location)))
    return _alias_if_same(instr, operand)


def _rule_copy(instr: HloInstruction, ctx: _Context) -> Rewrite | None:
    # A copy that keeps the layout moves no data anywhere that matters to the value.
    return _alias_if_same(instr, ctx.get(instr.operands[0]))


def _rule_get_dimension_size(instr: HloInstruction, ctx: _Context) -> Rewrite | None:
    # A static dim's size is a constant (XLA's DynamicPadder); a dynamic one stays, refused.
    operand = ctx.get(instr.operands[0]).shape
    if not isinstance(operand, ArrayShape) or (operand.dynamic and
                                               operand.dynamic[dimension_of(instr)]):
        return None
    size = static_dimension_size(instr, operand)
    return Rewrite(instructions=(HloInstruction(
        instr.name, "constant", instr.shape, (), (("literal", Literal((), (size,))),),
        instr.location),))


def _rule_get_tuple_element(instr: HloInstruction, ctx: _Context) -> Rewrite | None:
    # XLA's TupleSimplifier: an element of a tuple built here is that element (an inlined
    # call returning a tuple, as JAX's jvp of a jitted ``jnp.where`` does, leaves these).
    operand = ctx.get(instr.operands[0])
    if operand.opcode != "tuple":
        return None
    return Rewrite(alias=operand.operands[instr.attr("index")])


def _rule_divide(instr: HloInstruction, ctx: _Context) -> Rewrite | None:
    return _identity_operand(instr, ctx, 1, lambda v, k: k != "pred" and _is(v, 1.0))


def _rule_maximum(instr: HloInstruction, ctx: _Context) -> Rewrite | None:
    def lowest(v, kind):
        return kind == "float" and _is(v, -math.inf)
    return _identity_operand(instr, ctx, 1, lowest) or _identity_operand(instr, ctx, 0, lowest)


def _rule_minimum(instr: HloInstruction, ctx: _Context) -> Rewrite | None:
    def highest(v, kind):
        return kind == "float" and _is(v, math.inf)
    return _identity_operand(instr, ctx, 1, highest) or _identity_operand(instr, ctx, 0, highest)


def _rule_multiply(instr: HloInstruction, ctx: _Context) -> Rewrite | None:
    def one(v, kind):
        return kind != "pred" and _is(v, 1.0)
    return _identity_operand(instr, ctx, 1, one) or _identity_operand(instr, ctx, 0, one)


def _rule_reduce(instr: HloInstruction, ctx: _Context) -> Rewrite | None:
    # XLA's AlgebraicSimplifier: a reduction over dims of extent 1 only combines each element
    # with the init once: reducer(init, x) elementwise (JAX's gradient of a broadcast over a
    # unit dim writes one; as a reduction it would pass for a row statistic).
    if len(instr.operands) != 2 or not isinstance(instr.shape, ArrayShape):
        return None
    source = ctx.get(instr.operands[0])
    reducer = ctx.module.computation(instr.attr("to_apply"))
    if not isinstance(source.shape, ArrayShape) or not is_scalar_elementwise(reducer) or \
            any(source.shape.dims[i] != 1 for i in instr.attr("dimensions")):
        return None
    shape = instr.shape
    flat = instr.replace(name=ctx.fresh(f"{instr.name}.rows"), opcode="reshape",
                         operands=(source.name,), attributes=())
    init = instr.replace(name=ctx.fresh(f"{instr.name}.init"), opcode="broadcast",
                         operands=(instr.operands[1],), attributes=(("dimensions", ()),))

    def fresh() -> str:
        name = ctx.fresh(f"{instr.name}.combine")
        return name

    ops = inline_scalar_computation(reducer, (init.name, flat.name), shape, fresh)
    ops[-1] = ops[-1].replace(name=instr.name, location=instr.location)
    return Rewrite(instructions=(flat, init, *ops))


def _rule_reshape(instr: HloInstruction, ctx: _Context) -> Rewrite | None:
    operand = ctx.get(instr.operands[0])
    if _same_shape(instr.shape, operand.shape):
        return Rewrite(alias=operand.name)
    if operand.opcode == "reshape":
        source = ctx.get(operand.operands[0])
        if _same_shape(instr.shape, source.shape):
            return Rewrite(alias=source.name)
        return Rewrite(instructions=(instr.replace(operands=(source.name,)),))
    if operand.opcode == "broadcast" and ctx.get(operand.operands[0]).shape.dims == ():
        # reshape(broadcast(scalar)) is a broadcast of the scalar to the new shape.
        return Rewrite(instructions=(instr.replace(
            opcode="broadcast", operands=operand.operands, attributes=(("dimensions", ()),)),))
    return None


def _rule_subtract(instr: HloInstruction, ctx: _Context) -> Rewrite | None:
    return _identity_operand(
        instr, ctx, 1, lambda v, k: k in ("float", "signed", "unsigned") and _is(v, 0.0))


def _rule_transpose(instr: HloInstruction, ctx: _Context) -> Rewrite | None:
    operand = ctx.get(instr.operands[0])
    perm = tuple(instr.attr("dimensions"))
    if perm == tuple(range(len(perm))):
        return _alias_if_same(instr, operand)
    if operand.opcode == "transpose":
        inner = tuple(operand.attr("dimensions"))
        composed = tuple(inner[p] for p in perm)
        source = ctx.get(operand.operands[0])
        if composed == tuple(range(len(composed))) and _same_shape(instr.shape, source.shape):
            return Rewrite(alias=source.name)
        return Rewrite(instructions=(instr.replace(
            operands=(source.name,), attributes=_with_attr(instr, "dimensions", composed)),))
    return None


# One rule per opcode, alphabetical.
REWRITE_RULES: dict[str, Rule] = {
    "add": _rule_add,
    "broadcast": _rule_broadcast,
    "call": _rule_call,
    "convert": _rule_convert,
    "copy": _rule_copy,
    "divide": _rule_divide,
    "get-dimension-size": _rule_get_dimension_size,
    "get-tuple-element": _rule_get_tuple_element,
    "maximum": _rule_maximum,
    "minimum": _rule_minimum,
    "multiply": _rule_multiply,
    "reduce": _rule_reduce,
    "reshape": _rule_reshape,
    "subtract": _rule_subtract,
    "transpose": _rule_transpose,
}


def _with_attr(instr: HloInstruction, key: str, value: object) -> tuple:
    return tuple((k, value if k == key else v) for k, v in instr.attributes)


def _fold_constant(instr: HloInstruction, ctx: _Context) -> Rewrite | None:
    """Evaluate a small elementwise/convert/reshape op whose operands are all constants."""
    # Not a map (a call) or a stochastic-convert (randomness): they are not ``foldable``.
    foldable = traits(instr.opcode).foldable or instr.opcode == "reshape"
    if not foldable or not isinstance(instr.shape, ArrayShape) or not instr.operands:
        return None
    if instr.shape.num_elements > MAX_FOLDED_ELEMENTS or _kind(instr) == "complex":
        return None
    operands = [ctx.get(o) for o in dict.fromkeys(instr.operands)]
    if any(o.opcode != "constant" or not isinstance(o.shape, ArrayShape) for o in operands):
        return None
    if any(_kind(o) == "complex" for o in operands):
        return None

    params = tuple(o.replace(location=None) for o in operands)
    comp = HloComputation("fold", params + (instr.replace(location=None),), instr.name, True)
    value = evaluate(HloModule("fold", (comp,), "fold"))[0]
    literal = Literal(tuple(instr.shape.dims), tuple(_python_value(v, _kind(instr))
                                                     for v in np.asarray(value).ravel()))
    return Rewrite(instructions=(HloInstruction(
        instr.name, "constant", instr.shape, (), (("literal", literal),), instr.location),))


def _python_value(v: object, kind: str) -> object:
    if kind == "pred":
        return bool(v)
    if kind in ("signed", "unsigned"):
        return int(v)
    return float(v)


def _rewrite_once(comp: HloComputation, module: HloModule, taken: set[str]) -> HloComputation:
    ctx = _Context(module, {}, taken)
    aliases: dict[str, str] = {}
    out: list[HloInstruction] = []
    for instr in comp.instructions:
        instr = instr.replace(operands=tuple(aliases.get(o, o) for o in instr.operands))
        rule = REWRITE_RULES.get(instr.opcode)
        rewrite = _fold_constant(instr, ctx) or (rule(instr, ctx) if rule else None)
        if rewrite is None:
            new = (instr,)
        else:
            new = tuple(i.replace(operands=tuple(aliases.get(o, o) for o in i.operands))
                        for i in rewrite.instructions)
            if rewrite.alias is not None:
                aliases[instr.name] = aliases.get(rewrite.alias, rewrite.alias)
        for i in new:
            ctx.emitted[i.name] = i
            out.append(i)
    root = aliases.get(comp.root_name, comp.root_name)
    return _dead_code_eliminated(merge_common_subexpressions(
        HloComputation(comp.name, tuple(out), root, comp.is_entry, comp.location),
        leaves=False))


def _dead_code_eliminated(comp: HloComputation) -> HloComputation:
    live: set[str] = set()
    by_name = {i.name: i for i in comp.instructions}
    stack = [comp.root_name] + [i.name for i in comp.instructions
                                if i.opcode == "parameter" or i.opcode in SIDE_EFFECT_OPCODES]
    while stack:
        name = stack.pop()
        if name in live:
            continue
        live.add(name)
        stack.extend(by_name[name].operands)
    kept = tuple(i for i in comp.instructions if i.name in live)
    return HloComputation(comp.name, kept, comp.root_name, comp.is_entry, comp.location)


def _all_names(computations: Iterable[HloComputation]) -> set[str]:
    return {i.name for c in computations for i in c.instructions}


def canonicalize(module: HloModule) -> HloModule:
    """``module`` with calls inlined, no-op ops removed, exact identities and small constant
    expressions folded, and dead instructions and computations dropped.

    Evaluates to bit-identical results.  Computations called by fusions are left as they are.

    >>> from fusion.text.parser import parse_hlo
    >>> m = parse_hlo('''HloModule m
    ... ENTRY e {
    ...   p = f32[2,3] parameter(0)
    ...   t = f32[3,2] transpose(p), dimensions={1,0}
    ...   ROOT u = f32[2,3] transpose(t), dimensions={1,0}
    ... }''')
    >>> canonicalize(m).entry.root_name
    'p'
    """
    fused_bodies = {i.attr("calls") for c in module.computations for i in c.instructions
                    if i.opcode == "fusion" and i.has_attr("calls")}
    current = in_dependency_order(module)  # the rewrites walk each computation top to bottom
    for _ in range(_MAX_ITERATIONS):
        taken = _all_names(current.computations)
        comps = tuple(c if c.name in fused_bodies else _rewrite_once(c, current, taken)
                      for c in current.computations)
        changed = comps != current.computations
        current = HloModule(current.name, comps, current.entry_name, current.attributes,
                            current.stack_frames)
        if not changed:
            break
    reachable = set(reachable_computations(current, current.entry_name))
    return HloModule(current.name, tuple(c for c in current.computations if c.name in reachable),
                     current.entry_name, current.attributes, current.stack_frames)
