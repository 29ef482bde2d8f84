"""A JAX function as a torch op: ``triton_backend.from_jax(fn, *example_args)``.

``fn`` is lowered with JAX (``jax.jit(...).lower(...).as_text(dialect="hlo")``, JAX being an
optional dependency: ``pip install 'hlo-triton-fusion[jax]'``), compiled by ``compile_hlo``
and registered with ``torch_op``.  The result calls like ``fn``: the same pytree of arguments
(tuples, lists, dicts, ``None`` ...; every leaf an array) and of results, the leaves torch
tensors.  Arguments may be torch tensors, NumPy arrays, JAX arrays (taken through DLPack or
``torch.from_numpy``: no copy where the layout allows) or Python numbers (as 0-d ``f32``,
``s32`` or ``pred`` arrays, JAX's defaults).

Gradients: ``grad="jax"`` (the default) lowers JAX's own VJP of ``fn`` to HLO and uses it as
the op's backward module; ``grad="hlo"`` derives it with ``fusion.autodiff.vjp``; ``None``
makes an inference-only op.  The HLO holds no trace of ``jax.lax.stop_gradient`` or of a
``jax.custom_vjp`` rule, so ``grad="hlo"`` differentiates the forward as it computes: a
straight-through estimator or a clipped gradient is JAX's only with ``grad="jax"`` (a
``custom_vjp`` warns, ``CustomGradientWarning``).  Either way the op trains under
``torch.compile``.

Like ``jax.jit``, each new signature (the pytree structure, shapes and dtypes of the leaves)
lowers, compiles and registers again, and is cached; past ``RETRACE_WARNING`` signatures each
new one warns (``RetraceWarning``).  Each signature is its own torch op,
``torch.ops.<namespace>.<name>_<hash of its HLO>``.

>>> import jax.numpy as jnp, torch
>>> f = from_jax(lambda p: {"y": jnp.sin(p["x"]) * p["w"]},
...              {"x": torch.zeros(3), "w": torch.ones(3)}, name="doctest_sin_times")
>>> out = f({"x": torch.tensor([0.0, 1.0, 2.0]), "w": torch.full((3,), 2.0)})
>>> sorted(out), [round(v, 4) for v in out["y"].tolist()]
(['y'], [0.0, 1.6829, 1.8186])
"""
from __future__ import annotations

import hashlib
import importlib
import threading
import warnings
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from fusion.errors import BadArgumentError
from triton_backend.integrations.op_names import op_name
from triton_backend.integrations.torch_op import NAMESPACE, TorchOp, torch_op

#: A new signature past this many warns (``jax.jit`` retraces silently; a loop whose shapes
#: change every step would compile kernels every step).
RETRACE_WARNING = 8

GRAD_MODES = ("jax", "hlo", None)


class RetraceWarning(UserWarning):
    """``from_jax``'s function met more than ``RETRACE_WARNING`` signatures."""


class CustomGradientWarning(UserWarning):
    """``grad="hlo"`` on a function with a ``jax.custom_vjp`` rule: the HLO holds the forward
    only, so its gradient is the forward's, not the rule's."""


#: The jaxpr primitives whose gradient rule the HLO does not carry, and which a program uses
#: to change its gradient (``custom_jvp`` rules, as ``jax.nn.relu``'s, match the forward's).
_CUSTOM_GRADIENTS = frozenset({"custom_vjp_call", "custom_vjp_call_jaxpr"})


def _custom_gradient_rules(jaxpr) -> list[str]:
    """The custom-VJP calls in ``jaxpr`` and the jaxprs its equations call."""
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in _CUSTOM_GRADIENTS:
            called = getattr(eqn.params.get("call_jaxpr"), "jaxpr", None)
            info = getattr(called, "debug_info", None)
            found.append(str(getattr(info, "func_src_info", None) or eqn.primitive.name))
        for value in eqn.params.values():
            inner = getattr(value, "jaxpr", value)
            if hasattr(inner, "eqns"):
                found += _custom_gradient_rules(inner)
    return found


def _jax():
    try:
        return importlib.import_module("jax")
    except ImportError as error:
        raise BadArgumentError("from_jax needs JAX: pip install 'hlo-triton-fusion[jax]'",
                               where="from_jax") from error


@dataclass(frozen=True)
class _Signature:
    treedef: Any                                   # the pytree structure of the arguments
    leaves: tuple[tuple[tuple[int, ...], torch.dtype], ...]


def _as_tensor(leaf: Any, where: str) -> torch.Tensor:
    """A leaf as a torch tensor, sharing memory when it can."""
    if isinstance(leaf, torch.Tensor):
        return leaf
    if isinstance(leaf, (bool, int, float)):   # JAX's default types, without x64
        dtype = torch.bool if isinstance(leaf, bool) else (
            torch.int32 if isinstance(leaf, int) else torch.float32)
        return torch.tensor(leaf, dtype=dtype)
    if isinstance(leaf, (np.ndarray, np.generic)):
        array = np.asarray(leaf)
        try:
            with warnings.catch_warnings():   # read-only arrays: we never write inputs
                warnings.simplefilter("ignore", UserWarning)
                return torch.from_numpy(array)
        except (TypeError, ValueError):        # negative strides, a dtype torch lacks
            return torch.from_numpy(np.ascontiguousarray(array).copy())
    if hasattr(leaf, "__dlpack__"):             # a JAX array (CPU or GPU), or a CuPy one
        try:
            return torch.from_dlpack(leaf)
        except (BufferError, RuntimeError, TypeError):
            return torch.from_numpy(np.asarray(leaf).copy())
    raise BadArgumentError(f"argument leaf {where} is a {type(leaf).__name__}; from_jax takes "
                           "torch tensors, NumPy or JAX arrays and Python numbers",
                           where=where)


def _jax_dtype(jnp, dtype: torch.dtype):
    name = str(dtype).removeprefix("torch.")
    try:
        return jnp.dtype({"bool": "bool"}.get(name, name))
    except TypeError:
        raise BadArgumentError(f"torch dtype {dtype} has no JAX counterpart",
                               where="from_jax") from None


class JaxFunction:
    """What ``from_jax`` returns: call it like the JAX function, with torch tensors (or NumPy
    or JAX arrays); ``.op`` is the torch op of the example signature, ``op_for(*args)`` the
    one of any signature (lowered and compiled at first use)."""

    def __init__(self, fn: Callable, name: str, grad: str | None, namespace: str,
                 device: str | None) -> None:
        self.fn = fn
        self.name = name
        self.grad = grad
        self.namespace = namespace
        self.device = device
        self._ops: dict[_Signature, tuple[TorchOp, Any]] = {}
        self._lock = threading.Lock()
        self.op: TorchOp | None = None

        # torch.compile must not trace into jax.tree_util (C++ pytrees): Dynamo leaves this
        # call opaque and AOTAutograd traces it, recording the torch op of the signature.
        def traced(*args):
            return self._call(*args)

        self._traced = torch._dynamo.nonstrict_trace(traced)

    def __repr__(self) -> str:
        return f"JaxFunction({self.name}, {len(self._ops)} signature(s), grad={self.grad!r})"

    @property
    def signatures(self) -> int:
        """How many signatures were lowered and compiled so far."""
        return len(self._ops)

    def __call__(self, *args: Any) -> Any:
        return self._traced(*args)

    def _call(self, *args: Any) -> Any:
        jax = _jax()
        tensors, signature = self._flatten(jax, args)
        op, out_tree = self._lowered(jax, signature)
        result = op(*tensors)
        leaves = list(result) if isinstance(result, tuple) else [result]
        return jax.tree_util.tree_unflatten(out_tree, leaves)

    def op_for(self, *args: Any) -> TorchOp:
        """The torch op for the signature of ``args`` (taking the flattened leaves)."""
        jax = _jax()
        return self._lowered(jax, self._flatten(jax, args)[1])[0]

    def _flatten(self, jax, args) -> tuple[list[torch.Tensor], _Signature]:
        leaves, treedef = jax.tree_util.tree_flatten(args)
        paths = [jax.tree_util.keystr(p) for p, _ in
                 jax.tree_util.tree_flatten_with_path(args)[0]]
        tensors = [_as_tensor(leaf, f"args{path}") for leaf, path in zip(leaves, paths)]
        return tensors, _Signature(treedef, tuple((tuple(t.shape), t.dtype) for t in tensors))

    def _lowered(self, jax, signature: _Signature) -> tuple[TorchOp, Any]:
        with self._lock:
            known = self._ops.get(signature)
            if known is not None:
                return known
            if len(self._ops) >= RETRACE_WARNING:
                warnings.warn(f"from_jax({self.name}): signature {len(self._ops) + 1} "
                              f"({_describe(signature)}); each new one lowers and compiles "
                              "again", RetraceWarning, stacklevel=4)
            forward, backward, out_tree = _lower(jax, self.fn, signature, self.grad)
            digest = hashlib.sha256((forward + str(self.grad)).encode()).hexdigest()[:10]
            backward_arg = {"jax": backward, "hlo": "auto", None: None}[self.grad]
            op = torch_op(forward, name=f"{self.name}_{digest}", namespace=self.namespace,
                          device=self.device, backward=backward_arg)
            self._ops[signature] = (op, out_tree)
            if self.op is None:
                self.op = op
            return op, out_tree


def _describe(signature: _Signature) -> str:
    return ", ".join(f"{str(d).removeprefix('torch.')}{list(s)}" for s, d in signature.leaves)


def _lower(jax, fn: Callable, signature: _Signature, grad: str | None
           ) -> tuple[str, str | None, Any]:
    """(forward HLO text, JAX's backward HLO text or None, the results' pytree structure)."""
    jnp = importlib.import_module("jax.numpy")
    specs = [jax.ShapeDtypeStruct(shape, _jax_dtype(jnp, dtype))
             for shape, dtype in signature.leaves]
    out_tree: list[Any] = []

    def flat(*leaves):
        result = fn(*jax.tree_util.tree_unflatten(signature.treedef, list(leaves)))
        out_leaves, tree = jax.tree_util.tree_flatten(result)
        out_tree[:] = [tree]
        return tuple(out_leaves)

    # 64-bit leaves need JAX's x64 mode, else it lowers them as 32-bit types; without them
    # the default mode keeps fn's own constants and promotions as the user wrote them.
    wide = any(d in (torch.float64, torch.int64, torch.uint64, torch.complex128)
               for _, d in signature.leaves)
    with _x64(jax, wide):
        lowered = jax.jit(flat, keep_unused=True).lower(*specs)
        forward = lowered.as_text(dialect="hlo")
        outputs = jax.eval_shape(flat, *specs)
        backward = _lower_vjp(jax, jnp, flat, specs, outputs) if grad == "jax" else None
        if grad == "hlo":
            rules = _custom_gradient_rules(jax.make_jaxpr(flat)(*specs).jaxpr)
            if rules:
                warnings.warn(
                    f"grad='hlo' differentiates the HLO of {getattr(fn, '__name__', 'fn')}, "
                    f"which has no trace of its jax.custom_vjp rule(s) ({', '.join(rules)}): "
                    "the gradient is the forward's; grad='jax' uses the rule",
                    CustomGradientWarning, stacklevel=4)
    return forward, backward, out_tree[0]


def _x64(jax, on: bool):
    """JAX's x64 mode as a context manager (``jax.experimental.enable_x64`` in older JAX)."""
    if hasattr(jax, "enable_x64"):
        return jax.enable_x64(on)
    return importlib.import_module("jax.experimental").enable_x64(on)


def _lower_vjp(jax, jnp, flat: Callable, specs: list, outputs) -> str:
    """JAX's VJP of ``flat`` as HLO, in ``torch_op``'s backward convention: parameters are the
    forward's, then one cotangent per output; the result one gradient per float or complex
    parameter (JAX's convention; the torch op conjugates complex ones)."""
    n = len(specs)
    wrt = [i for i, s in enumerate(specs) if jnp.issubdtype(s.dtype, jnp.inexact)]

    def backward(*args):
        primals, cotangents = list(args[:n]), args[n:]

        def of_floats(*floats):
            full = list(primals)
            for i, value in zip(wrt, floats):
                full[i] = value
            return flat(*full)

        _, pullback = jax.vjp(of_floats, *(primals[i] for i in wrt))
        # Integer outputs take float0 cotangents in JAX; ours are their own type, unused.
        cts = tuple(ct if jnp.issubdtype(out.dtype, jnp.inexact)
                    else np.zeros(out.shape, dtype=jax.dtypes.float0)
                    for ct, out in zip(cotangents, outputs))
        return tuple(pullback(cts))

    cotangent_specs = [jax.ShapeDtypeStruct(o.shape, o.dtype) for o in outputs]
    return jax.jit(backward, keep_unused=True).lower(*specs, *cotangent_specs).as_text(
        dialect="hlo")


def from_jax(fn: Callable, *example_args: Any, name: str | None = None, grad: str | None = "jax",
             namespace: str = NAMESPACE, device: str | None = None) -> JaxFunction:
    """``fn`` (a JAX function of array pytrees) as a callable torch op, lowered now for
    ``example_args`` and again for each new signature; see the module docstring.

    ``name`` (default: ``fn``'s name) prefixes the torch ops' names; ``grad`` is ``"jax"``,
    ``"hlo"`` or ``None``; ``device`` picks tuned tilings as in ``torch_op``.
    """
    _jax()
    if grad not in GRAD_MODES:
        raise BadArgumentError(f"grad={grad!r} is not one of {list(GRAD_MODES)}",
                               where="from_jax",
                               expected="'jax' (JAX's VJP), 'hlo' (fusion.autodiff) or None")
    base = op_name(name) if name is not None else op_name(
        getattr(fn, "__name__", "jax_function"), derived=True)
    function = JaxFunction(fn, base, grad, namespace, device)
    function.op_for(*example_args)
    return function
