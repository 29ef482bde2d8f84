"""``vjp(module, wrt)``: the backward module of a forward HLO module.

Its parameters are the forward's parameters followed by one cotangent per forward output (a
tuple result flattened depth first); its result is a tuple with one gradient per
differentiated parameter.  The steps: flatten the ENTRY computation (``flatten``), copy it
into the backward computation, run the reverse pass (``reverse_pass``, one rule per op in
``registry``), then drop what no gradient reads (``dead_code``).
"""
from __future__ import annotations

from typing import Sequence

from fusion.analysis.collectives import DEVICE_COUNT_KEYS
from fusion.autodiff.cotangents import Cotangent, materialize
from fusion.autodiff.dead_code import called_first, tidy
from fusion.autodiff.flatten import flatten_computation
from fusion.autodiff.graph_builder import ComputationTable, GraphBuilder
from fusion.autodiff.qr_as_solve import qr_as_solve
from fusion.autodiff.registry import VJP_RULES
from fusion.autodiff.reverse_pass import differentiate
from fusion.errors import BadArgumentError
from fusion.ir.hlo_module import HloComputation, HloModule
from fusion.ir.shape import ArrayShape, Shape, TupleShape, flatten_shape
from fusion.shapes.verifier import verify_module
from fusion.transforms.async_unwrapping import unwrap_async_calls
from fusion.transforms.batch_norm_expansion import expand_batch_norms
from fusion.transforms.gpu_call_expansion import expand_gpu_library_calls
from fusion.transforms.ragged_dot_expansion import expand_ragged_dots
from fusion.transforms.scaled_dot_expansion import expand_scaled_dots


def _differentiable_parameter(shape: Shape) -> bool:
    return isinstance(shape, ArrayShape) and (shape.element_type.is_float
                                              or shape.element_type.is_complex)


def default_wrt(module: HloModule) -> tuple[int, ...]:
    """The ENTRY parameters differentiated by default: every floating-point or complex array
    (a complex one's gradient in JAX's convention, ``cotangents``)."""
    return tuple(i for i, p in enumerate(module.entry.parameters)
                 if _differentiable_parameter(p.shape))


def _checked_wrt(module: HloModule, wrt: Sequence[int] | None) -> tuple[int, ...]:
    params = module.entry.parameters
    if wrt is None:
        return default_wrt(module)
    chosen = tuple(wrt)
    for index in chosen:
        if not isinstance(index, int) or not 0 <= index < len(params):
            raise BadArgumentError(f"wrt index {index!r} is not a parameter of ENTRY "
                                f"{module.entry_name} ({len(params)} parameters)",
                                where=module.entry_name)
        if not _differentiable_parameter(params[index].shape):
            raise BadArgumentError(
                f"parameter {index} (%{params[index].name}) is {params[index].shape}: only "
                "floating-point and complex arrays have gradients", where=module.entry_name,
                expected="a floating-point or complex array parameter")
    if len(set(chosen)) != len(chosen):
        raise BadArgumentError(f"wrt {list(chosen)} names a parameter twice",
                            where=module.entry_name)
    return chosen


def _cotangent_of(names: list[str], shape: Shape) -> Cotangent:
    """The cotangent structure of a result of ``shape`` from its leaves' parameter names."""
    if isinstance(shape, ArrayShape):
        return names.pop(0)
    return tuple(_cotangent_of(names, s) for s in shape.elements)


def vjp(module: HloModule, wrt: Sequence[int] | None = None) -> HloModule:
    """The backward module of ``module``: ``(params..., cotangents...) -> (gradients...)``.

    >>> from fusion.text.parser import parse_hlo
    >>> from fusion.text.printer import print_hlo
    >>> m = parse_hlo('''HloModule m
    ... ENTRY e {
    ...   x = f32[3] parameter(0)
    ...   n = s32[] parameter(1)
    ...   ROOT y = f32[3] sine(x)
    ... }''')
    >>> print(print_hlo(vjp(m)).strip())
    HloModule m_vjp
    <BLANKLINE>
    ENTRY e_vjp {
      x = f32[3] parameter(0)
      n = s32[] parameter(1)
      ct = f32[3] parameter(2)
      cosine = f32[3] cosine(x)
      multiply = f32[3] multiply(ct, cosine)
      ROOT tuple = (f32[3]) tuple(multiply)
    }
    """
    # An async pair, a cuBLAS/cuDNN call, a batch-norm op, a ragged or scaled dot
    # differentiates as what it computes (XLA defines a batch-norm op by its expansion); a
    # QR as its Q and R.
    module = qr_as_solve(expand_ragged_dots(expand_batch_norms(expand_scaled_dots(
        expand_gpu_library_calls(unwrap_async_calls(module)))), keep="canonical"))
    verify_module(module)
    chosen = _checked_wrt(module, wrt)
    table = ComputationTable({c.name: c for c in module.computations})
    forward = flatten_computation(module, module.entry)
    b = GraphBuilder(table)
    params = [b.append(p) for p in forward.parameters]
    leaves = flatten_shape(forward.root.shape)

    def root_cotangent() -> Cotangent:
        names = [b.parameter(len(params) + k, leaf, "ct") for k, leaf in enumerate(leaves)]
        return _cotangent_of(names, forward.root.shape)

    cts = differentiate(b, module, forward, params, root_cotangent, set(chosen), VJP_RULES)
    grads = [materialize(b, cts[i], forward.parameters[i].shape) for i in chosen]
    root = b.tuple(grads) if grads else b.emit("tuple", (), shape=TupleShape(()))
    entry = tidy(HloComputation(
        table.fresh_name(module.entry_name + "_vjp"), tuple(b.instructions), root, True))
    table.add(entry)
    computations = called_first(entry, table.computation)
    # It runs where the forward runs: on as many devices (its other header attributes, the
    # entry's layout among them, describe the forward's signature).
    devices = tuple((k, v) for k, v in module.attributes if k in DEVICE_COUNT_KEYS)
    result = HloModule(module.name + "_vjp", tuple(computations), entry.name, devices)
    verify_module(result)
    return result
