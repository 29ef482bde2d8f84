"""The host half of a generated kernel file: buffer specs, ``run(*tensors)`` and ``__main__``.

``run`` takes logical-shaped torch tensors (one per fusion operand), lays each out in memory
as its HLO layout says (``minor_to_major``), launches the kernel on the tensors' device (CUDA
tensors on the GPU; CPU tensors need the file imported under ``TRITON_INTERPRET=1``), and
returns logical views of the outputs.
"""
from __future__ import annotations

import math

from fusion.errors import UnsupportedOpError
from fusion.shape import ArrayShape
from triton_backend.codegen.addressing import minor_to_major

TORCH_DTYPES = {
    "pred": "torch.bool", "s8": "torch.int8", "s16": "torch.int16", "s32": "torch.int32",
    "s64": "torch.int64", "u8": "torch.uint8", "u16": "torch.uint16", "u32": "torch.uint32",
    "u64": "torch.uint64", "f16": "torch.float16", "bf16": "torch.bfloat16",
    "f32": "torch.float32", "f64": "torch.float64",
}

PRELUDE = '''import os

import torch

if __name__ == "__main__" and not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # standalone run without a GPU
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "0")  # numerics_policy: no FP contraction
'''

RUNTIME = '''

def _physical(tensor, order):
    return tensor.permute(*reversed(order)).contiguous() if order else tensor.contiguous()


def _logical(buffer, order):
    major_to_minor = list(reversed(order))
    return buffer.permute(*[major_to_minor.index(k) for k in range(len(order))]) if order else buffer


def run(*inputs):
    """Run the fusion on logical-shaped tensors; returns one tensor per fusion output."""
    if len(inputs) != len(INPUT_SPECS):
        raise ValueError(f"expected {len(INPUT_SPECS)} inputs, got {len(inputs)}")
    device = inputs[0].device if inputs else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    args = []
    for tensor, (name, dtype, dims, order) in zip(inputs, INPUT_SPECS):
        if tuple(tensor.shape) != dims or tensor.dtype != dtype:
            raise ValueError(f"input {name}: expected {dtype} {list(dims)}, got {tensor.dtype} {list(tensor.shape)}")
        args.append(_physical(tensor.to(device), order))
    for name, dtype, dims, order, values in CONSTANT_SPECS:
        args.append(_physical(torch.tensor(values, dtype=dtype, device=device).reshape(dims), order))
    outputs = [torch.empty([dims[k] for k in reversed(order)], dtype=dtype, device=device)
               for name, dtype, dims, order in OUTPUT_SPECS]
    KERNEL[GRID](*args, *outputs)
    return tuple(_logical(out, spec[3]) for out, spec in zip(outputs, OUTPUT_SPECS))


def example_inputs(seed=0):
    """Deterministic example inputs (small integers, normal floats, random preds)."""
    generator = torch.Generator().manual_seed(seed)
    result = []
    for name, dtype, dims, order in INPUT_SPECS:
        if dtype == torch.bool:
            result.append(torch.randint(0, 2, dims, generator=generator).bool())
        elif dtype.is_floating_point:
            result.append(torch.randn(dims, generator=generator, dtype=torch.float32).to(dtype))
        else:
            low = 0 if dtype in (torch.uint8, torch.uint16, torch.uint32, torch.uint64) else -5
            result.append(torch.randint(low, 6, dims, generator=generator).to(dtype))
    return result


if __name__ == "__main__":
    for spec, value in zip(OUTPUT_SPECS, run(*example_inputs())):
        print(spec[0], spec[1], list(value.shape), value.flatten()[:16].tolist())
'''


def torch_dtype(shape: ArrayShape, where: str) -> str:
    try:
        return TORCH_DTYPES[shape.dtype]
    except KeyError:
        raise UnsupportedOpError(f"element type {shape.dtype} has no torch dtype", where=where) from None


def buffer_spec(name: str, shape: ArrayShape) -> str:
    """``(name, torch dtype, dims, minor_to_major)`` as Python source."""
    return f"({name!r}, {torch_dtype(shape, name)}, {tuple(shape.dims)!r}, {minor_to_major(shape)!r})"


def constant_spec(name: str, shape: ArrayShape, values) -> str:
    text = ", ".join(_value_text(v) for v in values)
    return (f"({name!r}, {torch_dtype(shape, name)}, {tuple(shape.dims)!r}, "
            f"{minor_to_major(shape)!r}, [{text}])")


def _value_text(v) -> str:
    if isinstance(v, float) and math.isnan(v):
        return "float('nan')"
    if isinstance(v, float) and v in (float("inf"), float("-inf")):
        return "float('inf')" if v > 0 else "float('-inf')"
    return repr(v)
