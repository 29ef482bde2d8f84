"""cuBLAS GEMM custom-calls written as the HLO ops they compute.

A dump XLA:GPU optimized runs its matmuls as ``__cublas$gemm`` / ``__cublas$lt$matmul``
custom-calls (``fusion.analysis.gemm_calls``).  Each becomes the ops of its formula, in the
type cuBLAS computes in: a ``dot`` (its dimension numbers, operand precision and algorithm),
times ``alpha``, plus ``beta`` times ``C``, plus the bias broadcast over the trailing dims,
then ``max(x, 0)`` or the tanh GELU, converted once to the result type.  Each
``get-tuple-element`` of the call becomes the op computing what it read, under its name (no
tuple is built, and the workspace nobody reads is never filled); a call taken whole (a tuple
operand, the ROOT) keeps its name on a ``tuple`` of the result, the pre-activation value for
an ``*_AUX`` epilogue and a zero workspace.  The fusion pass then fuses the
epilogue into the dot's kernel, and a plain dot runs as cuBLAS again on a GPU
(``templates/dot/library_call``).  A module without such calls is returned as is.

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... ENTRY e {
...   a = bf16[2,3] parameter(0)
...   b = bf16[3,4] parameter(1)
...   c = (bf16[2,4], s8[64]) custom-call(a, b), custom_call_target="__cublas$gemm",
...     backend_config={"gemm_backend_config":{"alpha_real":1,"beta":0,
...       "dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],
...         "rhs_contracting_dimensions":["0"]}}}
...   ROOT g = bf16[2,4] get-tuple-element(c), index=0
... }''')
>>> [(i.name, i.opcode, str(i.shape)) for i in expand_gemm_calls(m).entry][2:]
[('c.gemm1', 'dot', 'f32[2,4]'), ('g', 'convert', 'bf16[2,4]')]
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from fusion.analysis.gemm_calls import GemmCall, gemm_call, is_gemm_call
from fusion.ir.attributes import Literal
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.ir.shape import ArrayShape, Shape

#: The tanh approximation of GELU cuBLASLt's epilogue computes (and ``GemmRewriter`` matches).
GELU_CUBIC = 0.044715
GELU_SCALE = math.sqrt(2 / math.pi)


def expand_gemm_calls(module: HloModule) -> HloModule:
    """``module`` with every cuBLAS GEMM custom-call written as HLO ops (module docstring);
    ``UnsupportedOpError`` (located) for a call this project does not compute."""
    if not any(is_gemm_call(i) for c in module.computations for i in c):
        return module
    taken = {i.name for c in module.computations for i in c}
    comps = tuple(_expanded(c, taken) for c in module.computations)
    return replace(module, computations=comps)


def _expanded(comp: HloComputation, taken: set[str]) -> HloComputation:
    calls = {i.name for i in comp if is_gemm_call(i)}
    if not calls:
        return comp
    # get-tuple-element users of a call name the value they read (the call's tuple, and the
    # workspace nobody reads, are built only when something takes the call whole).
    picks: dict[str, list[HloInstruction]] = {}
    whole = {comp.root_name} & calls
    for instr in comp:
        for operand in instr.operands:
            if operand in calls and instr.opcode == "get-tuple-element":
                picks.setdefault(operand, []).append(instr)
            elif operand in calls:
                whole.add(operand)
    out: list[HloInstruction] = []
    for instr in comp:
        if instr.opcode == "get-tuple-element" and instr.operands[0] in calls - whole:
            continue  # named by the op computing what it reads
        if instr.name not in calls:
            out.append(instr)
            continue
        ops = _Ops(instr, _fresh(instr.name, taken))
        ops.formula(gemm_call(instr), comp, [] if instr.name in whole else picks.get(instr.name, []))
        out.extend(ops.instructions)
    return replace(comp, instructions=tuple(out))


class _Ops:
    """The instructions one call becomes, each at the call's source location."""

    def __init__(self, call_instr: HloInstruction, fresh: Callable[[], str]) -> None:
        self.call_instr = call_instr
        self.fresh = fresh
        self.instructions: list[HloInstruction] = []

    def add(self, opcode: str, shape: Shape, operands: tuple[str, ...],
            attributes: tuple = ()) -> str:
        name = self.fresh()
        self.instructions.append(HloInstruction(name, opcode, shape, operands, attributes,
                                                location=self.call_instr.location))
        return name

    def splat(self, value: float, like: ArrayShape) -> str:
        scalar = self.add("constant", ArrayShape(like.dtype, ()), (),
                          (("literal", Literal((), (value,))),))
        return self.add("broadcast", like, (scalar,), (("dimensions", ()),))

    def convert(self, name: str, shape: ArrayShape, dtype: str) -> str:
        return name if shape.dtype == dtype else self.add("convert", replace(shape, dtype=dtype),
                                                          (name,))

    def formula(self, call: GemmCall, comp: HloComputation,
                picks: list[HloInstruction]) -> None:
        """activation(alpha * dot + beta * C + bias), rounded once (module docstring), its
        outputs named for their readers (``name_outputs``)."""
        at = replace(call.result, dtype=call.compute_type)

        def binary(opcode: str, a: str, b: str) -> str:
            return self.add(opcode, at, (a, b))

        x = self.add("dot", at, (call.lhs, call.rhs), call.dot_attributes)
        if call.alpha != 1:
            x = binary("multiply", x, self.splat(call.alpha, at))
        if call.c is not None:
            c = self.convert(call.c, comp.instruction(call.c).shape, at.dtype)
            if call.beta != 1:
                c = binary("multiply", c, self.splat(call.beta, at))
            x = binary("add", x, c)
        if call.bias is not None:
            bias = comp.instruction(call.bias).shape
            b = self.convert(call.bias, bias, at.dtype)
            trailing = tuple(range(at.rank - bias.rank, at.rank))
            x = binary("add", x, self.add("broadcast", at, (b,), (("dimensions", trailing),)))
        pre = x
        if call.activation == "relu":
            x = binary("maximum", x, self.splat(0.0, at))
        elif call.activation == "gelu":
            cube = binary("multiply", binary("multiply", x, x), x)
            inner = binary("add", x, binary("multiply", self.splat(GELU_CUBIC, at), cube))
            tanh = self.add("tanh", at, (binary("multiply", self.splat(GELU_SCALE, at), inner),))
            half_x = binary("multiply", self.splat(0.5, at), x)
            x = binary("multiply", half_x, binary("add", self.splat(1.0, at), tanh))
        outputs = [self.convert(x, at, call.result.dtype)]
        if call.aux is not None:
            outputs.append(self.convert(pre, at, call.aux.dtype))
        self.name_outputs(call, outputs, picks)

    def name_outputs(self, call: GemmCall, outputs: list[str],
                     picks: list[HloInstruction]) -> None:
        """Give the ops their readers' names: each ``get-tuple-element`` user's (``picks``)
        to the op computing what it reads (a ``copy`` for a second reader); else, the call
        taken whole, the call's name to its tuple (to ``D``'s op for a non-tuple call)."""
        if not call.tuple_result:
            self.rename(outputs[0], self.call_instr.name)
            return
        if not picks:
            if call.workspace:
                outputs.append(self.splat(0, self.call_instr.shape.elements[-1]))
            self.add("tuple", self.call_instr.shape, tuple(outputs))
            self.rename(self.instructions[-1].name, self.call_instr.name)
            return
        if call.workspace and any(p.attr("index") == len(outputs) for p in picks):
            outputs.append(self.splat(0, self.call_instr.shape.elements[-1]))
        named: dict[int, str] = {}
        for pick in picks:
            index = pick.attr("index")
            if index in named:
                self.add("copy", pick.shape, (named[index],))
                self.rename(self.instructions[-1].name, pick.name)
                continue
            self.rename(outputs[index], pick.name)
            named[index] = outputs[index] = pick.name

    def rename(self, old: str, new: str) -> None:
        """Call the op named ``old`` ``new``, in the ops after it too."""
        self.instructions = [
            i.replace(name=new if i.name == old else i.name,
                      operands=tuple(new if o == old else o for o in i.operands))
            for i in self.instructions]


def _fresh(base: str, taken: set[str]) -> Callable[[], str]:
    def fresh() -> str:
        n = 1
        while f"{base}.gemm{n}" in taken:
            n += 1
        taken.add(f"{base}.gemm{n}")
        return f"{base}.gemm{n}"
    return fresh


__all__ = ["GELU_CUBIC", "GELU_SCALE", "expand_gemm_calls"]
