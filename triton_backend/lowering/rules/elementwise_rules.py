"""Triton expression text for HLO elementwise ops, one rule per opcode (XLA semantics).

A rule receives operand *expressions* (Python code text, usually identifiers bound earlier in
the kernel) in their register representation and returns the expression computing the op.
Register representation (see ``numerics_policy``): f32/f64 as themselves, bf16/f16 as fp32
holding a representable value, integers as their own ``tl`` type, pred as ``tl.int1``.
Generated kernels must start with :data:`KERNEL_IMPORTS`.  Operands may be repeated in the
output, so pass identifiers (or cheap expressions), not calls with side effects.

>>> from fusion.ir.element_types import ELEMENT_TYPES as T
>>> render_elementwise("add", ("a", "b"), (T["bf16"], T["bf16"]), T["bf16"])
'xla_math.round_to_bf16((a) + (b))'
>>> render_elementwise("shift-left", ("a", "b"), (T["u8"], T["u8"]), T["u8"])
'tl.where((b).to(tl.uint8, bitcast=True) >= 8, (a) * 0, (a) << tl.where((b).to(tl.uint8, bitcast=True) >= 8, (b) * 0, (b)))'
"""
from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from fusion.ir.element_types import ElementType
from fusion.errors import UnsupportedOpError
from triton_backend.lowering.emitter.triton_types import (
    FLOAT8,
    NARROW_FLOATS,
    render_load_widen,
    render_round,
    render_store_narrow,
    storage_dtype,
)

@dataclass(frozen=True)
class ElementwiseCall:
    """One elementwise op to render: operand expressions, their types, result type, attributes."""

    opcode: str
    operands: tuple[str, ...]
    operand_types: tuple[ElementType, ...]
    result_type: ElementType
    attributes: Mapping[str, object]
    #: Per operand, its value where the operand is one constant everywhere (a splat), else None.
    splats: tuple[object, ...] = ()

    def unsupported(self, why: str) -> UnsupportedOpError:
        types = ", ".join(t.name for t in self.operand_types)
        return UnsupportedOpError(f"{why} ({self.opcode} on {types} -> {self.result_type.name})",
                                  where=self.opcode)


Rule = Callable[[ElementwiseCall], str]


def _p(e: str) -> str:
    return f"({e})"


def _is_float(t: ElementType) -> bool:
    return t.is_float and (t.name in ("f32", "f64") or t.name in NARROW_FLOATS)


def _int_min(t: ElementType) -> int:
    return -(1 << (t.bits - 1))


def _int_max(t: ElementType) -> int:
    return (1 << (t.bits - 1)) - 1 if t.is_signed else (1 << t.bits) - 1


def _unsigned_of(t: ElementType) -> str:
    return {8: "tl.uint8", 16: "tl.uint16", 32: "tl.uint32", 64: "tl.uint64"}[max(t.bits, 8)]


def _signed_of(t: ElementType) -> str:
    return {8: "tl.int8", 16: "tl.int16", 32: "tl.int32", 64: "tl.int64"}[max(t.bits, 8)]


def _bits_u32(x: str, t: ElementType) -> str:
    """The ``t.bits`` bits of integer ``x`` (up to 32 bits wide) as a ``uint32``."""
    u = f"{x}.to({_unsigned_of(t)}, bitcast=True).to(tl.uint32)"
    return f"({u} & {(1 << t.bits) - 1})" if t.bits < 8 else u


def wrap_sub_byte(expr: str, t: ElementType) -> str:
    """``expr`` (a byte-wide integer) reduced to ``t``'s sub-byte range, as two's complement
    arithmetic in ``t.bits`` wraps: sign-extended from bit ``t.bits - 1`` (signed) or masked.

    >>> from fusion.ir.element_types import ELEMENT_TYPES as T
    >>> wrap_sub_byte("x", T["s4"]), wrap_sub_byte("x", T["u2"])
    ('((((x).to(tl.int32) << 28) >> 28).to(tl.int8))', '(((x).to(tl.int32) & 3).to(tl.uint8))')
    """
    if t.is_signed:
        shift = 32 - t.bits
        return f"(((({expr}).to(tl.int32) << {shift}) >> {shift}).to(tl.int8))"
    return f"((({expr}).to(tl.int32) & {(1 << t.bits) - 1}).to(tl.uint8))"


def _float_operand(call: ElementwiseCall) -> str:
    if not _is_float(call.operand_types[0]):
        raise call.unsupported("expects a floating-point operand")
    return _p(call.operands[0])


def lower_unary_math(name: str) -> Rule:
    def rule(call: ElementwiseCall) -> str:
        return f"xla_math.{name}({_float_operand(call)})"
    return rule


def lower_abs(call: ElementwiseCall) -> str:
    x, t = _p(call.operands[0]), call.operand_types[0]
    if t.kind == "unsigned" or t.is_pred:
        return x
    return f"tl.abs({x})"


#: Arithmetic XLA defines on pred (``EmitPredBinaryOp``): ``int8(x) op int8(y) != 0``, so add
#: is or and multiply is and; shape inference refuses subtract on pred.
_PRED_ARITH = {"+": "|", "*": "&"}


def lower_arith(op: str) -> Rule:
    def rule(call: ElementwiseCall) -> str:
        if call.result_type.is_pred:
            if op not in _PRED_ARITH:
                raise call.unsupported("arithmetic on pred")
            op_on_pred = _PRED_ARITH[op]
            return f"{_p(call.operands[0])} {op_on_pred} {_p(call.operands[1])}"
        return f"{_p(call.operands[0])} {op} {_p(call.operands[1])}"
    return rule


def lower_bitwise(op: str) -> Rule:
    def rule(call: ElementwiseCall) -> str:
        if _is_float(call.result_type):
            raise call.unsupported("bitwise op on floats")
        return f"{_p(call.operands[0])} {op} {_p(call.operands[1])}"
    return rule


def lower_clamp(call: ElementwiseCall) -> str:
    lo, x, hi = call.operands
    inner = _minmax(">=", x, lo, call.result_type)
    return _minmax("<=", inner, hi, call.result_type)


def _minmax(cmp: str, x: str, y: str, t: ElementType) -> str:
    x, y = _p(x), _p(y)
    if _is_float(t):
        # XLA's maximum/minimum are IEEE 754-2019 (LLVM's llvm.maximum): NaN propagates and
        # -0.0 < +0.0 whatever the operand order.  Equal operands differ only in the sign of
        # zero: max keeps x when y is -0.0, min keeps y then.  (Nested where, never ``|`` or
        # ``&`` of two compares: Triton's interpreter labels a rank-0 compare with its
        # operands' float type, so ``(x != x)`` of a scalar x joined to a block compare made
        # floats and the ``|`` failed.)
        strict = ">" if cmp == ">=" else "<"
        tie = (f"tl.where(xla_math.signbit({y}), {x}, {y})" if cmp == ">="
               else f"tl.where(xla_math.signbit({y}), {y}, {x})")
        return (f"tl.where({x} != {x}, {x}, tl.where({x} {strict} {y}, {x}, "
                f"tl.where({x} == {y}, {tie}, {y})))")
    if t.is_pred:
        return f"{x} | {y}" if cmp == ">=" else f"{x} & {y}"
    return f"tl.maximum({x}, {y})" if cmp == ">=" else f"tl.minimum({x}, {y})"


def lower_compare(call: ElementwiseCall) -> str:
    direction = call.attributes.get("direction")
    ops = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}
    if direction not in ops:
        raise call.unsupported(f"compare direction {direction!r}; expected one of {sorted(ops)}")
    x, y = (_p(o) for o in call.operands)
    t = call.operand_types[0]
    if _is_float(t) and call.attributes.get("type") == "TOTALORDER":
        x, y = (_total_order_key(o, t) for o in call.operands)
    elif t.is_pred:
        x, y = f"{x}.to(tl.int8)", f"{y}.to(tl.int8)"
    return f"{x} {ops[direction]} {y}"


def _total_order_key(expr: str, t: ElementType) -> str:
    # Flip the magnitude bits of negative values: signed-int order becomes XLA's total order
    # (-NaN < -inf < ... < -0 < +0 < ... < inf < NaN).  16-bit floats widen to f32 exactly.
    int_t, mask = ("tl.int64", "0x7FFFFFFFFFFFFFFF") if t.name == "f64" else ("tl.int32", "0x7FFFFFFF")
    bits = f"({expr}).to({int_t}, bitcast=True)"
    return f"tl.where({bits} < 0, {bits} ^ {mask}, {bits})"


def lower_convert(call: ElementwiseCall) -> str:
    x, src, dst = _p(call.operands[0]), call.operand_types[0], call.result_type
    if src.name == dst.name:
        return x
    if dst.is_pred:
        return f"{x} != 0"
    if dst.name in FLOAT8 and src.name == "f64":
        # f64 -> f32 -> f8 would round twice; XLA rounds once.
        raise call.unsupported("convert from f64 to an 8-bit float (convert through f32)")
    if _is_float(dst):
        # Rounding to narrow floats happens after the rule; integers go to f32 first, as XLA does.
        return f"{x}.to({'tl.float64' if dst.name == 'f64' else 'tl.float32'})"
    if not dst.is_integer:
        raise call.unsupported("unsupported conversion target")
    if not _is_float(src):
        return f"{x}.to({storage_dtype(dst)})"
    lo, hi = _int_min(dst) if dst.is_signed else 0, _int_max(dst)
    # hi + 1 is a power of two, so exact in every float type; lo likewise.
    in_range = f"({x} >= {float(lo)!r}) & ({x} < {float(hi + 1)!r})"
    safe = f"tl.where({in_range}, {x}, 0.0).to({storage_dtype(dst)})"
    zero = f"{safe} * 0"
    return (f"tl.where({x} != {x}, {zero}, tl.where({x} >= {float(hi + 1)!r}, {zero} + {hi}, "
            f"tl.where({x} < {float(lo)!r}, {zero} + ({lo}), {safe})))")


def lower_bitcast_convert(call: ElementwiseCall) -> str:
    x, src, dst = _p(call.operands[0]), call.operand_types[0], call.result_type
    if src.bits != dst.bits or src.is_pred or dst.is_pred:
        raise call.unsupported("bitcast-convert between different bit widths")
    bits = render_store_narrow(x, src) if src.name in NARROW_FLOATS else x
    return render_load_widen(f"{bits}.to({storage_dtype(dst)}, bitcast=True)", dst)


def lower_count_leading_zeros(call: ElementwiseCall) -> str:
    x, t = _p(call.operands[0]), call.operand_types[0]
    if not t.is_integer:
        raise call.unsupported("expects an integer operand")
    if t.bits == 64:
        u = f"{x}.to(tl.uint64, bitcast=True)"
        hi, lo = f"({u} >> 32).to(tl.uint32)", f"({u} & 0xFFFFFFFF).to(tl.uint32)"
        n = f"tl.where({hi} == 0, 32 + xla_math.clz32({lo}), xla_math.clz32({hi}))"
    else:
        n = f"(xla_math.clz32({_bits_u32(x, t)}) - {32 - t.bits})"
    return f"{n}.to({storage_dtype(t)})"


def lower_divide(call: ElementwiseCall) -> str:
    x, y = (_p(o) for o in call.operands)
    t = call.result_type
    reciprocal = _constant_reciprocal(call.splats[1] if len(call.splats) > 1 else None, t)
    if reciprocal is not None:
        # XLA's AlgebraicSimplifier rewrites A / C to A * (1 / C) for a constant C, with 1 / C
        # rounded to C's type (exact when C is a power of two): XLA runs a multiply, and so
        # do we, without a division's Newton steps (div_rn is ~10 instructions per element).
        return f"{x} * {reciprocal!r}"
    if t.name == "f64":
        return f"{x} / {y}"  # div.rn.f64; div_rn only takes fp32
    if _is_float(t):
        return f"tl.math.div_rn({x}, {y})"
    if t.is_pred:
        raise call.unsupported("divide on pred")
    if t.kind == "unsigned":
        return f"tl.where({y} == 0, {x} * 0 + {_int_max(t)}, {x} // tl.where({y} == 0, {y} * 0 + 1, {y}))"
    overflow = f"(({x} == {_int_min(t)}) & ({y} == -1))"
    safe_y = f"tl.where(({y} == 0) | {overflow}, {y} * 0 + 1, {y})"
    return f"tl.where({y} == 0, {y} * 0 - 1, {x} // {safe_y})"


#: The type XLA computes ``1 / C`` in when its simplifier rewrites ``A / C`` (checked against
#: XLA:CPU): f32 and f16 invert in their own type; bf16 arithmetic is widened to f32 first.
#: Others (f64: a Python float literal reaches Triton as fp32; the 8-bit floats) divide,
#: unless the reciprocal is exact.
_RECIPROCAL_TYPES = {"bf16": np.float32, "f16": np.float16, "f32": np.float32}


def _constant_reciprocal(divisor: object, t: ElementType) -> float | None:
    """``1 / divisor`` as XLA multiplies by it (see ``_RECIPROCAL_TYPES``; exact for a power
    of two), when the divisor and its reciprocal are finite normal numbers of ``t`` (a float
    type), else None.

    >>> from fusion.ir.element_types import ELEMENT_TYPES as T
    >>> _constant_reciprocal(8.0, T["bf16"]), _constant_reciprocal(3.0, T["bf16"])
    (0.125, 0.3333333432674408)
    >>> _constant_reciprocal(3.0, T["f64"]), _constant_reciprocal(2.0 ** 127, T["f32"])
    (None, None)
    """
    if not _is_float(t) or not isinstance(divisor, float) or not math.isfinite(divisor) \
            or divisor == 0.0:
        return None
    if math.frexp(abs(divisor))[0] == 0.5:
        reciprocal = 1.0 / divisor
    elif t.name in _RECIPROCAL_TYPES:
        kind = _RECIPROCAL_TYPES[t.name]
        reciprocal = float(kind(1.0) / kind(divisor))
    else:
        return None
    info = ml_dtypes.finfo(t.numpy_dtype())
    return reciprocal if float(info.tiny) <= abs(reciprocal) <= float(info.max) else None


def lower_is_finite(call: ElementwiseCall) -> str:
    x = _float_operand(call)
    t = call.operand_types[0]
    finite_max = "1.7976931348623157e308" if t.name == "f64" else "3.4028234663852886e38"
    return f"tl.abs({x}) <= {finite_max}"


def lower_logistic(call: ElementwiseCall) -> str:
    x = _float_operand(call)
    if call.operand_types[0].name == "f64":
        return f"1.0 / (1.0 + xla_math.exp(-{x}))"
    return f"tl.math.div_rn(1.0, 1.0 + xla_math.exp(-{x}))"


def lower_negate(call: ElementwiseCall) -> str:
    x = _p(call.operands[0])
    if call.result_type.is_pred:
        raise call.unsupported("negate on pred")
    return f"0 - {x}" if call.result_type.kind == "unsigned" else f"-{x}"


def lower_not(call: ElementwiseCall) -> str:
    x = _p(call.operands[0])
    if call.result_type.is_pred:
        return f"{x} == 0"
    if not call.result_type.is_integer:
        raise call.unsupported("not on floats")
    return f"~{x}"


def lower_popcnt(call: ElementwiseCall) -> str:
    x, t = _p(call.operands[0]), call.operand_types[0]
    if not t.is_integer:
        raise call.unsupported("expects an integer operand")
    if t.bits == 64:
        u = f"{x}.to(tl.uint64, bitcast=True)"
        n = (f"(xla_math.popc32(({u} >> 32).to(tl.uint32)) + "
             f"xla_math.popc32(({u} & 0xFFFFFFFF).to(tl.uint32)))")
    else:
        n = f"xla_math.popc32({_bits_u32(x, t)})"
    return f"{n}.to({storage_dtype(t)})"


def lower_power(call: ElementwiseCall) -> str:
    x, y = (_p(o) for o in call.operands)
    t = call.result_type
    if _is_float(t):
        return f"xla_math.pow({x}, {y})"
    if not t.is_integer:
        raise call.unsupported("power on pred")
    return f"xla_math.int_pow({x}, {y}, {t.bits}, {t.kind == 'signed'})"


#: Float type -> (exponent bits, mantissa bits, how its register value gives its bits as an
#: int64, how an int64 bit pattern ``{}`` becomes its register value again).
_FLOAT_BITS = {
    "f64": (11, 52, "{x}.to(tl.int64, bitcast=True)", "{b}.to(tl.float64, bitcast=True)"),
    "f32": (8, 23, "({x}.to(tl.int32, bitcast=True).to(tl.int64) & 0xFFFFFFFF)",
            "{b}.to(tl.int32).to(tl.float32, bitcast=True)"),
    # 16-bit floats are held in fp32 (numerics_policy) and rounded in their own format.
    "f16": (5, 10, "({x}.to(tl.float16).to(tl.int16, bitcast=True).to(tl.int64) & 0xFFFF)",
            "{b}.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)"),
    "bf16": (8, 7, "(({x}.to(tl.int32, bitcast=True).to(tl.int64) >> 16) & 0xFFFF)",
             "({b} << 16).to(tl.int32).to(tl.float32, bitcast=True)"),
}


def lower_reduce_precision(call: ElementwiseCall) -> str:
    """XLA's ``reduce-precision`` in integer bit arithmetic (``xla_math.reduce_precision_bits``).

    >>> from fusion.ir.element_types import ELEMENT_TYPES as T
    >>> call = ElementwiseCall("reduce-precision", ("x",), (T["f32"],), T["f32"],
    ...                        {"exponent_bits": 5, "mantissa_bits": 10})
    >>> lower_reduce_precision(call)  # doctest: +ELLIPSIS
    'tl.where((x) != (x), (x), xla_math.reduce_precision_bits(((x).to(tl.int32, ..., 8, 23, 5, 10)...)'
    """
    x, t = _p(call.operands[0]), call.result_type
    if t.name not in _FLOAT_BITS:
        raise call.unsupported("expects a floating-point operand (f16, bf16, f32, f64)")
    exponent_bits, mantissa_bits = call.attributes.get("exponent_bits"), call.attributes.get("mantissa_bits")
    if not isinstance(exponent_bits, int) or not isinstance(mantissa_bits, int):
        raise call.unsupported("needs integer exponent_bits and mantissa_bits")
    source_e, source_m, to_bits, from_bits = _FLOAT_BITS[t.name]
    rounded = (f"xla_math.reduce_precision_bits({to_bits.format(x=x)}, {source_e}, {source_m}, "
               f"{exponent_bits}, {mantissa_bits})")
    return f"tl.where({x} != {x}, {x}, {from_bits.format(b=rounded)})"


def lower_remainder(call: ElementwiseCall) -> str:
    x, y = (_p(o) for o in call.operands)
    t = call.result_type
    if _is_float(t):
        return f"xla_math.fmod({x}, {y})"
    if t.is_pred:
        raise call.unsupported("remainder on pred")
    if t.kind == "unsigned":
        return f"tl.where({y} == 0, {x}, {x} % tl.where({y} == 0, {y} * 0 + 1, {y}))"
    # y == -1 always gives 0 and avoids INT_MIN % -1, which traps on some targets.
    return f"tl.where({y} == 0, {x}, tl.where({y} == -1, {x} * 0, {x} % tl.where({y} == 0, {y} * 0 + 1, {y})))"


def lower_rsqrt(call: ElementwiseCall) -> str:
    if call.operand_types[0].name == "f64":
        return f"1.0 / tl.sqrt({_float_operand(call)})"
    return f"tl.math.div_rn(1.0, tl.math.sqrt_rn({_float_operand(call)}))"


def lower_select(call: ElementwiseCall) -> str:
    p, a, b = (_p(o) for o in call.operands)
    return f"tl.where({p}, {a}, {b})"


def lower_shift(kind: str) -> Rule:
    def rule(call: ElementwiseCall) -> str:
        x, y = (_p(o) for o in call.operands)
        t = call.result_type
        if not t.is_integer:
            raise call.unsupported("shift on non-integers")
        oob = f"{y}.to({_unsigned_of(t)}, bitcast=True) >= {t.bits}"
        safe = f"tl.where({oob}, {y} * 0, {y})"
        if kind == "left":
            return f"tl.where({oob}, {x} * 0, {x} << {safe})"
        if kind == "logical":
            bits = f"{x}.to({_unsigned_of(t)}, bitcast=True)"
            if t.bits < 8:  # the sub-byte value's own bits, not its sign extension
                bits = f"({bits} & {(1 << t.bits) - 1})"
            shifted = f"({bits} >> {safe}.to({_unsigned_of(t)}, bitcast=True))"
            return f"tl.where({oob}, {x} * 0, {shifted}.to({storage_dtype(t)}, bitcast=True))"
        amount = f"tl.where({oob}, {y} * 0 + {t.bits - 1}, {y}).to({_signed_of(t)}, bitcast=True)"
        return f"({x}.to({_signed_of(t)}, bitcast=True) >> {amount}).to({storage_dtype(t)}, bitcast=True)"
    return rule


def lower_sign(call: ElementwiseCall) -> str:
    x, t = _p(call.operands[0]), call.result_type
    if _is_float(t):
        return f"tl.where({x} > 0, 1.0, tl.where({x} < 0, -1.0, {x}))"
    if t.kind == "unsigned" or t.is_pred:
        return f"({x} != 0).to({storage_dtype(t)})"
    return f"tl.where({x} > 0, {x} * 0 + 1, tl.where({x} < 0, {x} * 0 - 1, {x} * 0))"


def lower_sqrt(call: ElementwiseCall) -> str:
    # sqrt_rn only takes fp32; fp64 sqrt lowers to the exact sqrt.rn.f64 anyway.
    if call.operand_types[0].name == "f64":
        return f"tl.sqrt({_float_operand(call)})"
    return f"tl.math.sqrt_rn({_float_operand(call)})"


def lower_simple_float(template: str) -> Rule:
    def rule(call: ElementwiseCall) -> str:
        return template.format(x=_float_operand(call))
    return rule


def lower_maximum(call: ElementwiseCall) -> str:
    return _minmax(">=", call.operands[0], call.operands[1], call.result_type)


def lower_minimum(call: ElementwiseCall) -> str:
    return _minmax("<=", call.operands[0], call.operands[1], call.result_type)


def lower_atan2(call: ElementwiseCall) -> str:
    if not _is_float(call.result_type):
        raise call.unsupported("atan2 on non-floats")
    return f"xla_math.atan2({_p(call.operands[0])}, {_p(call.operands[1])})"


ELEMENTWISE_RULES: dict[str, Rule] = {
    "abs": lower_abs,
    "add": lower_arith("+"),
    "and": lower_bitwise("&"),
    "atan2": lower_atan2,
    "bitcast-convert": lower_bitcast_convert,
    "cbrt": lower_unary_math("cbrt"),
    "ceil": lower_simple_float("tl.math.ceil({x})"),
    "clamp": lower_clamp,
    "compare": lower_compare,
    "convert": lower_convert,
    "cosine": lower_unary_math("cos"),
    "count-leading-zeros": lower_count_leading_zeros,
    "divide": lower_divide,
    "erf": lower_unary_math("erf"),
    "exponential": lower_unary_math("exp"),
    "exponential-minus-one": lower_unary_math("expm1"),
    "floor": lower_simple_float("tl.math.floor({x})"),
    "is-finite": lower_is_finite,
    "log": lower_unary_math("log"),
    "log-plus-one": lower_unary_math("log1p"),
    "logistic": lower_logistic,
    "maximum": lower_maximum,
    "minimum": lower_minimum,
    "multiply": lower_arith("*"),
    "negate": lower_negate,
    "not": lower_not,
    "or": lower_bitwise("|"),
    "popcnt": lower_popcnt,
    "power": lower_power,
    "reduce-precision": lower_reduce_precision,
    "remainder": lower_remainder,
    "round-nearest-afz": lower_simple_float("xla_math.round_nearest_afz({x})"),
    "round-nearest-even": lower_simple_float("xla_math.round_nearest_even({x})"),
    "rsqrt": lower_rsqrt,
    "select": lower_select,
    "shift-left": lower_shift("left"),
    "shift-right-arithmetic": lower_shift("arithmetic"),
    "shift-right-logical": lower_shift("logical"),
    "sign": lower_sign,
    "sine": lower_unary_math("sin"),
    "sqrt": lower_sqrt,
    "subtract": lower_arith("-"),
    "tan": lower_unary_math("tan"),
    "tanh": lower_unary_math("tanh"),
    "xor": lower_bitwise("^"),
}


def render_elementwise(opcode: str, operands: Sequence[str], operand_types: Sequence[ElementType],
                       result_type: ElementType, attributes: Mapping[str, object] | None = None,
                       splats: Sequence[object] = ()) -> str:
    """The expression computing ``opcode`` in register representation, rounded as XLA rounds
    (``splats``: per operand, its value where it is one constant everywhere, else None).

    >>> from fusion.ir.element_types import ELEMENT_TYPES as T
    >>> render_elementwise("maximum", ("a", "b"), (T["f32"],) * 2, T["f32"])
    'tl.where((a) != (a), (a), tl.where((a) > (b), (a), tl.where((a) == (b), tl.where(xla_math.signbit((b)), (a), (b)), (b))))'
    """
    rule = ELEMENTWISE_RULES.get(opcode)
    if rule is None:
        raise UnsupportedOpError(f"no elementwise lowering for opcode {opcode!r}", where=opcode)
    for t in (*operand_types, result_type):
        storage_dtype(t)
    call = ElementwiseCall(opcode, tuple(operands), tuple(operand_types), result_type,
                           dict(attributes or {}), tuple(splats))
    expr = rule(call)
    if result_type.is_pred:
        # Triton 3.9's interpreter labels a comparison's result with the operands' dtype, so a
        # rank-0 one broadcast to a block (``and(compare(c, c), p)``) becomes floats and the
        # next ``&`` fails; a select of constants relabels it int1 (free on a GPU).
        expr = f"tl.where({expr}, True, False)"
    if result_type.is_integer and result_type.bits < 8:
        expr = wrap_sub_byte(expr, result_type)
    return render_round(expr, result_type)
