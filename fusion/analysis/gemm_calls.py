"""cuBLAS GEMM custom-calls: what a ``__cublas$gemm`` or ``__cublas$lt$matmul`` computes.

XLA:GPU's ``GemmRewriter`` turns a dot, with what it can fold around it, into a custom-call
to cuBLAS (seed ``gpu_emitters``: the library call is XLA:GPU's first path for a matmul), so
every HLO dump XLA:GPU optimized holds them.  The call's ``gemm_backend_config`` (XLA's
``GemmBackendConfig``) says what it computes::

    D = activation(alpha * dot(A, B) + beta * C + broadcast(bias))

with ``dot_dimension_numbers`` and ``precision_config`` as a dot's, ``C`` operand 2 when
``beta`` is not 0 (the result aliases it), the bias the next operand when the ``epilogue``
has one (``BIAS``, ``BIAS_RELU``, ``BIAS_GELU``, ``BIAS_GELU_AUX``: a vector over the
result's trailing dims, as ``GemmRewriter`` folds ``add(dot, broadcast(bias))`` only along
them) and the activation ``RELU`` (``max(x, 0)``) or ``GELU`` (the tanh approximation, the
form ``GemmRewriter`` matches).  cuBLAS computes in f32 for 16-bit floats (in the result's
type otherwise) and rounds once.  The result is a tuple: ``D``, the pre-activation value for
a ``*_AUX`` epilogue, then the ``s8`` workspace XLA's ``GemmWorkspaceRewriter`` appends
(older dumps: ``D`` alone, or without the workspace).  This module decodes that and nothing
else: the evaluator (``evaluator/gemm_ops``) computes it, and ``transforms/gpu_call_expansion``
writes it as plain HLO ops for the compiler (a plain dot runs as cuBLAS again on a GPU).

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... ENTRY e {
...   a = f32[2,3] parameter(0)
...   b = f32[3,4] parameter(1)
...   z = f32[4] parameter(2)
...   c = (f32[2,4], s8[64]) custom-call(a, b, z), custom_call_target="__cublas$lt$matmul",
...     backend_config={"gemm_backend_config":{"alpha_real":2,"beta":0,"epilogue":"BIAS_RELU",
...       "dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],
...         "rhs_contracting_dimensions":["0"]}}}
...   ROOT g = f32[2,4] get-tuple-element(c), index=0
... }''')
>>> call = gemm_call(m.entry.instruction("c"))
>>> call.alpha, call.bias, call.activation, call.compute_type, call.workspace
(2.0, 'z', 'relu', 'f32', True)
"""
from __future__ import annotations

from dataclasses import dataclass

from fusion.analysis.custom_call_configs import (REAL_FLOATS, backend_config_of, compute_type,
                                                 config_number, custom_call_error)
from fusion.ir.hlo_module import HloInstruction
from fusion.ir.shape import ArrayShape, TupleShape
from fusion.text.backend_config import as_list

#: The custom-call targets of cuBLAS GEMMs (hipBLASLt's too, which XLA names alike).
GEMM_TARGETS = ("__cublas$gemm", "__cublas$lt$matmul")

#: ``epilogue`` -> (adds a bias, activation or None, returns the pre-activation value).
EPILOGUES: dict[str, tuple[bool, str | None, bool]] = {
    "BIAS": (True, None, False),
    "BIAS_GELU": (True, "gelu", False),
    "BIAS_GELU_AUX": (True, "gelu", True),
    "BIAS_RELU": (True, "relu", False),
    "DEFAULT": (False, None, False),
    "GELU": (False, "gelu", False),
    "GELU_AUX": (False, "gelu", True),
    "RELU": (False, "relu", False),
}

# Enum numbers, as a protobuf-text dump may give them.
_EPILOGUE_NUMBERS = {"0": "DEFAULT", "1": "BIAS", "2": "RELU", "3": "BIAS_RELU", "4": "GELU",
                     "5": "GELU_AUX", "6": "BIAS_GELU", "7": "BIAS_GELU_AUX"}


@dataclass(frozen=True)
class GemmCall:
    """One cuBLAS GEMM custom-call, decoded (module docstring).

    ``lhs``, ``rhs``, ``c``, ``bias``: operand names (``c``/``bias`` None when absent);
    ``result``: the shape of ``D``; ``aux``: the pre-activation output's shape, or None;
    ``workspace``: whether the tuple ends with the workspace; ``tuple_result``: whether the
    call returns a tuple at all.  ``dot_attributes`` are the dot's HLO attributes
    (``lhs_contracting_dims``, ..., ``operand_precision``, ``algorithm``)."""

    target: str
    lhs: str
    rhs: str
    c: str | None
    bias: str | None
    alpha: float
    beta: float
    activation: str | None
    result: ArrayShape
    aux: ArrayShape | None
    workspace: bool
    tuple_result: bool
    dot_attributes: tuple[tuple[str, object], ...]

    @property
    def compute_type(self) -> str:
        """The type cuBLAS computes the epilogue in (``custom_call_configs.compute_type``)."""
        return compute_type(self.result.dtype)


def is_gemm_call(instr: HloInstruction) -> bool:
    """A custom-call to a cuBLAS GEMM target (:data:`GEMM_TARGETS`)."""
    return instr.opcode == "custom-call" and instr.attr("custom_call_target", None) in GEMM_TARGETS


def gemm_call(instr: HloInstruction) -> GemmCall:
    """What the GEMM custom-call ``instr`` computes; ``UnsupportedOpError`` naming the field
    when it is something this project does not compute (complex alpha, an epilogue it does
    not know, a result it does not recognise)."""
    target = instr.attr("custom_call_target")
    config = _gemm_config(instr)
    alpha = config_number(config, "alpha_real", 1, instr)
    beta = config_number(config, "beta", 0, instr)
    if config_number(config, "alpha_imag", 0, instr) != 0:
        raise custom_call_error(instr, "a complex alpha (alpha_imag) is not supported")
    epilogue = str(config.get("epilogue", "DEFAULT"))
    epilogue = _EPILOGUE_NUMBERS.get(epilogue, epilogue)
    if epilogue not in EPILOGUES:
        raise custom_call_error(instr, f"epilogue {epilogue} is not supported (known: "
                                  f"{', '.join(EPILOGUES)})")
    has_bias, activation, has_aux = EPILOGUES[epilogue]
    result, aux, workspace, is_tuple = _outputs(instr, has_aux)
    expected = 2 + (beta != 0) + has_bias
    if len(instr.operands) != expected:
        raise custom_call_error(instr, f"takes {len(instr.operands)} operands; beta={beta:g} and "
                                  f"epilogue {epilogue} mean {expected} (lhs, rhs"
                                  f"{', c' if beta != 0 else ''}{', bias' if has_bias else ''})")
    if result.dtype not in REAL_FLOATS and (alpha != 1 or beta != 0 or activation or has_bias):
        raise custom_call_error(instr, f"a {result.dtype} GEMM with alpha, beta or an epilogue is "
                                  "not supported")
    return GemmCall(target, instr.operands[0], instr.operands[1],
                    instr.operands[2] if beta != 0 else None,
                    instr.operands[-1] if has_bias else None, alpha, beta, activation, result,
                    aux, workspace, is_tuple, _dot_attributes(config, instr))


def _gemm_config(instr: HloInstruction) -> dict:
    config = backend_config_of(instr, "gemm_backend_config")
    if "dot_dimension_numbers" not in config:
        raise custom_call_error(instr, "its backend_config has no gemm_backend_config with "
                                  "dot_dimension_numbers")
    return config


def _outputs(instr: HloInstruction, has_aux: bool
             ) -> tuple[ArrayShape, ArrayShape | None, bool, bool]:
    shape = instr.shape
    if isinstance(shape, ArrayShape):
        if has_aux:
            raise custom_call_error(instr, "an *_AUX epilogue returns a tuple (result, aux, ...)")
        return shape, None, False, False
    parts = list(shape.elements) if isinstance(shape, TupleShape) else []
    if not parts or not all(isinstance(p, ArrayShape) for p in parts):
        raise custom_call_error(instr, f"result {shape} is not an array or a tuple of arrays")
    result, rest = parts[0], parts[1:]
    aux = rest.pop(0) if has_aux and rest else None
    if has_aux and aux is None:
        raise custom_call_error(instr, "an *_AUX epilogue needs the pre-activation result too")
    workspace = bool(rest) and rest[0].dtype in ("s8", "u8") and rest[0].rank == 1
    if len(rest) > workspace:
        raise custom_call_error(instr, f"result {shape}: more outputs than the result"
                                  f"{', its aux' if has_aux else ''} and a workspace")
    return result, aux, workspace, True


def _dot_attributes(config: dict, instr: HloInstruction) -> tuple[tuple[str, object], ...]:
    numbers = config["dot_dimension_numbers"]
    if not isinstance(numbers, dict):
        raise custom_call_error(instr, "dot_dimension_numbers is not a message")

    def dims(key: str) -> tuple[int, ...]:
        try:
            return tuple(int(d) for d in as_list(numbers.get(key)))
        except (TypeError, ValueError):
            raise custom_call_error(instr, f"dot_dimension_numbers.{key} is not a list of dims") from None

    attrs: list[tuple[str, object]] = [
        ("lhs_batch_dims", dims("lhs_batch_dimensions")),
        ("rhs_batch_dims", dims("rhs_batch_dimensions")),
        ("lhs_contracting_dims", dims("lhs_contracting_dimensions")),
        ("rhs_contracting_dims", dims("rhs_contracting_dimensions"))]
    precision = config.get("precision_config") or {}
    if not isinstance(precision, dict):
        raise custom_call_error(instr, "precision_config is not a message")
    operand_precision = [str(p).lower() for p in as_list(precision.get("operand_precision"))]
    if operand_precision:
        attrs.append(("operand_precision", tuple(operand_precision)))
    algorithm = str(precision.get("algorithm", "ALG_UNSET"))
    if algorithm not in ("ALG_UNSET", "0"):
        # XLA's PrecisionConfig.Algorithm ALG_DOT_BF16_BF16_F32 prints as dot_bf16_bf16_f32.
        attrs.append(("algorithm", algorithm.lower().removeprefix("alg_")))
    return tuple(attrs)


__all__ = ["EPILOGUES", "GEMM_TARGETS", "GemmCall", "gemm_call", "is_gemm_call"]
