"""The host half of a generated kernel file: buffer specs, ``run(*tensors)`` and ``__main__``.

``run`` takes logical-shaped torch tensors (one per fusion operand), lays each out in memory
as its HLO layout says (``minor_to_major``), launches the kernel on the tensors' device (CUDA
tensors on the GPU; CPU tensors need the file imported under ``TRITON_INTERPRET=1``), and
returns logical views of the outputs.  It launches with the file's ``NUM_WARPS`` and
``NUM_STAGES`` (Triton's defaults where a file sets none); ``run(*tensors, num_warps=..,
num_stages=..)`` overrides them (the autotuner's sweep launches through it).

Buffers in a physical layout (tiled, ``T(...)``, or word-packed) are passed and returned in
their physical form instead: flat tensors of the layout's physical buffer, padding included,
as ``host_packing.pack_tensor`` gives them (``torch.uint32`` words when elements share 32-bit
words, else elements).  Their spec describes that flat buffer (``dims`` = its length, order
``(0,)``), and such outputs (listed in ``PADDED_OUTPUTS``) are allocated zero-filled: the
kernel never writes padding-only words or elements, so their padding reads zero.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

from fusion.errors import UnsupportedOpError
from fusion.ir.hlo_module import HloInstruction
from fusion.ir.shape import ArrayShape
from triton_backend.host.host_dtypes import HOST_DTYPE_NAMES
from triton_backend.lowering.emitter.addressing import (
    buffer_addressing,
    is_physical_layout,
    minor_to_major,
)

#: The torch dtype holding each element type in a kernel file's buffer specs.
TORCH_DTYPES = {hlo: f"torch.{name}" for hlo, name in HOST_DTYPE_NAMES.items()}

PRELUDE = '''import functools
import operator
import os

import torch

if __name__ == "__main__" and not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # standalone run without a GPU
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "0")  # numerics_policy: no FP contraction

PADDED_OUTPUTS = ()  # outputs in a physical layout: allocated zero-filled (padding reads 0)
OUTPUT_FROM_INPUT = ()  # (output, input) pairs: the output starts as a copy of the input
# Scratch buffers passed after the outputs, (name, dtype, (entries,), (0,), zeroed): split-K's
# partial sums and its arrival counters, which the kernel leaves zero again.
SCRATCH_SPECS = ()
'''

RUNTIME = '''

def _to_physical(order):
    """The permutation of a logical tensor to its physical buffer; None when it is row-major."""
    perm = tuple(reversed(order))
    return None if perm == tuple(range(len(order))) else perm


def _to_logical(order):
    """The permutation of a physical buffer back to the logical dims; None when row-major."""
    major_to_minor = list(reversed(order))
    perm = tuple(major_to_minor.index(k) for k in range(len(order)))
    return None if perm == tuple(range(len(order))) else perm


def _physical(tensor, order):
    perm = _to_physical(order)
    return (tensor if perm is None else tensor.permute(*perm)).contiguous()


def _logical(buffer, order):
    perm = _to_logical(order)
    return buffer if perm is None else buffer.permute(*perm)


# Decided once at import, not on every call: the permutations (None: row-major, no permute)
# and the physical shapes of the outputs.
_INPUT_PERMS = tuple(_to_physical(spec[3]) for spec in INPUT_SPECS)
_OUTPUT_PERMS = tuple(_to_logical(spec[3]) for spec in OUTPUT_SPECS)
_OUTPUT_ALLOCATIONS = tuple(
    (torch.zeros if i in PADDED_OUTPUTS else torch.empty, [dims[k] for k in reversed(order)], dtype)
    for i, (name, dtype, dims, order) in enumerate(OUTPUT_SPECS))
_CONSTANTS = {}  # device -> the constant buffers, made on the first call on that device
_STREAM_SCRATCH = {}  # (device index, CUDA stream) -> the scratch buffers launches there share

LAUNCH_OPTIONS = ("num_warps", "num_stages")

try:  # private allocators (what torch.compile's generated code calls): torch.empty without them
    from torch._C._dynamo.guards import _empty_strided_cpu, _empty_strided_cuda
    _EMPTY_STRIDED = {"cpu": _empty_strided_cpu, "cuda": _empty_strided_cuda}
except ImportError:
    _EMPTY_STRIDED = {}


def _constants(device):
    buffers = _CONSTANTS.get(device)
    if buffers is None:
        buffers = _CONSTANTS[device] = [
            _physical(torch.tensor(values, dtype=dtype, device=device).reshape(dims), order)
            for name, dtype, dims, order, values in CONSTANT_SPECS]
    return buffers


def _scratch(device):
    """The scratch buffers of one launch.  Launches on one CUDA stream run one after another,
    so they share one set: the zeroed buffers (counters the kernel sets back to zero) and the
    others (written before they are read).  Another stream, a CUDA graph being captured (it
    keeps buffers of its own, zeroed in the graph) and the interpreter (whose launches other
    threads may interleave) get sets of their own.  The stream is read with torch's raw
    calls: a ``torch.cuda.Stream`` object per launch cost more than the launch."""
    if device.type == "cuda" and not torch._C._cuda_isCurrentStreamCapturing():
        index = device.index if device.index is not None else torch.cuda.current_device()
        key = (index, torch._C._cuda_getCurrentRawStream(index))
        shared = _STREAM_SCRATCH.get(key)
        if shared is None:
            shared = _STREAM_SCRATCH[key] = _new_scratch(device)
        return shared
    return _new_scratch(device)


def _new_scratch(device):
    return [(torch.zeros if zeroed else torch.empty)(dims, dtype=dtype, device=device)
            for name, dtype, dims, order, zeroed in SCRATCH_SPECS]


def _kernel_launcher(device):
    """``KERNEL[GRID]``; on a GPU, launched straight through its compiled launcher from the
    second call on (``triton_backend.runtime.direct_launch``: Triton's per-call binding cost
    more than the launch)."""
    if device.type == "cuda" and hasattr(KERNEL, "params"):
        from triton_backend.runtime.direct_launch import direct_launcher, enabled
        if enabled():
            return direct_launcher(KERNEL, GRID)
    return KERNEL[GRID]


def _with_scratch(kernel, device):
    """``kernel`` launched with the file's scratch buffers after its other arguments."""
    def launch(*args, **options):
        kernel(*args, *_scratch(device), **options)

    return launch


def _launch_options(caller, launch_options):
    if launch_options:
        unknown = sorted(set(launch_options) - set(LAUNCH_OPTIONS))
        if unknown:
            raise TypeError(f"{caller}() got unknown launch options {unknown}; known: {list(LAUNCH_OPTIONS)}")
    # NUM_WARPS / NUM_STAGES where the file sets them (templates that do not: Triton's defaults).
    options = {k: globals()[k.upper()] for k in LAUNCH_OPTIONS if k.upper() in globals()}
    options.update(launch_options)
    return options


def run(*inputs, **launch_options):
    """Run the fusion on logical-shaped tensors; returns one tensor per fusion output.

    ``launch_options`` (``num_warps``, ``num_stages``) override the file's ``NUM_WARPS`` and
    ``NUM_STAGES``.
    """
    options = _launch_options("run", launch_options)
    if len(inputs) != len(INPUT_SPECS):
        raise ValueError(f"expected {len(INPUT_SPECS)} inputs, got {len(inputs)}")
    device = inputs[0].device if inputs else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    args = []
    for tensor, (name, dtype, dims, order), perm in zip(inputs, INPUT_SPECS, _INPUT_PERMS):
        if tensor.shape != dims or tensor.dtype != dtype:
            raise ValueError(f"input {name}: expected {dtype} {list(dims)}, got {tensor.dtype} {list(tensor.shape)}")
        if tensor.device != device:
            tensor = tensor.to(device)
        args.append((tensor if perm is None else tensor.permute(*perm)).contiguous())
    if CONSTANT_SPECS:
        args.extend(_constants(device))
    outputs = [allocate(shape, dtype=dtype, device=device)
               for allocate, shape, dtype in _OUTPUT_ALLOCATIONS]
    # An in-place output (scatter's) starts as a copy of the input it updates.
    for i, source in OUTPUT_FROM_INPUT:
        outputs[i].copy_(args[source])
    scratch = _scratch(device) if SCRATCH_SPECS else ()
    if options:
        KERNEL[GRID](*args, *outputs, *scratch, **options)
    else:  # a file naming no launch options: Triton's defaults
        KERNEL[GRID](*args, *outputs, *scratch)
    return tuple(out if perm is None else out.permute(*perm)
                 for out, perm in zip(outputs, _OUTPUT_PERMS))


def prepare(device, contiguous_inputs=False, **launch_options):
    """``run`` with its per-call decisions made once: returns ``launch(*inputs)``, which takes
    tensors already of ``INPUT_SPECS``' dtypes and shapes on ``device`` (a compiled module's
    steps, whose shapes were checked when its arguments were; a CUDA ``device`` must be the
    current one, where Triton launches) and returns what ``run`` does.  With
    ``contiguous_inputs`` the caller promises contiguous inputs, passed on as they are."""
    options = _launch_options("prepare", launch_options)
    constants = tuple(_constants(device)) if CONSTANT_SPECS else ()
    kernel = _kernel_launcher(device)
    kernel = _with_scratch(kernel, device) if SCRATCH_SPECS else kernel
    allocators = tuple(_allocator(allocate, shape, dtype, device)
                       for allocate, shape, dtype in _OUTPUT_ALLOCATIONS)
    contiguous = torch.Tensor.contiguous
    if all(perm is None for perm in _INPUT_PERMS + _OUTPUT_PERMS) and not OUTPUT_FROM_INPUT:
        if len(allocators) == 1:
            allocate, = allocators
            if contiguous_inputs:
                def launch(*inputs):  # the commonest case: nothing to do but allocate
                    out = allocate()
                    kernel(*inputs, *constants, out, **options)
                    return (out,)

                return launch

            def launch(*inputs):  # the common case: no permutes, one output
                out = allocate()
                kernel(*map(contiguous, inputs), *constants, out, **options)
                return (out,)

            return launch

        allocate_all = functools.partial(map, operator.methodcaller("__call__"), allocators)
        if contiguous_inputs:
            def launch(*inputs):  # no permutes, several outputs
                outputs = tuple(allocate_all())
                kernel(*inputs, *constants, *outputs, **options)
                return outputs

            return launch

        def launch(*inputs):  # no permutes
            outputs = tuple(allocate_all())
            kernel(*map(contiguous, inputs), *constants, *outputs, **options)
            return outputs

        return launch

    def launch(*inputs):
        args = [(t if perm is None else t.permute(*perm)).contiguous()
                for t, perm in zip(inputs, _INPUT_PERMS)]
        args.extend(constants)
        outputs = [allocate() for allocate in allocators]
        for i, source in OUTPUT_FROM_INPUT:
            outputs[i].copy_(args[source])
        kernel(*args, *outputs, **options)
        return tuple(out if perm is None else out.permute(*perm)
                     for out, perm in zip(outputs, _OUTPUT_PERMS))

    return launch


def launch_parts(device, **launch_options):
    """What a compiled module's generated host code needs to launch the kernel itself
    (``driver/plan_code``), or None when a launch does more than permute its inputs,
    allocate its outputs and call the kernel (an output starting as a copy of an input):
    ``(kernel, constants, outputs, options, input_perms, output_perms)``;
    ``kernel(*inputs, *constants, *outputs, **options)`` launches on ``device`` (contiguous
    buffers of ``INPUT_SPECS``; ``input_perms[i]``: the permutation making input ``i``'s
    logical tensor its buffer, None when row-major); ``outputs`` one ``(allocate, shape,
    dtype, zeroed)`` per output: ``allocate()`` makes a new buffer (contiguous, of ``shape``
    and ``dtype``; zero-filled when ``zeroed``, else the kernel writes every element, so a
    dead buffer of that shape and dtype serves); ``output_perms[i]`` the permutation of
    output ``i``'s buffer to its logical value (None: row-major)."""
    if OUTPUT_FROM_INPUT:
        return None
    options = _launch_options("launch_parts", launch_options)
    constants = tuple(_constants(device)) if CONSTANT_SPECS else ()
    kernel = _kernel_launcher(device)
    kernel = _with_scratch(kernel, device) if SCRATCH_SPECS else kernel
    outputs = tuple((_allocator(allocate, shape, dtype, device), tuple(shape), dtype,
                     allocate is not torch.empty)
                    for allocate, shape, dtype in _OUTPUT_ALLOCATIONS)
    return kernel, constants, outputs, options, _INPUT_PERMS, _OUTPUT_PERMS


def _allocator(allocate, shape, dtype, device):
    """``allocate()`` -> a new output buffer of ``shape`` on ``device``: by the allocator
    torch.compile's generated code calls where torch has one (a third of ``torch.empty``'s
    cost; on CUDA it allocates on the current device, where the kernel launches too)."""
    empty = _EMPTY_STRIDED.get(device.type) if allocate is torch.empty else None
    if empty is None:
        return functools.partial(allocate, shape, dtype=dtype, device=device)
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= max(size, 1)
    return functools.partial(empty, tuple(shape), tuple(reversed(strides)), dtype)


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
    """``(name, torch dtype, dims, minor_to_major)`` as Python source; a physical layout's
    flat buffer as ``(name, buffer dtype, (entries,), (0,))``.

    >>> from tiling.layouts.tiled_layout import parse_tiles
    >>> buffer_spec("p0", ArrayShape("bf16", (37, 300), parse_tiles("1,0", "(8,128)(2,1)")))
    "('p0', torch.uint32, (7680,), (0,))"
    """
    if is_physical_layout(shape):
        addressing = buffer_addressing(shape, name)
        dtype = "torch.uint32" if addressing.is_packed else torch_dtype(shape, name)
        return f"({name!r}, {dtype}, ({addressing.buffer_entries},), (0,))"
    return f"({name!r}, {torch_dtype(shape, name)}, {tuple(shape.dims)!r}, {minor_to_major(shape)!r})"


def kernel_specs(kernel_name: str, grid: tuple, parameters: Sequence[HloInstruction],
                 constants: Sequence[HloInstruction], outputs: Sequence[ArrayShape],
                 launch: tuple[int, int] | None = None) -> str:
    """The lines of a kernel file that ``run`` reads: ``KERNEL``, ``GRID``, ``NUM_WARPS`` and
    ``NUM_STAGES`` (when ``launch`` gives them; else Triton's defaults) and the buffer specs
    of the fusion's parameters, its constants and its outputs.

    >>> from fusion.ir.hlo_module import HloInstruction
    >>> p0 = HloInstruction("p0", "parameter", ArrayShape("f32", (4,)), ())
    >>> print(kernel_specs("k", (2,), [p0], [], [ArrayShape("f32", (4,))], (4, 1)), end="")
    KERNEL = k
    GRID = (2,)
    NUM_WARPS = 4
    NUM_STAGES = 1
    INPUT_SPECS = (('p0', torch.float32, (4,), (0,)), )
    CONSTANT_SPECS = ()
    OUTPUT_SPECS = (('output0', torch.float32, (4,), (0,)), )
    """
    launch_lines = "" if launch is None else f"NUM_WARPS = {launch[0]}\nNUM_STAGES = {launch[1]}\n"
    return (
        f"KERNEL = {kernel_name}\nGRID = {grid!r}\n" + launch_lines
        + "INPUT_SPECS = (" + "".join(buffer_spec(p.name, p.shape) + ", " for p in parameters) + ")\n"
        "CONSTANT_SPECS = (" + "".join(
            constant_spec(c.name, c.shape, c.attr("literal").values) + ", " for c in constants) + ")\n"
        "OUTPUT_SPECS = (" + "".join(buffer_spec(f"output{i}", s) + ", " for i, s in enumerate(outputs))
        + ")\n")


def padded_outputs_line(outputs) -> str:
    """``PADDED_OUTPUTS = (...)`` naming the outputs in a physical layout ('' when none).

    >>> from tiling.layouts.tiled_layout import parse_tiles
    >>> padded_outputs_line([ArrayShape("f32", (3,)), ArrayShape("f32", (3,), parse_tiles("0", "(8)"))])
    'PADDED_OUTPUTS = (1,)\\n'
    """
    padded = tuple(i for i, shape in enumerate(outputs) if is_physical_layout(shape))
    return f"PADDED_OUTPUTS = {padded!r}\n" if padded else ""


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
