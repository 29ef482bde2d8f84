"""Give f32 dots a TF32 ``algorithm``: the explicit opt-in to TF32 tensor cores for f32 matmuls.

An f32 x f32 -> f32 ``dot`` without an ``algorithm`` attribute is exact IEEE here (as on
XLA:CPU).  ``with_f32_dot_precision(module, "tf32")`` gives every such dot, in every
computation (fused ones included), XLA's ``algorithm=dot_tf32_tf32_f32`` (``"tf32x3"``:
``dot_tf32_tf32_f32_x3``, three TF32 products, close to f32), so it runs as XLA:GPU runs a
TF32 dot: the same opt-in as ``torch.backends.cuda.matmul.allow_tf32``.  Left alone are dots
whose ``operand_precision`` says ``highest`` for either operand (asked to be exact), dots that
already name an ``algorithm``, and dots of other types; ``"ieee"`` changes nothing.  The
result prints as XLA text (``algorithm=`` is XLA's own attribute).

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... ENTRY e {
...   a = f32[2,3] parameter(0)
...   b = f32[3,4] parameter(1)
...   d = f32[2,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
...   ROOT h = f32[2,4] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0},
...     operand_precision={highest,highest}
... }''')
>>> out = with_f32_dot_precision(m, "tf32")
>>> [i.attr("algorithm", None) for i in out.entry if i.opcode == "dot"]
['dot_tf32_tf32_f32', None]
>>> with_f32_dot_precision(m, "ieee") is m
True
"""
from __future__ import annotations

from dataclasses import replace

from fusion.errors import BadArgumentError
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.ir.shape import ArrayShape

#: The XLA dot algorithms the Triton templates lower as they stand, and the ``tl.dot``
#: ``input_precision`` of each for f32 operands (operands of one narrower type go to ``tl.dot``
#: as they are).  ``dot_f32_f32_f32`` is the exact default spelled out; the bf16 splits are
#: Triton's own (``triton_backend.device_lib.dot_precision``), but ``_x9``, which Triton has
#: not, is exact f32; the fp8 algorithms are the plain fp8 dot.  The algorithms that only
#: round the operands are rewritten before (``fusion.transforms.dot_operand_rounding``).
DOT_ALGORITHM_PRECISIONS: dict[str, str] = {
    "dot_any_f8_any_f8_f32": "ieee",
    "dot_any_f8_any_f8_f32_fast_accum": "ieee",
    "dot_bf16_bf16_f32_x3": "bf16x3",
    "dot_bf16_bf16_f32_x6": "bf16x6",
    "dot_bf16_bf16_f32_x9": "ieee",
    "dot_f32_f32_f32": "ieee",
    "dot_tf32_tf32_f32": "tf32",
    "dot_tf32_tf32_f32_x3": "tf32x3",
}

#: The precisions an f32 dot may be given, and the XLA algorithm each one names (None: none).
F32_DOT_ALGORITHMS: dict[str, str | None] = {
    "ieee": None,
    "tf32": "dot_tf32_tf32_f32",
    "tf32x3": "dot_tf32_tf32_f32_x3",
}


def check_f32_dot_precision(precision: object, option: str = "f32_dot_precision") -> str:
    """``precision`` when it is one of :data:`F32_DOT_ALGORITHMS`, else a ``BadArgumentError``
    naming ``option`` and the values it takes."""
    if not isinstance(precision, str) or precision not in F32_DOT_ALGORITHMS:
        raise BadArgumentError(f"{option} must be one of {', '.join(map(repr, F32_DOT_ALGORITHMS))}"
                               f", not {precision!r}", where=option,
                               expected=" | ".join(F32_DOT_ALGORITHMS))
    return precision


def with_f32_dot_precision(module: HloModule, precision: str) -> HloModule:
    """``module`` with the algorithm of ``precision`` on every f32 dot that may take it (module
    docstring); ``module`` itself when no dot changes."""
    algorithm = F32_DOT_ALGORITHMS[check_f32_dot_precision(precision)]
    if algorithm is None:
        return module
    comps = tuple(_with_algorithm(c, algorithm) for c in module.computations)
    if all(new is old for new, old in zip(comps, module.computations)):
        return module
    return replace(module, computations=comps)


def _with_algorithm(comp: HloComputation, algorithm: str) -> HloComputation:
    instrs = tuple(instr.replace(attributes=instr.attributes + (("algorithm", algorithm),))
                   if _takes_algorithm(comp, instr) else instr for instr in comp)
    if all(new is old for new, old in zip(instrs, comp.instructions)):
        return comp
    return replace(comp, instructions=instrs)


def _takes_algorithm(comp: HloComputation, instr: HloInstruction) -> bool:
    """An f32 x f32 -> f32 dot with no algorithm and no operand asked to be ``highest``."""
    if instr.opcode != "dot" or instr.has_attr("algorithm"):
        return False
    types = [comp.instruction(o).shape for o in instr.operands] + [instr.shape]
    if not all(isinstance(s, ArrayShape) and s.dtype == "f32" for s in types):
        return False
    words = tuple(instr.attr("operand_precision", ())) + tuple(instr.attr("precision_config", ()))
    return not any(str(w).lower() == "highest" for w in words)


__all__ = ["DOT_ALGORITHM_PRECISIONS", "F32_DOT_ALGORITHMS", "check_f32_dot_precision", "with_f32_dot_precision"]
