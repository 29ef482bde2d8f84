"""A fused HLO computation as plain PyTorch ops: the eager / torch.compile baseline of
``bench/gpu_runtime.py``.

One torch expression per HLO op (in the op's own dtype, as PyTorch users would write it);
an op without a rule raises ``KeyError`` and the benchmark skips that fusion.
"""
from __future__ import annotations

import numpy as np
import torch

from fusion.ir.hlo_module import HloComputation, HloModule
from fusion.ir.shape import ArrayShape
from triton_backend.host.input_validation import torch_dtype

_UNARY = {
    "abs": torch.abs, "ceil": torch.ceil, "cosine": torch.cos, "erf": torch.erf,
    "exponential": torch.exp, "exponential-minus-one": torch.expm1, "floor": torch.floor,
    "log": torch.log, "log-plus-one": torch.log1p, "logistic": torch.sigmoid,
    "negate": torch.neg, "not": lambda x: ~x, "round-nearest-even": torch.round,
    "rsqrt": torch.rsqrt, "sign": torch.sign, "sine": torch.sin, "sqrt": torch.sqrt,
    "tan": torch.tan, "tanh": torch.tanh,
}
_BINARY = {
    "add": torch.add, "and": lambda a, b: a & b, "atan2": torch.atan2,
    "divide": lambda a, b: torch.div(a, b, rounding_mode=None if a.is_floating_point() else "trunc"),
    "maximum": torch.maximum, "minimum": torch.minimum, "multiply": torch.mul,
    "or": lambda a, b: a | b, "power": torch.pow, "remainder": torch.fmod,
    "subtract": torch.sub, "xor": lambda a, b: a ^ b,
}
_COMPARE = {"EQ": torch.eq, "NE": torch.ne, "LT": torch.lt, "LE": torch.le, "GT": torch.gt,
            "GE": torch.ge}
_REDUCE = {"add": torch.sum, "maximum": torch.amax, "minimum": torch.amin, "multiply": torch.prod}


def _shape(instr) -> ArrayShape:
    if not isinstance(instr.shape, ArrayShape):
        raise KeyError(f"{instr.opcode} with tuple shape")
    return instr.shape


def check_supported(module: HloModule, computation: HloComputation) -> None:
    """``KeyError`` naming the first op without a torch rule."""
    for instr in computation.instructions:
        op = instr.opcode
        if op in _UNARY or op in _BINARY or op in ("broadcast", "bitcast", "clamp", "compare",
                                                   "concatenate", "constant", "convert", "iota",
                                                   "parameter", "reshape", "select", "slice",
                                                   "transpose"):
            continue
        if op == "reduce" and len(instr.operands) == 2 and \
                module.computation(instr.attr("to_apply")).root.opcode in _REDUCE:
            continue
        raise KeyError(f"no torch rule for {op} {instr.name!r}")


def torch_function(module: HloModule, computation: HloComputation):
    """``f(*tensors) -> tensor`` computing ``computation`` with torch ops."""
    check_supported(module, computation)
    instructions = computation.instructions
    params = {p.name: i for i, p in enumerate(computation.parameters)}

    def run(*tensors):
        env = {}
        device = tensors[0].device if tensors else torch.device("cpu")
        for instr in instructions:
            args = [env[o] for o in instr.operands]
            op = instr.opcode
            if op == "parameter":
                value = tensors[params[instr.name]]
            elif op in _UNARY:
                value = _UNARY[op](args[0])
            elif op in _BINARY:
                value = _BINARY[op](args[0], args[1])
            elif op == "compare":
                value = _COMPARE[instr.attr("direction")](args[0], args[1])
            elif op == "select":
                value = torch.where(args[0], args[1], args[2])
            elif op == "clamp":
                value = torch.minimum(torch.maximum(args[1], args[0]), args[2])
            elif op == "convert":
                value = args[0].to(torch_dtype(_shape(instr).dtype))
            elif op in ("bitcast", "reshape"):
                value = args[0].reshape(_shape(instr).dims)
            elif op == "transpose":
                value = args[0].permute(*instr.attr("dimensions"))
            elif op == "broadcast":
                value = _broadcast(args[0], instr.attr("dimensions"), _shape(instr).dims)
            elif op == "reduce":
                fn = _REDUCE[module.computation(instr.attr("to_apply")).root.opcode]
                dims = tuple(instr.attr("dimensions"))
                combine = _BINARY[module.computation(instr.attr("to_apply")).root.opcode]
                value = fn(args[0], dim=dims) if dims else args[0]
                value = combine(value.to(args[0].dtype), args[1])
            elif op == "constant":
                shape = _shape(instr)
                array = np.asarray(instr.attr("literal").values, np.float64).reshape(
                    instr.attr("literal").dims)
                value = torch.tensor(array, device=device).to(torch_dtype(shape.dtype))
                value = value.reshape(shape.dims)
            elif op == "iota":
                shape = _shape(instr)
                d = instr.attr("iota_dimension")
                line = torch.arange(shape.dims[d], device=device).to(torch_dtype(shape.dtype))
                view = [1] * len(shape.dims)
                view[d] = shape.dims[d]
                value = line.reshape(view).expand(shape.dims)
            elif op == "slice":
                index = tuple(slice(s.start, s.limit, s.stride) for s in instr.attr("slice"))
                value = args[0][index]
            elif op == "concatenate":
                value = torch.cat(args, dim=instr.attr("dimensions")[0])
            else:  # check_supported ran first
                raise KeyError(op)
            env[instr.name] = value
        return env[computation.root_name]

    return run


def _broadcast(x, dims, out_dims):
    view = [1] * len(out_dims)
    for source, target in enumerate(dims):
        view[target] = x.shape[source]
    order = sorted(range(len(dims)), key=lambda k: dims[k])
    return x.permute(*order).reshape(view).expand(*out_dims) if dims else x.reshape(view).expand(*out_dims)
