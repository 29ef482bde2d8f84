"""The arithmetic of complex values on their parts: one expansion per op, as XLA's
``ElementalIrEmitter`` computes it (``EmitComplex*``), for ``complex_expansion``.

Each rule ``rule(b, instr, args)`` takes the builder of the expanded computation, the
instruction and its operands as ``Pair``s of part names, and returns the result's ``Pair``
(a real name for ``abs``).  ``b`` adds real instructions (``binary``, ``unary``,
``select``, ``scalar_like``, ``add``).

* ``multiply``: ``(ac - bd, ad + bc)``; ``divide``: Smith's algorithm, then C99's results
  for zero and infinite parts; ``abs``: ``|x|`` scaled by the larger part (no overflow);
  ``sign``: ``x / |x|``, 0 at 0; ``atan2(y, x)``: ``-i log((x + iy) / sqrt(x^2 + y^2))``;
* ``exponential``: ``e^a (cos b, sin b)``; ``exponential-minus-one``: ``(expm1(a) cos b -
  2 sin^2(b/2), e^a sin b)``; ``log``: ``(log |x|, atan2(b, a))``; ``log-plus-one``:
  ``(log1p(a^2 + 2a + b^2) / 2, atan2(b, a + 1))``;
* ``sqrt``: the principal root; ``rsqrt``: ``|x|^(-1/2) e^(-i arg(x) / 2)``; ``power``:
  ``|x|^c e^(-d arg x) e^(i (c arg x + d log |x|))``, ``0^y`` 0 for ``re(y) > 0`` and 1 for
  ``y = 0``;
* ``sine``, ``cosine``: ``sin a cosh b + i cos a sinh b`` (``cos a cosh b - i sin a sinh b``),
  ``sinh`` from ``expm1`` so that a small ``b`` keeps its digits;
  ``tanh``: ``(e^2a - e^-2a + 2i sin 2b) / (e^2a + e^-2a + 2 cos 2b)`` with ``expm1``,
  ``+-1`` where ``a`` overflows it; ``tan(x) = -i tanh(ix)``.

>>> sorted(COMPLEX_MATH)[:4]
['abs', 'atan2', 'cosine', 'divide']
"""
from __future__ import annotations

from dataclasses import dataclass

from fusion.ir.attributes import Literal
from fusion.ir.hlo_module import HloInstruction
from fusion.ir.shape import ArrayShape


@dataclass(frozen=True)
class Pair:
    """The names of a complex value's real and imaginary parts."""

    re: str
    im: str



def _multiply(b, instr, args):
    x, y = args
    n = instr.name
    re = b.binary("subtract", b.binary("multiply", x.re, y.re, n + ".rr"),
                  b.binary("multiply", x.im, y.im, n + ".ii"), n + ".re")
    im = b.binary("add", b.binary("multiply", x.re, y.im, n + ".ri"),
                  b.binary("multiply", x.im, y.re, n + ".ir"), n + ".im")
    return Pair(re, im)


def _signbit(b, v: str, hint: str) -> str:
    """The sign bit of a float (true for -0 and -NaN too), through its integer bits."""
    shape = b.shape(v)
    int_type = {"f32": "s32", "f64": "s64"}[shape.dtype]
    bits = b.add(hint + ".bits", "bitcast-convert", shape.with_dtype(int_type), (v,))
    zero = b.add(hint + ".z", "constant", ArrayShape(int_type, ()), (), (("literal", Literal((), (0,))),))
    if shape.dims:
        zero = b.add(hint + ".zb", "broadcast", shape.with_dtype(int_type), (zero,), (("dimensions", ()),))
    return b.binary("compare", bits, zero, hint, (("direction", "LT"),))


def _copysign(b, magnitude: str, sign: str, hint: str) -> str:
    """``copysign`` of a non-negative ``magnitude``."""
    negative = b.unary("negate", magnitude, hint + ".neg")
    return b.select(_signbit(b, sign, hint + ".sign"), negative, magnitude, hint)


def _divide(b, instr, args):
    """XLA's complex division: Smith's algorithm (divide by the larger part of the divisor,
    no overflow), then, where it gives NaN in both parts, C99's zero-divisor, infinite
    dividend and infinite divisor results (``ElementalIrEmitter::EmitComplexDivide``)."""
    x, y = args
    n = instr.name

    def op(opcode: str, lhs: str, rhs: str, hint: str, attrs: tuple = ()) -> str:
        return b.binary(opcode, lhs, rhs, f"{n}.{hint}", attrs)

    def cmp(lhs: str, rhs: str, direction: str, hint: str) -> str:
        return op("compare", lhs, rhs, hint, (("direction", direction),))

    absr, absi = b.unary("abs", y.re, n + ".absr"), b.unary("abs", y.im, n + ".absi")
    narrow = cmp(absr, absi, "LT", "narrow")  # |yr| < |yi|: divide by yi first
    r1 = op("divide", y.im, y.re, "r1")
    d1 = op("add", y.re, op("multiply", y.im, r1, "t1"), "d1")
    re1 = op("divide", op("add", x.re, op("multiply", x.im, r1, "t2"), "t3"), d1, "re1")
    im1 = op("divide", op("subtract", x.im, op("multiply", x.re, r1, "t4"), "t5"), d1, "im1")
    r2 = op("divide", y.re, y.im, "r2")
    d2 = op("add", y.im, op("multiply", y.re, r2, "t6"), "d2")
    re2 = op("divide", op("add", op("multiply", x.re, r2, "t7"), x.im, "t8"), d2, "re2")
    im2 = op("divide", op("subtract", op("multiply", x.im, r2, "t9"), x.re, "t10"), d2, "im2")
    re, im = b.select(narrow, re2, re1, n + ".smr"), b.select(narrow, im2, im1, n + ".smi")
    zero, one = b.scalar_like(0.0, re, n + ".zero"), b.scalar_like(1.0, re, n + ".one")
    inf = b.scalar_like(float("inf"), re, n + ".inf")

    def isnan(v: str, hint: str) -> str:
        return cmp(v, v, "NE", hint)

    def both(opcode: str, p: str, q: str, hint: str) -> str:
        return b.add(f"{n}.{hint}", opcode, b.shape(p), (p, q))

    # Case 1: a zero divisor (and a dividend not NaN in both parts): copysign(inf, yr) * x.
    zero_divisor = both("and", both("and", cmp(absr, zero, "EQ", "zr"), cmp(absi, zero, "EQ", "zi"), "z"),
                        both("or", cmp(x.re, x.re, "EQ", "xrn"), cmp(x.im, x.im, "EQ", "xin"), "xn"),
                        "zero_divisor")
    signed_inf = _copysign(b, inf, y.re, n + ".sinf")
    case1 = (op("multiply", signed_inf, x.re, "c1r"), op("multiply", signed_inf, x.im, "c1i"))
    # Case 2: an infinite dividend, a finite divisor.
    axr, axi = b.unary("abs", x.re, n + ".axr"), b.unary("abs", x.im, n + ".axi")
    xr_inf, xi_inf = cmp(axr, inf, "EQ", "xrinf"), cmp(axi, inf, "EQ", "xiinf")
    y_finite = both("and", cmp(absr, inf, "LT", "yrf"), cmp(absi, inf, "LT", "yif"), "yf")
    inf_dividend = both("and", both("or", xr_inf, xi_inf, "xinf"), y_finite, "inf_dividend")
    sr = _copysign(b, b.select(xr_inf, one, zero, n + ".xr1"), x.re, n + ".sxr")
    si = _copysign(b, b.select(xi_inf, one, zero, n + ".xi1"), x.im, n + ".sxi")
    case2 = (op("multiply", inf, op("add", op("multiply", sr, y.re, "u1"), op("multiply", si, y.im, "u2"), "u3"), "c2r"),
             op("multiply", inf, op("subtract", op("multiply", si, y.re, "u4"), op("multiply", sr, y.im, "u5"), "u6"), "c2i"))
    # Case 3: a finite dividend, an infinite divisor.
    yr_inf, yi_inf = cmp(absr, inf, "EQ", "yrinf"), cmp(absi, inf, "EQ", "yiinf")
    x_finite = both("and", cmp(axr, inf, "LT", "xrf"), cmp(axi, inf, "LT", "xif"), "xf")
    inf_divisor = both("and", both("or", yr_inf, yi_inf, "yinf"), x_finite, "inf_divisor")
    tr = _copysign(b, b.select(yr_inf, one, zero, n + ".yr1"), y.re, n + ".syr")
    ti = _copysign(b, b.select(yi_inf, one, zero, n + ".yi1"), y.im, n + ".syi")
    case3 = (op("multiply", zero, op("add", op("multiply", x.re, tr, "v1"), op("multiply", x.im, ti, "v2"), "v3"), "c3r"),
             op("multiply", zero, op("subtract", op("multiply", x.im, tr, "v4"), op("multiply", x.re, ti, "v5"), "v6"), "c3i"))
    nan = both("and", isnan(re, "nanr"), isnan(im, "nani"), "nan")
    parts = []
    for k, smith in enumerate((re, im)):
        fixed = b.select(inf_divisor, case3[k], smith, f"{n}.f3{k}")
        fixed = b.select(inf_dividend, case2[k], fixed, f"{n}.f2{k}")
        fixed = b.select(zero_divisor, case1[k], fixed, f"{n}.f1{k}")
        parts.append(b.select(nan, fixed, smith, f"{n}.{('re', 'im')[k]}"))
    return Pair(*parts)


def _abs(b, instr, args):
    """``max * sqrt(1 + (min/max)^2)``; 0 when both parts are 0, inf when one is inf."""
    (x,) = args
    n = instr.name
    ar, ai = b.unary("abs", x.re, n + ".ar"), b.unary("abs", x.im, n + ".ai")
    big, small = b.binary("maximum", ar, ai, n + ".max"), b.binary("minimum", ar, ai, n + ".min")
    ratio = b.binary("divide", small, big, n + ".ratio")
    one = b.scalar_like(1.0, big, n + ".one")
    squared = b.binary("multiply", ratio, ratio, n + ".sq")
    root = b.unary("sqrt", b.binary("add", one, squared, n + ".sum"), n + ".sqrt")
    scaled = b.binary("multiply", big, root, n + ".scaled")
    zero = b.scalar_like(0.0, big, n + ".zero")
    inf = b.scalar_like(float("inf"), big, n + ".inf")
    is_zero = b.binary("compare", big, zero, n + ".iszero", (("direction", "EQ"),))
    is_inf = b.binary("compare", big, inf, n + ".isinf", (("direction", "EQ"),))
    return b.select(is_inf, inf, b.select(is_zero, zero, scaled, n + ".nz"), n)


def _exponential(b, instr, args):
    (x,) = args
    n = instr.name
    e = b.unary("exponential", x.re, n + ".exp")
    sin = b.unary("sine", x.im, n + ".sin")
    # A zero sine keeps the imaginary part zero (exp(inf + 0i) is inf + 0i, not inf + NaN i).
    zero = b.scalar_like(0.0, sin, n + ".zero")
    sin_zero = b.binary("compare", sin, zero, n + ".sinz", (("direction", "EQ"),))
    return Pair(b.binary("multiply", e, b.unary("cosine", x.im, n + ".cos"), n + ".re"),
                b.select(sin_zero, sin, b.binary("multiply", e, sin, n + ".esin"), n + ".im"))


def _sqrt(b, instr, args):
    """Principal root: ``t = sqrt((|x| + |re|) / 2)``; re >= 0: ``(t, im / 2t)``, else
    ``(|im| / 2t, copysign(t, im))``; 0 at 0."""
    (x,) = args
    n = instr.name
    mag = _abs(b, _renamed(instr, n + ".mag"), [x])
    half = b.scalar_like(0.5, mag, n + ".half")
    total = b.binary("add", mag, b.unary("abs", x.re, n + ".ar"), n + ".s")
    t = b.unary("sqrt", b.binary("multiply", total, half, n + ".h"), n + ".t")
    two_t = b.binary("add", t, t, n + ".2t")
    zero = b.scalar_like(0.0, t, n + ".zero")
    is_zero = b.binary("compare", t, zero, n + ".tz", (("direction", "EQ"),))
    positive = b.binary("compare", x.re, zero, n + ".pos", (("direction", "GE"),))
    q = b.select(is_zero, zero, b.binary("divide", x.im, two_t, n + ".q0"), n + ".q")
    aq = b.unary("abs", q, n + ".aq")
    signed_t = b.select(_signbit(b, x.im, n + ".negim"), b.unary("negate", t, n + ".nt"), t,
                        n + ".st")
    re = b.select(positive, t, aq, n + ".re0")
    im = b.select(positive, q, signed_t, n + ".im0")
    # Infinite parts as XLA: sqrt(x + inf i) = inf + inf i, sqrt(-inf + y i) = 0 + inf i.
    inf = b.scalar_like(float("inf"), t, n + ".inf")
    b_inf = b.binary("compare", b.unary("abs", x.im, n + ".ai"), inf, n + ".binf", (("direction", "EQ"),))
    a_pinf = b.binary("compare", x.re, inf, n + ".apinf", (("direction", "EQ"),))
    a_ninf = b.binary("compare", x.re, b.unary("negate", inf, n + ".ninf"), n + ".aninf",
                      (("direction", "EQ"),))
    inf_re = b.add(n + ".infre", "or", b.shape(b_inf), (b_inf, a_pinf))
    inf_im = b.add(n + ".infim", "or", b.shape(b_inf), (b_inf, a_ninf))
    re = b.select(inf_re, inf, b.select(a_ninf, zero, re, n + ".re1"), n + ".re")
    im = b.select(inf_im, _copysign(b, inf, x.im, n + ".sinf"), im, n + ".im")
    return Pair(re, im)


def _renamed(instr: HloInstruction, name: str) -> HloInstruction:
    return HloInstruction(name, instr.opcode, instr.shape, instr.operands, instr.attributes,
                          instr.location)


def _ops(b, n: str):
    """Short builders for one rule: ``op(opcode, x, y, hint)``, ``fn(opcode, x, hint)``."""
    def op(opcode: str, x: str, y: str, hint: str, attrs: tuple = ()) -> str:
        return b.binary(opcode, x, y, f"{n}.{hint}", attrs)

    def fn(opcode: str, x: str, hint: str) -> str:
        return b.unary(opcode, x, f"{n}.{hint}")
    return op, fn


def _is(b, x: str, y: str, direction: str, hint: str) -> str:
    return b.binary("compare", x, y, hint, (("direction", direction),))


def _atan2(b, instr, args):
    """XLA's ``atan2(y, x) = -i log((x + iy) / sqrt(x^2 + y^2))``."""
    y, x = args
    n = instr.name
    part = lambda hint: _renamed(instr, f"{n}.{hint}")  # noqa: E731
    xx, yy = _multiply(b, part("xx"), [x, x]), _multiply(b, part("yy"), [y, y])
    total = Pair(b.binary("add", xx.re, yy.re, n + ".sr"), b.binary("add", xx.im, yy.im, n + ".si"))
    x_iy = Pair(b.binary("subtract", x.re, y.im, n + ".xr"), b.binary("add", x.im, y.re, n + ".xi"))
    ratio = _divide(b, part("q"), [x_iy, _sqrt(b, part("root"), [total])])
    logarithm = _log(b, part("log"), [ratio])
    return Pair(logarithm.im, b.unary("negate", logarithm.re, n + ".im"))


def _sine(b, instr, args):
    (x,) = args
    n = instr.name
    op, fn = _ops(b, n)
    exp_b = fn("exponential", x.im, "eb")
    half = b.scalar_like(0.5, exp_b, n + ".half")
    cosh = op("add", op("multiply", half, exp_b, "he"), op("divide", half, exp_b, "hi"), "ch")
    # sinh from expm1: e^b - e^-b cancels for small b (XLA's form loses the digits there).
    sinh = op("multiply", half, op("subtract", fn("exponential-minus-one", x.im, "em"),
                                   fn("exponential-minus-one", fn("negate", x.im, "nb"), "enm"),
                                   "d"), "sh")
    cos_a, sin_a = fn("cosine", x.re, "cos"), fn("sine", x.re, "sin")
    if instr.opcode == "cosine":
        return Pair(op("multiply", cos_a, cosh, "re"),
                    fn("negate", op("multiply", sin_a, sinh, "ss"), "im"))
    return Pair(op("multiply", sin_a, cosh, "re"), op("multiply", cos_a, sinh, "im"))


def _tanh_parts(b, n: str, a: str, c: str) -> Pair:
    """XLA's complex tanh of ``a + ci``."""
    op, fn = _ops(b, n)
    two_a = op("add", a, a, "2a")
    exp_2a_m1 = fn("exponential-minus-one", two_a, "e2a")
    exp_neg_2a_m1 = fn("exponential-minus-one", fn("negate", two_a, "n2a"), "en2a")
    real_numerator = op("subtract", exp_2a_m1, exp_neg_2a_m1, "rnum")
    cos_b, sin_b = fn("cosine", c, "cos"), fn("sine", c, "sin")
    four = b.scalar_like(4.0, a, n + ".four")
    two_cos_2b_p2 = op("multiply", op("multiply", cos_b, cos_b, "cos2"), four, "c2b")
    imag_numerator = op("multiply", four, op("multiply", cos_b, sin_b, "cs"), "inum")
    a_sqr = op("multiply", a, a, "a2")
    use_approx = _is(b, a_sqr, b.scalar_like(1e-8, a, n + ".cut"), "LT", n + ".small")
    exp_sum_m2 = b.select(use_approx, a_sqr, op("add", exp_2a_m1, exp_neg_2a_m1, "esum"),
                          n + ".es")
    denominator = op("add", exp_sum_m2, two_cos_2b_p2, "den")
    inf = b.scalar_like(float("inf"), a, n + ".inf")
    limit = _copysign(b, b.scalar_like(1.0, a, n + ".one"), a, n + ".limit")
    real = b.select(_is(b, exp_sum_m2, inf, "EQ", n + ".big"), limit,
                    op("divide", real_numerator, denominator, "rq"), n + ".re")
    return Pair(real, op("divide", imag_numerator, denominator, "im"))


def _tanh(b, instr, args):
    (x,) = args
    return _tanh_parts(b, instr.name, x.re, x.im)


def _tan(b, instr, args):
    """``tan(x) = -i tanh(ix)``: ``tanh(-b + ai) = (p, q)`` gives ``(q, -p)``."""
    (x,) = args
    n = instr.name
    t = _tanh_parts(b, n + ".tanh", b.unary("negate", x.im, n + ".nb"), x.re)
    return Pair(t.im, b.unary("negate", t.re, n + ".im"))


def _exponential_minus_one(b, instr, args):
    (x,) = args
    n = instr.name
    op, fn = _ops(b, n)
    half_b = op("multiply", x.im, b.scalar_like(0.5, x.im, n + ".half"), "hb")
    sin_half = fn("sine", half_b, "sh")
    cos_m1 = op("multiply", b.scalar_like(-2.0, x.im, n + ".m2"),
                op("multiply", sin_half, sin_half, "sh2"), "cm1")  # cos b - 1, exactly near 0
    re = op("add", op("multiply", fn("exponential-minus-one", x.re, "em1"),
                      fn("cosine", x.im, "cos"), "ec"), cos_m1, "re")
    # A zero sine keeps the imaginary part zero, as exponential's (inf * 0 would be NaN).
    sin = fn("sine", x.im, "sin")
    zero = _is(b, sin, b.scalar_like(0.0, sin, n + ".zero"), "EQ", n + ".sinz")
    return Pair(re, b.select(zero, sin, op("multiply", fn("exponential", x.re, "e"), sin, "es"),
                             n + ".im"))


def _log(b, instr, args):
    (x,) = args
    n = instr.name
    magnitude = _abs(b, _renamed(instr, n + ".abs"), [x])
    return Pair(b.unary("log", magnitude, n + ".re"), b.binary("atan2", x.im, x.re, n + ".im"))


def _log_plus_one(b, instr, args):
    (x,) = args
    n = instr.name
    op, fn = _ops(b, n)
    two = b.scalar_like(2.0, x.re, n + ".two")
    total = op("add", op("add", op("multiply", x.re, x.re, "aa"), op("multiply", two, x.re, "2a"),
                         "s1"), op("multiply", x.im, x.im, "bb"), "s")
    re = op("multiply", b.scalar_like(0.5, x.re, n + ".half"), fn("log-plus-one", total, "l"), "re")
    shifted = Pair(op("add", x.re, b.scalar_like(1.0, x.re, n + ".one"), "a1"), x.im)
    # Where the sum overflows (an infinite part: inf - inf), log |1 + x| directly.
    wide = fn("log", _abs(b, _renamed(instr, n + ".abs"), [shifted]), "lw")
    re = b.select(_is(b, total, total, "EQ", n + ".ok"), re, wide, n + ".re1")
    return Pair(re, op("atan2", x.im, shifted.re, "im"))


def _power_parts(b, n: str, x: Pair, y: Pair) -> Pair:
    """XLA's ``EmitComplexPower``."""
    op, fn = _ops(b, n)
    a, bb, c, d = x.re, x.im, y.re, y.im
    zero, one = b.scalar_like(0.0, a, n + ".zero"), b.scalar_like(1.0, a, n + ".one")
    half = b.scalar_like(0.5, a, n + ".half")
    norm = op("add", op("multiply", a, a, "aa"), op("multiply", bb, bb, "bb"), "norm")
    angle = op("atan2", bb, a, "arg")
    coefficient = op("multiply", op("power", norm, op("multiply", half, c, "hc"), "nc"),
                     fn("exponential", op("multiply", fn("negate", d, "nd"), angle, "da"), "eda"),
                     "coef")
    q = op("add", op("multiply", c, angle, "ca"),
           op("multiply", op("multiply", half, d, "hd"), fn("log", norm, "ln"), "dl"), "q")
    both = lambda p, q, hint: b.add(f"{n}.{hint}", "and", b.shape(p), (p, q))  # noqa: E731
    at_zero = both(_is(b, norm, zero, "EQ", n + ".nz"),
                   both(_is(b, d, zero, "EQ", n + ".dz"), _is(b, zero, c, "LE", n + ".cp"), "dc"),
                   "z")
    # 0^y: the angle's term is NaN there (0 * log 0), so the parts are chosen, not scaled.
    zero_to = b.select(_is(b, zero, c, "EQ", n + ".c0"), one, zero, n + ".zt")
    return Pair(b.select(at_zero, zero_to, op("multiply", coefficient, fn("cosine", q, "cos"),
                                               "kc"), n + ".re"),
                b.select(at_zero, zero, op("multiply", coefficient, fn("sine", q, "sin"), "ks"),
                         n + ".im"))


def _power(b, instr, args):
    x, y = args
    return _power_parts(b, instr.name, x, y)


def _rsqrt(b, instr, args):
    """``|x|^(-1/2) (cos(-arg(x) / 2), sin(-arg(x) / 2))``."""
    (x,) = args
    n = instr.name
    op, fn = _ops(b, n)
    scale = fn("rsqrt", _abs(b, _renamed(instr, n + ".abs"), [x]), "r")
    half_angle = op("multiply", op("atan2", x.im, x.re, "arg"),
                    b.scalar_like(-0.5, x.re, n + ".mh"), "ha")
    re = op("multiply", scale, fn("cosine", half_angle, "cos"), "re")
    im = op("multiply", scale, fn("sine", half_angle, "sin"), "im")
    # At 0 (either sign): XLA's inf + NaN i.
    at_zero = _is(b, scale, b.scalar_like(float("inf"), scale, n + ".inf"), "EQ", n + ".z")
    nan = b.scalar_like(float("nan"), scale, n + ".nan")
    return Pair(b.select(at_zero, scale, re, n + ".re1"), b.select(at_zero, nan, im, n + ".im1"))


def _sign(b, instr, args):
    """``x / |x|``; 0 at 0 (and NaN where ``x`` is)."""
    (x,) = args
    n = instr.name
    magnitude = _abs(b, _renamed(instr, n + ".abs"), [x])
    zero = b.scalar_like(0.0, magnitude, n + ".zero")
    is_zero = _is(b, magnitude, zero, "EQ", n + ".iz")
    return Pair(*(b.select(is_zero, zero, b.binary("divide", part, magnitude, f"{n}.{k}q"),
                           f"{n}.{k}") for k, part in (("re", x.re), ("im", x.im))))


#: The arithmetic ops on complex values -> their expansion into parts.
COMPLEX_MATH = {
    "abs": _abs,
    "atan2": _atan2,
    "cosine": _sine,
    "divide": _divide,
    "exponential": _exponential,
    "exponential-minus-one": _exponential_minus_one,
    "log": _log,
    "log-plus-one": _log_plus_one,
    "multiply": _multiply,
    "power": _power,
    "rsqrt": _rsqrt,
    "sign": _sign,
    "sine": _sine,
    "sqrt": _sqrt,
    "tan": _tan,
    "tanh": _tanh,
}

__all__ = ["COMPLEX_MATH", "Pair"]
