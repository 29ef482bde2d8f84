"""An HLO module as a PyTorch custom operator: ``triton_backend.torch_op(hlo_text, name=...)``.

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
tilings from the tuning database are used when present (see ``tuning_db``).

**Autograd.**  ``backward="auto"`` (the default) registers an autograd formula
(``torch.library.register_autograd``) whose backward is a second custom op,
``<namespace>::<name>_backward``, running the compiled VJP module (``fusion.autodiff.vjp``),
compiled at the first backward and kept.  ``backward=`` may also be an explicit backward HLO
text (parameters: the forward's, then one cotangent per output; result: a tuple of one
gradient per floating-point or complex parameter, complex ones in JAX's convention, which the
op conjugates into torch's), or ``None`` for inference only: backward through the op then
raises ``BadArgumentError`` (and ``"auto"`` on a module with an op autodiff has no
rule for raises autodiff's ``UnsupportedOpError``, naming the op and its line).  Only the
forward inputs the backward reads are saved; integer inputs get ``None`` gradients.  Being a
custom op with a fake implementation and an autograd formula, it trains in eager mode,
under ``torch.compile`` (Inductor, ``fullgraph=True``) and ``torch.func.grad``, and passes
``torch.library.opcheck`` (``tests/triton_backend/test_torch_op_autograd.py``).  Double
backward is not supported.

**Names** are ASCII identifiers (``op_names``): a name or namespace that is not, or a
namespace PyTorch owns (``aten``, ``prims``, ``torch``, ``_...``), is a ``BadArgumentError``.

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

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Callable

import torch

from fusion.opcodes import traits
from fusion.errors import BadArgumentError, EvaluationError
from fusion.ir.hlo_module import HloModule
from fusion.text.parser import parse_hlo
from fusion.transforms.dot_algorithm import check_f32_dot_precision
from triton_backend.templates.dot.library_call import check_dot_library
from fusion.ir.shape import ArrayShape, TupleShape, flatten_shape
from triton_backend.integrations.backward_plan import AUTO as AUTO_BACKWARD
from triton_backend.integrations.backward_plan import BackwardPlan, NoBackward, backward_plan
from triton_backend.driver.module_compiler import AUTO, compile_hlo
from triton_backend.driver.prepared_call import guard_passes, tensor_guard
from triton_backend.integrations.op_names import op_name, op_namespace
from triton_backend.host.input_validation import torch_dtype

NAMESPACE = "fusion"

# qualified op name -> ((HLO text, backward), the callable): torch.library registrations are
# global and permanent, so registering the same name twice must return the first (same text
# and backward) or refuse.
_REGISTERED: dict[str, tuple[tuple[str, Any], "TorchOp"]] = {}
_LOCK = threading.Lock()


@dataclass(frozen=True)
class _Signature:
    names: tuple[str, ...]
    inputs: tuple[tuple[torch.dtype, tuple[int, ...]], ...]
    outputs: tuple[tuple[torch.dtype, tuple[int, ...]], ...]
    returns_tuple: bool

    @property
    def packs_tuple(self) -> bool:
        """Whether the torch op itself returns a tuple: a schema ``-> (Tensor)`` is one
        tensor, so a one-element tuple result travels as a tensor and ``TorchOp`` re-wraps it."""
        return self.returns_tuple and len(self.outputs) != 1


class TorchOp:
    """The callable ``torch_op`` returns: ``op(*tensors)`` calls ``torch.ops.<ns>.<name>``."""

    def __init__(self, qualname: str, packet, signature: _Signature, compiled,
                 backward: "_Backward") -> None:
        self.qualname = qualname
        self.op = packet
        self.signature = signature
        self.compiled = compiled
        self.backward = backward
        self.__name__ = qualname.split("::")[1]
        self._guard = None  # the C++ check of the signature last run as plain eager

    def __call__(self, *tensors: torch.Tensor):
        # Plain eager tensors of a signature the op ran on before, nothing that needs grad and
        # nothing tracing: the dispatcher would add only its own cost (about 12 us, custom_op's
        # Python autograd and backend wrappers) around the same compiled module.
        if not torch.compiler.is_compiling() and self._guard is not None and _plain_eager() \
                and guard_passes(self._guard, tensors):
            result = self.compiled(*tensors)
            return result if self.signature.returns_tuple else result[0]
        # Errors the dispatcher would report in its own words (or, for a sparse tensor, as a
        # missing kernel) are ours, naming the parameter, before dispatch.
        if len(tensors) != len(self.signature.inputs) or any(
                not isinstance(t, torch.Tensor) or t.layout != torch.strided for t in tensors):
            _check(self.qualname, self.signature, tensors, self.compiled.device.type)
        if torch._C._are_functorch_transforms_active():
            result = _FunctorchBridge.apply(self, *tensors)
        else:
            result = self.op(*tensors)
            if not torch.compiler.is_compiling() and _plain_eager() \
                    and not any(t.requires_grad for t in tensors):
                self._guard = tensor_guard(tensors)  # ran as plain eager: take the short way next
        return (result,) if self.signature.returns_tuple and not self.signature.packs_tuple \
            else result

    def __repr__(self) -> str:
        return f"TorchOp({self.qualname}: {_schema(self.signature)})"


def _plain_eager() -> bool:
    """True when a call is plain eager PyTorch: no functorch transform, torch function mode or
    dispatch mode (fake tensors, export's tracing) sees the op."""
    return not (torch._C._are_functorch_transforms_active()
                or torch._C._is_torch_function_mode_enabled()
                or torch._C._len_torch_dispatch_stack())


def _identifier(text: str) -> str:
    return op_name(text, derived=True)


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
    if sig.packs_tuple:
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
             device: str | None = None, tuning_db=None,
             backward: str | HloModule | None = AUTO_BACKWARD,
             cuda_graph: bool | str = False, f32_dot_precision: str = "ieee",
             dot_library: str = "auto") -> TorchOp:
    """Compile ``hlo_text`` and register it as ``torch.ops.<namespace>.<name>``.

    ``name`` defaults to the module's name (made an identifier); an explicit ``name`` and
    ``namespace`` must be ASCII identifiers, and ``namespace`` not one PyTorch owns.
    ``device`` names the spec whose tuned tilings are used (default: the visible GPU's; none
    without a GPU), from ``tuning_db`` (default: ``$FUSION_TUNING_DB`` or the user cache);
    ``compile_hlo`` looks them up for the fusions of the compiled (fused) module.
    ``backward``: ``"auto"`` (the VJP module ``fusion.autodiff.vjp`` derives), a backward
    HLO text, or ``None`` (inference only); see the module docstring.  Registering the same
    name again with the same text and backward returns the existing op; with a different one
    it is an error.  ``cuda_graph`` (``True`` or ``"reuse-outputs"``) replays the forward's
    launches from a CUDA graph (``compile_hlo``'s option of that name; a no-op without a GPU).
    ``f32_dot_precision`` (``"ieee"``, ``"tf32"``, ``"tf32x3"``): TF32 for the f32 dots of the
    forward and backward modules (``compile_hlo``'s option of that name).  ``dot_library``
    (``"auto"``, ``"never"``, ``"always"``): plain dots as one library call, for both modules
    (``compile_hlo``'s option of that name).

    >>> import torch
    >>> op = torch_op('''HloModule square
    ... ENTRY e {
    ...   x = f32[2] parameter(0)
    ...   ROOT y = f32[2] multiply(x, x)
    ... }''', name="doctest_square")
    >>> x = torch.tensor([1.0, 3.0], requires_grad=True)
    >>> op(x).sum().backward()
    >>> x.grad.tolist()
    [2.0, 6.0]
    """
    namespace = op_namespace(namespace)
    module = parse_hlo(hlo_text)
    base = op_name(name) if name is not None else op_name(module.name, derived=True)
    qualname = f"{namespace}::{base}"
    check_f32_dot_precision(f32_dot_precision)
    check_dot_library(dot_library)
    key = (hlo_text, backward, cuda_graph, f32_dot_precision, dot_library)
    with _LOCK:
        known = _REGISTERED.get(qualname)
        if known is not None:
            if known[0] != key:
                raise EvaluationError(f"torch op {qualname} is already registered with a "
                                      "different HLO module or backward (or cuda_graph, "
                                      "f32_dot_precision or dot_library); pick another name",
                                      where=qualname)
            return known[1]
        sig = _signature(module)
        plan = backward_plan(module, backward, where=qualname)
        for qualified in (qualname, qualname + _BACKWARD_SUFFIX):
            _refuse_existing(qualified)
        tuning = {"tuning_device": AUTO if device is None else device, "tuning_db": tuning_db,
                  "f32_dot_precision": f32_dot_precision, "dot_library": dot_library}
        compiled = compile_hlo(module, cuda_graph=cuda_graph, **tuning)
        device_type = compiled.device.type
        packet = _define(qualname, sig, compiled, device_type, random=_draws(compiled.module))
        grads = _Backward(qualname + _BACKWARD_SUFFIX, plan, device_type, tuning)
        _register_autograd(qualname, sig, grads)
        op = TorchOp(qualname, packet, sig, compiled, grads)
        _REGISTERED[qualname] = (key, op)
        return op


#: The backward op of ``ns::name`` is ``ns::name_backward``.
_BACKWARD_SUFFIX = "_backward"


def _refuse_existing(qualname: str) -> None:
    """An op of that name registered by anyone but us (torch's own, another library's)."""
    namespace, name = qualname.split("::")
    try:
        getattr(getattr(torch.ops, namespace), name)
    except (AttributeError, RuntimeError):
        return
    raise BadArgumentError(f"torch op {qualname} already exists: registered outside torch_op, "
                           "or the backward op of another torch_op", where=qualname,
                           expected="another name or namespace")


def _fresh_outputs(args: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor]) -> list:
    # Outputs must not alias inputs or each other (custom_op's contract).
    seen: set[int] = {a.untyped_storage().data_ptr() for a in args}
    fresh = []
    for out in outputs:
        ptr = out.untyped_storage().data_ptr()
        fresh.append(out.clone() if ptr in seen else out)
        seen.add(ptr)
    return fresh


def _draws(module) -> bool:
    """Whether the module changes a state on every call (an ``rng``'s generator): the op is
    then registered as torch's random ops are (``nondeterministic_seeded``), so torch.compile
    never merges two calls or drops one."""
    return any(traits(i.opcode).side_effect for c in module.computations for i in c)


def _define(qualname: str, sig: _Signature, run: Callable, device_type: str,
            random: bool = False) -> Callable:
    """Register ``run`` (tensors in, a sequence of tensors out) as a custom op whose fake
    implementation derives from ``sig``; return its ``OpOverload``.  ``random``: each call
    draws new values (``_draws``)."""

    def implementation(*args):
        _check(qualname, sig, args, device_type)
        fresh = _fresh_outputs(args, run(*args))
        return tuple(fresh) if sig.packs_tuple else fresh[0]

    def fake(*args):
        _check(qualname, sig, args, device_type)
        device = args[0].device if args else torch.device(device_type)
        outs = tuple(torch.empty(dims, dtype=dtype, device=device) for dtype, dims in sig.outputs)
        return outs if sig.packs_tuple else outs[0]

    custom = torch.library.custom_op(qualname, implementation, mutates_args=(),
                                     schema=_schema(sig),
                                     tags=(torch.Tag.nondeterministic_seeded,) if random else ())
    custom.register_fake(fake)
    namespace, name = qualname.split("::")
    return getattr(getattr(torch.ops, namespace), name).default


class _Backward:
    """The backward op of one torch op: its plan, and the VJP module compiled on first use."""

    def __init__(self, qualname: str, plan: BackwardPlan | NoBackward, device_type: str,
                 tuning: dict[str, Any]) -> None:
        self.qualname = qualname
        self.plan = plan
        self._tuning = tuning
        self._compiled = None
        self._lock = threading.Lock()
        self.op = None
        self.signature = None
        if isinstance(plan, BackwardPlan) and plan.wrt:
            self.signature = _signature(plan.module)
            self.op = _define(qualname, self.signature, self._run, device_type)

    @property
    def compiled(self):
        """The compiled backward module (compiled now if no backward ran yet)."""
        with self._lock:
            if self._compiled is None:
                self._compiled = compile_hlo(self.plan.module, **self._tuning)
            return self._compiled

    def _run(self, *args):
        return self.compiled(*args)

    def save(self, ctx, inputs: Sequence[torch.Tensor]) -> None:
        """``setup_context``: save the forward inputs the backward module reads."""
        if isinstance(self.plan, BackwardPlan):
            ctx.save_for_backward(*(inputs[i] for i in self.plan.saved))

    def gradients(self, ctx, needs_input_grad: Sequence[bool], n_inputs: int,
                  outputs: Sequence[tuple[torch.dtype, tuple[int, ...]]],
                  cotangents: Sequence[torch.Tensor | None]) -> tuple:
        """``backward``: one gradient (or ``None``) per forward input."""
        plan = self.plan
        if isinstance(plan, NoBackward):
            raise plan.error
        result: list[torch.Tensor | None] = [None] * n_inputs
        if self.op is None:   # no floating-point or complex input: nothing has a gradient
            return tuple(result)
        device = next(c.device for c in cotangents if c is not None)
        used = []
        for k in plan.cotangents:
            ct = cotangents[k]
            if ct is None:   # an output autograd has no gradient for (an integer one)
                dtype, dims = outputs[k]
                ct = torch.zeros(dims, dtype=dtype, device=device)
            elif ct.is_complex():   # torch's convention is the conjugate of the module's (JAX's)
                ct = ct.conj().resolve_conj()
            used.append(ct)
        # No double backward: the backward op has no formula of its own, and functorch's
        # grad transform would otherwise try to record it (and refuse, as above).
        with torch.no_grad():
            computed = self.op(*ctx.saved_tensors, *used)
        if not self.signature.packs_tuple:
            computed = (computed,)
        for index, gradient in zip(plan.wrt, computed):
            if needs_input_grad[index]:
                # A complex input's gradient in torch's convention: the conjugate of JAX's.
                result[index] = gradient.conj().resolve_conj() if gradient.is_complex() \
                    else gradient
        return tuple(result)


def _register_autograd(qualname: str, sig: _Signature, grads: _Backward) -> None:
    def setup_context(ctx, inputs, output):
        grads.save(ctx, inputs)

    def backward(ctx, *cotangents):
        return grads.gradients(ctx, ctx.needs_input_grad, len(sig.inputs), sig.outputs,
                               cotangents)

    torch.library.register_autograd(qualname, backward, setup_context=setup_context)


class _FunctorchBridge(torch.autograd.Function):
    """The op under ``torch.func`` transforms: the autograd formula ``register_autograd``
    installs is an ``autograd.Function`` without a ``setup_context`` staticmethod, which
    functorch refuses (pytorch/pytorch#168393); this one has it and runs the same backward."""

    @staticmethod
    def forward(op: TorchOp, *tensors: torch.Tensor):
        return op.op(*tensors)

    @staticmethod
    def setup_context(ctx, inputs, output):
        op = inputs[0]
        ctx.torch_op = op
        op.backward.save(ctx, inputs[1:])

    @staticmethod
    def backward(ctx, *cotangents):
        op = ctx.torch_op
        sig = op.signature
        return (None, *op.backward.gradients(ctx, ctx.needs_input_grad[1:], len(sig.inputs),
                                             sig.outputs, cotangents))
