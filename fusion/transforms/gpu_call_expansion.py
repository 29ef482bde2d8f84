"""XLA:GPU's library custom-calls written as the HLO ops they compute.

A dump XLA:GPU optimized runs its matmuls as ``__cublas$gemm`` / ``__cublas$lt$matmul``
custom-calls (``fusion.analysis.gemm_calls``) and its convolutions as ``__cudnn$conv*``
custom-calls (``fusion.analysis.cudnn_conv_calls``); JAX's cuDNN attention is a
``__cudnn$fmha*`` call (``fusion.analysis.cudnn_fmha_calls``), written as attention by
``transforms.fmha_expansion`` with the f32 max and add reducers it adds to the module.  Each becomes the ops of its formula, in
the type the library computes in: a ``dot`` (its dimension numbers, operand precision and
algorithm) or a ``convolution`` (its window, dim_labels and group counts; a backward one's,
the gradient's convolution), times its scale (``alpha``, ``conv_result_scale``), plus the
scaled ``C`` or side input, plus the bias broadcast (over a GEMM's trailing dims, along a
convolution's output features), then the activation (ReLU, ReLU6, ELU, leaky ReLU, sigmoid,
tanh, the tanh GELU), converted once to the result type.  Each ``get-tuple-element`` of the
call becomes the op computing what it read, under its name (no tuple is built, and the
workspace nobody reads is never filled); a call taken whole (a tuple operand, the ROOT)
keeps its name on a ``tuple`` of the result, the pre-activation value for an ``*_AUX``
epilogue and a zero workspace.  The fusion pass then fuses the epilogue into the dot's or
convolution's kernel, and a plain dot runs as cuBLAS again on a GPU
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
>>> [(i.name, i.opcode, str(i.shape)) for i in expand_gpu_library_calls(m).entry][2:]
[('c.gemm1', 'dot', 'f32[2,4]'), ('g', 'convert', 'bf16[2,4]')]
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace

from fusion.analysis.cudnn_conv_calls import (CudnnConvCall, convolution_to_run, cudnn_conv_call,
                                              is_cudnn_conv_call)
from fusion.analysis.cudnn_fmha_calls import (FmhaCall, cudnn_fmha_call, fmha_dims,
                                              is_cudnn_fmha_call)
from fusion.analysis.gemm_calls import GemmCall, gemm_call, is_gemm_call
from fusion.ir.attributes import Literal
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.ir.shape import ArrayShape, Shape
from fusion.transforms.fmha_expansion import fmha_outputs, reducer_computations
from fusion.transforms.map_inlining import fresh_names

#: The tanh approximation of GELU cuBLASLt's epilogue computes (and ``GemmRewriter`` matches).
GELU_CUBIC = 0.044715
GELU_SCALE = math.sqrt(2 / math.pi)


def is_gpu_library_call(instr: HloInstruction) -> bool:
    """A cuBLAS GEMM, cuDNN convolution or cuDNN fused attention custom-call (computed, or
    refused by name)."""
    return is_gemm_call(instr) or is_cudnn_conv_call(instr) or is_cudnn_fmha_call(instr)


def expand_gpu_library_calls(module: HloModule) -> HloModule:
    """``module`` with every cuBLAS GEMM and cuDNN convolution custom-call written as HLO ops
    (module docstring); ``UnsupportedOpError`` (located) for a call this project does not
    compute (a backward convolution with batch groups, an unknown epilogue)."""
    if not any(is_gpu_library_call(i) for c in module.computations for i in c):
        return module
    taken = {i.name for c in module.computations for i in c}
    reducers: dict[str, HloComputation] = {}
    if any(is_cudnn_fmha_call(i) for c in module.computations for i in c):
        names = {c.name for c in module.computations}
        reducers = reducer_computations(lambda hint: fresh_names(hint, names, "r")())
    comps = tuple(_expanded(c, taken, {k: r.name for k, r in reducers.items()})
                  for c in module.computations)
    return replace(module, computations=tuple(reducers.values()) + comps)


def _expanded(comp: HloComputation, taken: set[str], reducers: dict[str, str]
              ) -> HloComputation:
    calls = {i.name for i in comp if is_gpu_library_call(i)}
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
        call: GemmCall | CudnnConvCall | FmhaCall
        if is_cudnn_fmha_call(instr):
            ops = _Ops(instr, fresh_names(instr.name, taken, "fmha"))
            call = cudnn_fmha_call(instr)
            dims = fmha_dims(call, instr, lambda name: comp.instruction(name).shape)
            outputs = fmha_outputs(ops, call, dims, comp, reducers)
        elif is_gemm_call(instr):
            ops = _Ops(instr, fresh_names(instr.name, taken, "gemm"))
            call = gemm_call(instr)
            outputs = ops.gemm(call, comp)
        else:
            ops = _Ops(instr, fresh_names(instr.name, taken, "conv"))
            call = cudnn_conv_call(instr)
            outputs = ops.conv(call, comp)
        ops.name_outputs(call, outputs, [] if instr.name in whole else picks.get(instr.name, []))
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

    def gemm(self, call: GemmCall, comp: HloComputation) -> list[str]:
        """activation(alpha * dot + beta * C + bias), rounded once: D's op, then the
        pre-activation value's for an ``*_AUX`` epilogue."""
        at = replace(call.result, dtype=call.compute_type)
        x = self.add("dot", at, (call.lhs, call.rhs), call.dot_attributes)
        x = self.scaled(x, call.alpha, at)
        if call.c is not None:
            c = self.convert(call.c, comp.instruction(call.c).shape, at.dtype)
            x = self.add("add", at, (x, self.scaled(c, call.beta, at)))
        if call.bias is not None:
            bias = comp.instruction(call.bias).shape
            x = self.biased(x, call.bias, bias, tuple(range(at.rank - bias.rank, at.rank)), at)
        outputs = [self.convert(self.activated(x, call.activation, at), at, call.result.dtype)]
        if call.aux is not None:
            outputs.append(self.convert(x, at, call.aux.dtype))
        return outputs

    def conv(self, call: CudnnConvCall, comp: HloComputation) -> list[str]:
        """activation(scale * conv + side_input_scale * side + bias), rounded once; a backward
        convolution's conv is the gradient's (``convolution_to_run``)."""
        at = replace(call.result, dtype=call.compute_type)
        kernel = comp.instruction(call.rhs).shape
        attributes, steps = convolution_to_run(call, comp.instruction(call.lhs).shape.dims,
                                               kernel.dims)
        rhs = call.rhs
        for step, values in steps:  # the kernel a backward input convolution convolves with
            if step == "transpose":
                kernel = replace(kernel, dims=tuple(kernel.dims[k] for k in values), layout=None)
            elif step == "reshape":
                kernel = replace(kernel, dims=values, layout=None)
            rhs = self.add(step, kernel, (rhs,), (("dimensions", values),) if step != "reshape"
                           else ())
        x = self.add("convolution", at, (call.lhs, rhs), attributes)
        x = self.scaled(x, call.scale, at)
        if call.side_input is not None:
            side = self.convert(call.side_input, comp.instruction(call.side_input).shape,
                                at.dtype)
            x = self.add("add", at, (x, self.scaled(side, call.side_input_scale, at)))
        if call.bias is not None:
            x = self.biased(x, call.bias, comp.instruction(call.bias).shape,
                            (call.feature_dim,), at)
        x = self.activated(x, call.activation, at, call.leakyrelu_alpha)
        return [self.convert(x, at, call.result.dtype)]

    def scaled(self, x: str, factor: float, at: ArrayShape) -> str:
        return x if factor == 1 else self.add("multiply", at, (x, self.splat(factor, at)))

    def biased(self, x: str, bias: str, shape: ArrayShape, dims: tuple[int, ...],
               at: ArrayShape) -> str:
        spread = self.add("broadcast", at, (self.convert(bias, shape, at.dtype),),
                          (("dimensions", dims),))
        return self.add("add", at, (x, spread))

    def activated(self, x: str, activation: str | None, at: ArrayShape,
                  slope: float = 0.0) -> str:
        """``activation`` (a name of ``gemm_calls.EPILOGUES`` or ``cudnn_conv_calls.ACTIVATIONS``)
        applied to ``x``; ``slope``: a leaky ReLU's."""
        def op(opcode: str, *args: str, attrs: tuple = ()) -> str:
            shape = replace(at, dtype="pred") if opcode == "compare" else at
            return self.add(opcode, shape, args, attrs)

        if activation is None:
            return x
        if activation in ("sigmoid", "tanh"):
            return op("logistic" if activation == "sigmoid" else "tanh", x)
        if activation == "gelu":  # the tanh approximation
            cube = op("multiply", op("multiply", x, x), x)
            inner = op("add", x, op("multiply", self.splat(GELU_CUBIC, at), cube))
            tanh = op("tanh", op("multiply", self.splat(GELU_SCALE, at), inner))
            return op("multiply", op("multiply", self.splat(0.5, at), x),
                      op("add", self.splat(1.0, at), tanh))
        zero = self.splat(0.0, at)
        if activation in ("relu", "relu6"):
            x = op("maximum", x, zero)
            return op("minimum", x, self.splat(6.0, at)) if activation == "relu6" else x
        negative = op("exponential-minus-one", x) if activation == "elu" \
            else op("multiply", x, self.splat(slope, at))  # leaky_relu
        return op("select", op("compare", x, zero, attrs=(("direction", "GT"),)), x, negative)

    def name_outputs(self, call: GemmCall | CudnnConvCall | FmhaCall, outputs: list[str],
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


__all__ = ["GELU_CUBIC", "GELU_SCALE", "expand_gpu_library_calls", "is_gpu_library_call"]
