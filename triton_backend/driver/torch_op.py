"""An HLO module as a PyTorch custom operator: ``triton_backend.driver.torch_op(hlo_text, name=...)``.

**Why ``torch.library.custom_op`` and not ``triton_op`` + ``wrap_triton``.**  ``triton_op``
lets ``torch.compile`` trace *into* the Triton kernels, which requires that the op's body be
plain ``@triton.jit`` launches on device tensors.  Here the body is a whole compiled module:
host glue between kernels (layouts, constants, control flow) and, without a GPU, kernels that
run through the Triton interpreter on CPU tensors, which Inductor cannot lower.  So the module
is one opaque ``custom_op`` whose ``register_fake`` derives output shapes and dtypes from the
HLO ENTRY signature: ``torch.compile(fullgraph=True)`` and ``torch.export`` see one node with
exact metadata, no graph break, on CPU and GPU alike.

The op takes one tensor per ENTRY parameter (in order) and returns a tensor, or a tuple when
the ENTRY result is a tuple.  Wrong count, shape, dtype or device is an
``fusion.errors.EvaluationError`` naming the op and the parameter, in eager mode and while
tracing; so is a Python number or a sparse tensor.  Non-contiguous, expanded and aliased
inputs are fine (read, never written); outputs never alias inputs or each other.  Tuned
tilings from the tuning database are used when present (see ``tuning_db``).  No autograd
formula is registered: ``requires_grad`` inputs run forward, calling ``backward`` through the
op raises.

**torch.export** (checked on CPU with torch 2.13, ``tests/triton_backend/test_torch_op_export.py``):
``torch.export.export`` of a module calling the op gives one ``torch.ops.fusion.<name>.default``
node (kept by ``run_decompositions``; ``torch.export.save``/``load`` round-trip while the op is
registered in the loading process, i.e. after the same ``torch_op`` call).  Dims are static, as
in the HLO: marking one dynamic (``dynamic_shapes``) fails export's constraint check, since
the fake implementation returns the HLO's fixed shapes.

>>> import torch
>>> op = torch_op('''HloModule double
... ENTRY e {
...   x = f32[3] parameter(0)
...   ROOT y = f32[3] add(x, x)
... }''', name="doctest_double")
>>> op(torch.tensor([1.0, 2.0, 3.0])).tolist()
[2.0, 4.0, 6.0]
>>> torch.ops.fusion.doctest_double.default._schema.name
'fusion::doctest_double'
"""
from __future__ import annotations

import keyword
import re
import sys
import threading
import types
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable

import torch

from fusion.errors import EvaluationError
from fusion.hlo_module import HloModule
from fusion.shape import ArrayShape, TupleShape, flatten_shape
from triton_backend.host.input_validation import torch_dtype
from fusion.parser import parse_hlo
from triton_backend.driver.module_runner import AUTO, compile_hlo

NAMESPACE = "fusion"

# qualified op name -> (HLO text, the callable): torch.library registrations are global and
# permanent, so registering the same name twice must return the first (same text) or refuse.
_REGISTERED: dict[str, tuple[str, "TorchOp"]] = {}
_LOCK = threading.Lock()


@dataclass(frozen=True)
class _Signature:
    names: tuple[str, ...]
    inputs: tuple[tuple[torch.dtype, tuple[int, ...]], ...]
    outputs: tuple[tuple[torch.dtype, tuple[int, ...]], ...]
    returns_tuple: bool


class TorchOp:
    """The callable ``torch_op`` returns: ``op(*tensors)`` calls ``torch.ops.<ns>.<name>``."""

    def __init__(self, qualname: str, packet, signature: _Signature, compiled) -> None:
        self.qualname = qualname
        self.op = packet
        self.signature = signature
        self.compiled = compiled
        self.__name__ = qualname.split("::")[1]

    def __call__(self, *tensors: torch.Tensor):
        # Errors the dispatcher would report in its own words (or, for a sparse tensor, as a
        # missing kernel) are ours, naming the parameter, before dispatch.
        if len(tensors) != len(self.signature.inputs) or any(
                not isinstance(t, torch.Tensor) or t.layout != torch.strided for t in tensors):
            _check(self.qualname, self.signature, tensors, self.compiled.device.type)
        return self.op(*tensors)

    def __repr__(self) -> str:
        return f"TorchOp({self.qualname}: {_schema(self.signature)})"


def _identifier(text: str) -> str:
    name = re.sub(r"\W", "_", text)
    if not name or name[0].isdigit():
        name = "_" + name
    return name + "_" if keyword.iskeyword(name) else name


def _signature(module: HloModule) -> _Signature:
    entry = module.entry
    names, inputs = [], []
    for param in entry.parameters:
        if not isinstance(param.shape, ArrayShape):
            raise EvaluationError(f"parameter %{param.name} has tuple shape {param.shape}; a torch"
                                  " op takes one tensor per parameter", where=param.name)
        name = _identifier(param.name)
        while name in names or name in ("self", "out"):
            name += "_"
        names.append(name)
        inputs.append((torch_dtype(param.shape.dtype, param.name), tuple(param.shape.dims)))
    outputs = tuple((torch_dtype(s.dtype, entry.root.name), tuple(s.dims))
                    for s in flatten_shape(entry.root.shape))
    return _Signature(tuple(names), tuple(inputs), outputs,
                      isinstance(entry.root.shape, TupleShape))


def _schema(sig: _Signature) -> str:
    params = ", ".join(f"Tensor {n}" for n in sig.names)
    if sig.returns_tuple:
        returns = "(" + ", ".join("Tensor" for _ in sig.outputs) + ")"
    else:
        returns = "Tensor"
    return f"({params}) -> {returns}"


def _check(qualname: str, sig: _Signature, args: Sequence[Any], device_type: str) -> None:
    if len(args) != len(sig.inputs):
        raise EvaluationError(f"{qualname} takes {len(sig.inputs)} tensor(s) "
                              f"({', '.join(sig.names)}), got {len(args)}", where=qualname)
    for number, (arg, name, (dtype, dims)) in enumerate(zip(args, sig.names, sig.inputs)):
        label = f"argument {number} ({name})"  # the error's ``where`` names the op
        if not isinstance(arg, torch.Tensor):
            raise EvaluationError(f"{label} must be a tensor, got {type(arg).__name__}",
                                  where=qualname)
        if arg.layout != torch.strided:
            raise EvaluationError(f"{label} has layout {arg.layout}; the op takes dense "
                                  "(strided) tensors: convert with .to_dense()", where=qualname)
        if arg.dtype != dtype:
            raise EvaluationError(f"{label} has dtype {arg.dtype}, expected {dtype}",
                                  where=qualname)
        if tuple(arg.shape) != dims:
            raise EvaluationError(f"{label} has shape {list(arg.shape)}, expected {list(dims)}",
                                  where=qualname)
        if arg.device.type != device_type:
            raise EvaluationError(
                f"{label} is on {arg.device}, but the kernels run on {device_type} "
                f"({'Triton interpreter' if device_type == 'cpu' else 'GPU'})", where=qualname)


def torch_op(hlo_text: str, name: str | None = None, *, namespace: str = NAMESPACE,
             device: str | None = None, tuning_db=None) -> TorchOp:
    """Compile ``hlo_text`` and register it as ``torch.ops.<namespace>.<name>``.

    ``name`` defaults to the module's name.  ``device`` names the spec whose tuned tilings
    are used (default: the visible GPU's; none without a GPU), from ``tuning_db`` (default:
    ``$FUSION_TUNING_DB`` or the user cache); ``compile_hlo`` looks them up for the fusions
    of the compiled (fused) module.  Registering the same name
    again with the same text returns the existing op; with different text it is an error.
    """

    module = parse_hlo(hlo_text)
    op_name = _identifier(name or module.name)
    qualname = f"{namespace}::{op_name}"
    with _LOCK:
        known = _REGISTERED.get(qualname)
        if known is not None:
            if known[0] != hlo_text:
                raise EvaluationError(f"torch op {qualname} is already registered with a "
                                      "different HLO module; pick another name", where=qualname)
            return known[1]
        sig = _signature(module)
        compiled = compile_hlo(module, tuning_device=AUTO if device is None else device,
                               tuning_db=tuning_db)
        device_type = compiled.device.type
        packet = _register(qualname, sig, compiled, device_type)
        op = TorchOp(qualname, packet, sig, compiled)
        _REGISTERED[qualname] = (hlo_text, op)
        return op


def _register(qualname: str, sig: _Signature, compiled, device_type: str) -> Callable:
    def implementation(*args):
        _check(qualname, sig, args, device_type)
        outputs = compiled(*args)
        # Outputs must not alias inputs or each other (custom_op's contract).
        seen: set[int] = {a.untyped_storage().data_ptr() for a in args}
        fresh = []
        for out in outputs:
            ptr = out.untyped_storage().data_ptr()
            fresh.append(out.clone() if ptr in seen else out)
            seen.add(ptr)
        return tuple(fresh) if sig.returns_tuple else fresh[0]

    def fake(*args):
        _check(qualname, sig, args, device_type)
        device = args[0].device if args else torch.device(device_type)
        outs = tuple(torch.empty(dims, dtype=dtype, device=device) for dtype, dims in sig.outputs)
        return outs if sig.returns_tuple else outs[0]

    custom = torch.library.custom_op(qualname, implementation, mutates_args=(),
                                     schema=_schema(sig))
    custom.register_fake(fake)
    namespace, op_name = qualname.split("::")
    return getattr(getattr(torch.ops, namespace), op_name).default


class _CallableModule(types.ModuleType):
    """This module, callable as ``torch_op``: importing a submodule binds its name on the
    package, which shadows the package's lazy ``triton_backend.driver.torch_op`` function after the
    first use; so ``triton_backend.driver.torch_op(text, name=...)`` works either way."""

    def __call__(self, *args: Any, **kwargs: Any) -> TorchOp:
        return torch_op(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule
