"""The backward module of a torch op, and which forward values it reads.

``torch_op(..., backward=...)`` takes ``"auto"`` (``fusion.autodiff.vjp`` of the forward),
an explicit backward HLO text, or ``None`` (inference only).  Either module follows one
convention: its parameters are the forward's parameters followed by one cotangent per forward
output (a tuple result flattened in order); its result is a tuple of one gradient per
floating-point or complex forward parameter, in order.  ``backward_plan`` checks an explicit module
against that convention, then drops the parameters the backward never reads, so the torch
op saves for backward only the forward inputs it needs and passes only the cotangents it uses.

>>> from fusion.text.parser import parse_hlo
>>> forward = parse_hlo('''HloModule f
... ENTRY e {
...   x = f32[3] parameter(0)
...   n = s32[3] parameter(1)
...   ROOT y = f32[3] sine(x)
... }''')
>>> plan = backward_plan(forward, "auto")
>>> plan.saved, plan.cotangents, plan.wrt     # reads x and the cotangent; d/dx only
((0,), (0,), (0,))
"""
from __future__ import annotations

from dataclasses import dataclass

from fusion.autodiff import default_wrt, vjp
from fusion.errors import BadArgumentError, FusionCompilerError
from fusion.ir.hlo_module import HloComputation, HloModule
from fusion.text.parser import parse_hlo
from fusion.ir.shape import ArrayShape, TupleShape, flatten_shape
from fusion.shapes.verifier import verify_module

#: ``backward=`` value: derive the backward module with ``fusion.autodiff.vjp``.
AUTO = "auto"


@dataclass(frozen=True)
class BackwardPlan:
    """A backward module trimmed to what it reads, and what its parameters and results are."""

    module: HloModule             # parameters: saved forward inputs, then used cotangents
    saved: tuple[int, ...]        # forward parameter index of each leading parameter
    cotangents: tuple[int, ...]   # forward output index of each following parameter
    wrt: tuple[int, ...]          # forward parameter index of each gradient (result order)


@dataclass(frozen=True)
class NoBackward:
    """Why the op has no backward: raised, as is, when autograd reaches the op."""

    error: FusionCompilerError


def backward_plan(forward: HloModule, backward: str | HloModule | None,
                  where: str | None = None) -> BackwardPlan | NoBackward:
    """The plan for ``backward`` (``"auto"``, an HLO text or module, or ``None``).

    ``"auto"`` on a module an autodiff rule is missing for is a ``NoBackward`` carrying the
    error (the forward still works; the backward raises it).  An explicit module that breaks
    the convention is a ``BadArgumentError`` now.  ``where`` names the op in errors (default:
    the forward module's name).
    """
    name = where or forward.name
    if backward is None:
        return NoBackward(BadArgumentError(
            "this op was registered with backward=None (inference only) and has no gradient",
            where=name, expected="torch_op(..., backward='auto') or a backward HLO module"))
    wrt = default_wrt(forward)
    if isinstance(backward, str) and backward == AUTO:
        try:
            module = vjp(forward)
        except FusionCompilerError as error:
            return NoBackward(error)
    elif isinstance(backward, (str, HloModule)):
        module = parse_hlo(backward) if isinstance(backward, str) else backward
        verify_module(module)
        _check_convention(forward, module, wrt, name)
    else:
        raise BadArgumentError(f"backward={type(backward).__name__} is not understood",
                               where=name, expected="'auto', a backward HLO text, or None")
    return _trimmed(forward, module, wrt)


def _same(a: ArrayShape, b) -> bool:
    return isinstance(b, ArrayShape) and a.dtype == b.dtype and tuple(a.dims) == tuple(b.dims)


def _check_convention(forward: HloModule, backward: HloModule, wrt: tuple[int, ...],
                      where: str) -> None:
    params = forward.entry.parameters
    outputs = flatten_shape(forward.entry.root.shape)
    expected = [p.shape for p in params] + list(outputs)
    got = backward.entry.parameters
    convention = ("the forward's parameters, then one cotangent per forward output; result: "
                  "a tuple of one gradient per floating-point or complex forward parameter")
    if len(got) != len(expected):
        raise BadArgumentError(
            f"the backward module has {len(got)} parameter(s); the forward's {len(params)} "
            f"parameter(s) and {len(outputs)} output(s) need {len(expected)}",
            where=f"{where} (backward {backward.name})", expected=convention)
    for k, (want, param) in enumerate(zip(expected, got)):
        if not _same(want, param.shape):
            role = (f"forward parameter {k}" if k < len(params)
                    else f"the cotangent of forward output {k - len(params)}")
            raise BadArgumentError(
                f"backward parameter {k} (%{param.name}) is {param.shape}, but {role} is {want}",
                where=f"{where} (backward {backward.name})", expected=convention)
    root = backward.entry.root.shape
    results = root.elements if isinstance(root, TupleShape) else (root,)
    if len(results) != len(wrt) or not all(
            _same(params[i].shape, r) for i, r in zip(wrt, results)):
        want = ", ".join(str(params[i].shape) for i in wrt)
        raise BadArgumentError(f"the backward module returns {root}, expected ({want})",
                               where=f"{where} (backward {backward.name})", expected=convention)


def _trimmed(forward: HloModule, backward: HloModule, wrt: tuple[int, ...]) -> BackwardPlan:
    """``backward`` without the parameters nothing reads, renumbered in order."""
    entry = backward.entry
    n_forward = len(forward.entry.parameters)
    users = entry.users
    kept = [p for p in entry.parameters if users[p.name] or p.name == entry.root_name]
    numbers = {p.name: k for k, p in enumerate(kept)}
    dropped = {p.name for p in entry.parameters} - set(numbers)
    instructions = tuple(
        i.replace(attributes=tuple((key, numbers[i.name] if key == "parameter_number" else v)
                                   for key, v in i.attributes))
        if i.opcode == "parameter" else i
        for i in entry.instructions if i.name not in dropped)
    new_entry = HloComputation(entry.name, instructions, entry.root_name, True, entry.location)
    computations = tuple(new_entry if c.name == entry.name else c
                         for c in backward.computations)
    # The entry layout names every parameter: without it, the parameters' own layouts rule.
    attributes = tuple((k, v) for k, v in backward.attributes if k != "entry_computation_layout")
    module = HloModule(backward.name, computations, backward.entry_name, attributes,
                       backward.stack_frames)
    verify_module(module)
    original = [p.attr("parameter_number") for p in kept]
    return BackwardPlan(module,
                        tuple(k for k in original if k < n_forward),
                        tuple(k - n_forward for k in original if k >= n_forward),
                        wrt)
