"""Tiny HLO modules for ``test_op_coverage``: one per evaluator opcode, and one per coverage limit.

:func:`opcode_case` gives, for every opcode of ``fusion.evaluator.registry.OP_RULES``, a module
using it with realistic attributes (elementwise ones generated from their family, the rest
written out).  :data:`LIMIT_CASES` hold ops the Triton path covers in general but not with these
attributes, types or surroundings: ``name -> (text, name of the uncovered instruction, a
fragment of the reason)``.
"""
from __future__ import annotations

UNARY_FLOAT = ("abs", "cbrt", "ceil", "copy", "cosine", "erf", "exponential",
               "exponential-minus-one", "floor", "log", "log-plus-one", "logistic", "negate",
               "round-nearest-afz", "round-nearest-even", "rsqrt", "sign", "sine", "sqrt", "tan",
               "tanh")
BINARY_FLOAT = ("add", "atan2", "divide", "maximum", "minimum", "multiply", "power", "remainder",
                "subtract")
BINARY_INT = ("and", "or", "shift-left", "shift-right-arithmetic", "shift-right-logical", "xor")
UNARY_INT = ("count-leading-zeros", "not", "popcnt")


def unary(op: str, dtype: str = "f32", out: str | None = None, attrs: str = "") -> str:
    return (f"HloModule m_{op}\nENTRY e {{\n  x = {dtype}[2,3] parameter(0)\n"
            f"  ROOT r = {out or dtype}[2,3] {op}(x){attrs}\n}}\n")


def binary(op: str, dtype: str = "f32") -> str:
    return (f"HloModule m_{op}\nENTRY e {{\n  x = {dtype}[2,3] parameter(0)\n"
            f"  y = {dtype}[2,3] parameter(1)\n  ROOT r = {dtype}[2,3] {op}(x, y)\n}}\n")


ADD = "add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] add(a, b)\n}\n"
MAX = "max {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT s = f32[] maximum(a, b)\n}\n"
#: A reducer calling another computation: a map of it cannot be inlined as array ops.
CALL_ADD = ("call_add {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
            "  ROOT c = f32[] call(a, b), to_apply=add\n}\n")
LT = ("lt {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
      "  ROOT c = pred[] compare(a, b), direction=LT\n}\n")


def _collective(body: str, reducer: str = "") -> str:
    return f"HloModule m\n{reducer}ENTRY e {{\n  x = f32[2,3] parameter(0)\n{body}\n}}\n"


#: The collectives, on the one device a module runs on (``replica_groups={}`` or ``{{0}}``).
COLLECTIVES: dict[str, str] = {
    "all-gather": _collective("  ROOT r = f32[2,3] all-gather(x), replica_groups={{0}}, "
                              "dimensions={1}"),
    "all-gather-done": _collective("  s = (f32[2,3], f32[2,3]) all-gather-start(x), "
                                   "replica_groups={}, dimensions={0}\n"
                                   "  ROOT r = f32[2,3] all-gather-done(s)"),
    "all-reduce": _collective("  ROOT r = f32[2,3] all-reduce(x), channel_id=1, "
                              "replica_groups={{0}}, use_global_device_ids=true, to_apply=add",
                              ADD),
    "all-reduce-done": _collective("  s = f32[2,3] all-reduce-start(x), replica_groups={}, "
                                   "to_apply=add\n  ROOT r = f32[2,3] all-reduce-done(s)", ADD),
    "all-to-all": _collective("  ROOT r = f32[2,3] all-to-all(x), replica_groups={{0}}, "
                              "dimensions={0}"),
    "collective-broadcast": _collective("  ROOT r = f32[2,3] collective-broadcast(x), "
                                        "replica_groups={{0}}"),
    "collective-permute": _collective("  ROOT r = f32[2,3] collective-permute(x), "
                                      "source_target_pairs={{0,0}}"),
    "collective-permute-done": _collective(
        "  s = (f32[2,3], f32[2,3], u32[], u32[]) collective-permute-start(x), "
        "source_target_pairs={}\n  ROOT r = f32[2,3] collective-permute-done(s)"),
    "ragged-all-to-all": "HloModule m\nENTRY e {\n  x = f32[4,3] parameter(0)\n"
                         "  o = f32[5,3] parameter(1)\n  io = s32[2] constant({3, 1})\n"
                         "  ss = s32[2] constant({1, 2})\n  oo = s32[2] constant({4, 0})\n"
                         "  rs = s32[2] parameter(2)\n  ROOT r = f32[5,3] ragged-all-to-all(x, o, "
                         "io, ss, oo, rs), replica_groups={{0}}\n}\n",
    "reduce-scatter": _collective("  ROOT r = f32[2,3] reduce-scatter(x), replica_groups={}, "
                                  "dimensions={1}, to_apply=add", ADD),
    "partition-id": _collective("  p = u32[] partition-id()\n  c = f32[] convert(p)\n"
                                "  b = f32[2,3] broadcast(c), dimensions={}\n"
                                "  ROOT r = f32[2,3] add(x, b)"),
    "replica-id": _collective("  p = u32[] replica-id()\n  c = f32[] convert(p)\n"
                              "  b = f32[2,3] broadcast(c), dimensions={}\n"
                              "  ROOT r = f32[2,3] add(x, b)"),
}
COLLECTIVES["all-gather-start"] = COLLECTIVES["all-gather-done"]
COLLECTIVES["all-reduce-start"] = COLLECTIVES["all-reduce-done"]
COLLECTIVES["collective-permute-start"] = COLLECTIVES["collective-permute-done"]

WRITTEN: dict[str, str] = {
    **COLLECTIVES,
    # A pair read whole (its start's operands taken): a pair only itself reads is a call.
    "async-done": "HloModule m\ncallee {\n  a = f32[2,3] parameter(0)\n  ROOT n = f32[2,3] negate(a)\n}\n"
                  "ENTRY e {\n  x = f32[2,3] parameter(0)\n"
                  "  s = ((f32[2,3]), f32[2,3], s32[]) async-start(x), calls=callee\n"
                  "  u = ((f32[2,3]), f32[2,3], s32[]) async-update(s)\n"
                  "  a = (f32[2,3]) get-tuple-element(s), index=0\n"
                  "  d = f32[2,3] async-done(u)\n"
                  "  ROOT r = ((f32[2,3]), f32[2,3]) tuple(a, d)\n}\n",
    "bitcast": "HloModule m\nENTRY e {\n  x = f32[2,3] parameter(0)\n  ROOT r = f32[6] bitcast(x)\n}\n",
    "bitcast-convert": unary("bitcast-convert", "f32", "s32"),
    "broadcast": "HloModule m\nENTRY e {\n  x = f32[3] parameter(0)\n"
                 "  ROOT r = f32[2,3] broadcast(x), dimensions={1}\n}\n",
    "call": "HloModule m\ncallee {\n  a = f32[2,3] parameter(0)\n  ROOT n = f32[2,3] negate(a)\n}\n"
            "ENTRY e {\n  x = f32[2,3] parameter(0)\n  ROOT r = f32[2,3] call(x), to_apply=callee\n}\n",
    # Full-shape bounds: with rank-0 bounds the kernel fails in the Triton interpreter (the
    # NaN-aware maximum of a rank-0 value, a known value_rules/elementwise bug).
    # The library calls (issue 15): a positive-definite matrix a a^T for the Cholesky factor.
    "cholesky": "HloModule m\nENTRY e {\n  a = f32[3,3] parameter(0)\n"
                "  t = f32[3,3] transpose(a), dimensions={1,0}\n"
                "  m = f32[3,3] dot(a, t), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n"
                "  ROOT r = f32[3,3] cholesky(m), lower=true\n}\n",
    "clamp": "HloModule m\nENTRY e {\n  lo = f32[2,3] parameter(0)\n  x = f32[2,3] parameter(1)\n"
             "  hi = f32[2,3] parameter(2)\n  ROOT r = f32[2,3] clamp(lo, x, hi)\n}\n",
    "batch-norm-grad": "HloModule m\nENTRY e {\n  x = f32[4,3] parameter(0)\n  s = f32[3] parameter(1)\n"
                       "  m = f32[3] parameter(2)\n  v = f32[3] parameter(3)\n  d = f32[4,3] parameter(4)\n"
                       "  ROOT r = (f32[4,3], f32[3], f32[3]) batch-norm-grad(x, s, m, v, d), "
                       "epsilon=0.5, feature_index=1\n}\n",
    "batch-norm-inference": "HloModule m\nENTRY e {\n  x = f32[4,3] parameter(0)\n  s = f32[3] parameter(1)\n"
                            "  o = f32[3] parameter(2)\n  m = f32[3] parameter(3)\n  v = f32[3] parameter(4)\n"
                            "  ROOT r = f32[4,3] batch-norm-inference(x, s, o, m, v), "
                            "epsilon=0.5, feature_index=1\n}\n",
    "batch-norm-training": "HloModule m\nENTRY e {\n  x = f32[4,3] parameter(0)\n  s = f32[3] parameter(1)\n"
                           "  o = f32[3] parameter(2)\n  ROOT r = (f32[4,3], f32[3], f32[3]) "
                           "batch-norm-training(x, s, o), epsilon=0.5, feature_index=1\n}\n",
    "compare": "HloModule m\nENTRY e {\n  x = f32[2,3] parameter(0)\n  y = f32[2,3] parameter(1)\n"
               "  ROOT r = pred[2,3] compare(x, y), direction=LT\n}\n",
    "complex": "HloModule m\nENTRY e {\n  x = f32[2,3] parameter(0)\n  y = f32[2,3] parameter(1)\n"
               "  ROOT r = c64[2,3] complex(x, y)\n}\n",
    "concatenate": "HloModule m\nENTRY e {\n  x = f32[2,3] parameter(0)\n  y = f32[2,2] parameter(1)\n"
                   "  ROOT r = f32[2,5] concatenate(x, y), dimensions={1}\n}\n",
    "conditional": "HloModule m\nt {\n  a = f32[3] parameter(0)\n  ROOT n = f32[3] negate(a)\n}\n"
                   "f {\n  a = f32[3] parameter(0)\n  ROOT n = f32[3] exponential(a)\n}\n"
                   "ENTRY e {\n  p = pred[] parameter(0)\n  x = f32[3] parameter(1)\n"
                   "  ROOT r = f32[3] conditional(p, x, x), true_computation=t, false_computation=f\n}\n",
    "constant": "HloModule m\nENTRY e {\n  x = f32[3] parameter(0)\n  c = f32[3] constant({1.5, -2, 4})\n"
                "  ROOT r = f32[3] add(x, c)\n}\n",
    "convert": unary("convert", "f32", "s32"),
    "convolution": "HloModule m\nENTRY e {\n  x = f32[2,5,3] parameter(0)\n"
                   "  w = f32[3,3,4] parameter(1)\n  ROOT r = f32[2,3,4] convolution(x, w), "
                   "window={size=3 stride=2 pad=1_1}, dim_labels=b0f_0io->b0f\n}\n",
    # LAPACK reads column-major matrices: JAX lays its operands and results out {0,1}.
    "copy-done": "HloModule m\nENTRY e {\n  x = f32[2,3] parameter(0)\n"
                 "  s = (f32[2,3]{1,0:S(5)}, f32[2,3], u32[]) copy-start(x)\n"
                 "  d = f32[2,3]{1,0:S(5)} copy-done(s)\n  ROOT r = f32[2,3] negate(d)\n}\n",
    "custom-call": "HloModule m\nENTRY e {\n  a = f32[3,3] parameter(0)\n"
                   "  ROOT r = (f32[3,3]{0,1}, s32[3], s32[]) custom-call(a), "
                   "custom_call_target=\"lapack_sgetrf_ffi\", "
                   "operand_layout_constraints={f32[3,3]{0,1}}, api_version=API_VERSION_TYPED_FFI, "
                   "backend_config={}\n}\n",
    "dot": "HloModule m\nENTRY e {\n  x = f32[2,3] parameter(0)\n  y = f32[3,4] parameter(1)\n"
           "  ROOT r = f32[2,4] dot(x, y), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n",
    "dynamic-slice": "HloModule m\nENTRY e {\n  x = f32[4,5] parameter(0)\n  i = s32[] parameter(1)\n"
                     "  j = s32[] parameter(2)\n"
                     "  ROOT r = f32[2,3] dynamic-slice(x, i, j), dynamic_slice_sizes={2,3}\n}\n",
    "dynamic-update-slice": "HloModule m\nENTRY e {\n  x = f32[4,5] parameter(0)\n"
                            "  u = f32[2,3] parameter(1)\n  i = s32[] parameter(2)\n"
                            "  j = s32[] parameter(3)\n"
                            "  ROOT r = f32[4,5] dynamic-update-slice(x, u, i, j)\n}\n",
    "fft": "HloModule m\nENTRY e {\n  x = f32[2,8] parameter(0)\n"
           "  ROOT r = c64[2,5] fft(x), fft_type=RFFT, fft_length={8}\n}\n",
    "fusion": "HloModule m\nfused {\n  a = f32[2,3] parameter(0)\n  b = f32[2,3] parameter(1)\n"
              "  m = f32[2,3] multiply(a, b)\n  ROOT s = f32[2,3] add(m, a)\n}\n"
              "ENTRY e {\n  x = f32[2,3] parameter(0)\n  y = f32[2,3] parameter(1)\n"
              "  ROOT r = f32[2,3] fusion(x, y), kind=kLoop, calls=fused\n}\n",
    "gather": "HloModule m\nENTRY e {\n  x = f32[5,3] parameter(0)\n  i = s32[4,1] parameter(1)\n"
              "  ROOT r = f32[4,3] gather(x, i), offset_dims={1}, collapsed_slice_dims={0}, "
              "start_index_map={0}, index_vector_dim=1, slice_sizes={1,3}\n}\n",
    "get-dimension-size": "HloModule m\nENTRY e {\n  x = f32[2,3] parameter(0)\n"
                          "  n = s32[] get-dimension-size(x), dimensions={1}\n"
                          "  c = f32[] convert(n)\n  b = f32[2,3] broadcast(c), dimensions={}\n"
                          "  ROOT r = f32[2,3] add(x, b)\n}\n",
    "get-tuple-element": "HloModule m\nENTRY e {\n  x = f32[3] parameter(0)\n  y = f32[2] parameter(1)\n"
                         "  t = (f32[3], f32[2]) tuple(x, y)\n"
                         "  ROOT r = f32[2] get-tuple-element(t), index=1\n}\n",
    "imag": unary("imag", "c64", "f32"),
    "iota": "HloModule m\nENTRY e {\n  x = s32[2,3] parameter(0)\n"
            "  i = s32[2,3] iota(), iota_dimension=1\n  ROOT r = s32[2,3] add(x, i)\n}\n",
    "is-finite": unary("is-finite", "f32", "pred"),
    "map": "HloModule m\n" + ADD + "ENTRY e {\n  x = f32[2,3] parameter(0)\n  y = f32[2,3] parameter(1)\n"
           "  ROOT r = f32[2,3] map(x, y), dimensions={0,1}, to_apply=add\n}\n",
    "opt-barrier": "HloModule m\nENTRY e {\n  x = f32[2,3] parameter(0)\n  e = f32[2,3] exponential(x)\n"
                   "  t = (f32[2,3], f32[2,3]) tuple(x, e)\n"
                   "  b = (f32[2,3], f32[2,3]) opt-barrier(t)\n"
                   "  u = f32[2,3] get-tuple-element(b), index=0\n  v = f32[2,3] get-tuple-element(b), index=1\n"
                   "  w = f32[2,3] exponential(u)\n  ROOT r = f32[2,3] subtract(w, v)\n}\n",
    "pad": "HloModule m\nENTRY e {\n  x = f32[2,3] parameter(0)\n  z = f32[] constant(0)\n"
           "  ROOT r = f32[4,7] pad(x, z), padding=1_1x0_2_1\n}\n",
    "ragged-dot": "HloModule m\nENTRY e {\n  a = f32[6,4] parameter(0)\n  b = f32[2,4,3] parameter(1)\n"
                  "  g = s32[2] parameter(2)\n  ROOT r = f32[6,3] ragged-dot(a, b, g), "
                  "lhs_contracting_dims={1}, rhs_contracting_dims={1}, lhs_ragged_dims={0}, "
                  "rhs_group_dims={0}\n}\n",
    "real": unary("real", "c64", "f32"),
    "reduce": "HloModule m\n" + ADD + "ENTRY e {\n  x = f32[2,3] parameter(0)\n  z = f32[] constant(0)\n"
              "  ROOT r = f32[2] reduce(x, z), dimensions={1}, to_apply=add\n}\n",
    "reduce-precision": unary("reduce-precision", attrs=", exponent_bits=5, mantissa_bits=10"),
    "reduce-window": "HloModule m\n" + MAX + "ENTRY e {\n  x = f32[4,6] parameter(0)\n"
                     "  z = f32[] constant(-inf)\n  ROOT r = f32[2,3] reduce-window(x, z), "
                     "window={size=2x2 stride=2x2}, to_apply=max\n}\n",
    "reshape": "HloModule m\nENTRY e {\n  x = f32[2,3] parameter(0)\n  ROOT r = f32[3,2] reshape(x)\n}\n",
    "reverse": "HloModule m\nENTRY e {\n  x = f32[2,3] parameter(0)\n"
               "  ROOT r = f32[2,3] reverse(x), dimensions={1}\n}\n",
    "rng": "HloModule m\nENTRY e {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
           "  ROOT r = f32[2,3] rng(a, b), distribution=rng_normal\n}\n",
    "rng-bit-generator": "HloModule m\nENTRY e {\n  s = u64[2] parameter(0)\n"
                         "  ROOT r = (u64[2], u32[2,3]) rng-bit-generator(s), "
                         "algorithm=rng_default\n}\n",
    "rng-get-and-update-state": "HloModule m\nENTRY e {\n  ROOT s = u64[2] "
                                "rng-get-and-update-state(), delta=6\n}\n",
    "scaled-dot": "HloModule m\nENTRY e {\n  a = f8e4m3fn[4,64] parameter(0)\n"
                  "  b = f8e4m3fn[8,64] parameter(1)\n  sa = f8e8m0fnu[4,2] parameter(2)\n"
                  "  sb = bf16[] parameter(3)\n  ROOT d = f32[4,8] scaled-dot(a, b, sa, sb), "
                  "lhs_contracting_dims={1}, rhs_contracting_dims={1}\n}\n",
    "scatter": "HloModule m\n" + ADD + "ENTRY e {\n  x = f32[5,2] parameter(0)\n  i = s32[3,1] parameter(1)\n"
               "  u = f32[3,2] parameter(2)\n  ROOT r = f32[5,2] scatter(x, i, u), update_window_dims={1}, "
               "inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, "
               "to_apply=add\n}\n",
    "select": "HloModule m\nENTRY e {\n  p = pred[2,3] parameter(0)\n  x = f32[2,3] parameter(1)\n"
              "  y = f32[2,3] parameter(2)\n  ROOT r = f32[2,3] select(p, x, y)\n}\n",
    "select-and-scatter": "HloModule m\nge {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
                          "  ROOT c = pred[] compare(a, b), direction=GE\n}\n" + ADD +
                          "ENTRY e {\n  x = f32[4,6] parameter(0)\n  s = f32[2,3] parameter(1)\n"
                          "  z = f32[] constant(0)\n  ROOT r = f32[4,6] select-and-scatter(x, s, z), "
                          "window={size=2x2 stride=2x2}, select=ge, scatter=add\n}\n",
    "slice": "HloModule m\nENTRY e {\n  x = f32[4,6] parameter(0)\n"
             "  ROOT r = f32[2,2] slice(x), slice={[1:3], [0:6:3]}\n}\n",
    "sort": "HloModule m\n" + LT + "ENTRY e {\n  x = f32[2,5] parameter(0)\n"
            "  ROOT r = f32[2,5] sort(x), dimensions={1}, to_apply=lt\n}\n",
    "stochastic-convert": "HloModule m\nENTRY e {\n  x = f32[2,3] parameter(0)\n"
                          "  r = u32[2,3] parameter(1)\n"
                          "  ROOT y = s32[2,3] stochastic-convert(x, r)\n}\n",
    "topk": "HloModule m\nENTRY e {\n  x = f32[2,5] parameter(0)\n"
            "  ROOT r = (f32[2,3], s32[2,3]) topk(x), k=3, largest=true\n}\n",
    "transpose": "HloModule m\nENTRY e {\n  x = f32[2,3] parameter(0)\n"
                 "  ROOT r = f32[3,2] transpose(x), dimensions={1,0}\n}\n",
    "triangular-solve": "HloModule m\nENTRY e {\n  a = f32[3,3] parameter(0)\n  b = f32[3,2] parameter(1)\n"
                        "  ROOT r = f32[3,2] triangular-solve(a, b), left_side=true, lower=true, "
                        "unit_diagonal=true, transpose_a=NO_TRANSPOSE\n}\n",
    "tuple": "HloModule m\nENTRY e {\n  x = f32[3] parameter(0)\n  n = f32[3] negate(x)\n"
             "  ROOT r = (f32[3], f32[3]) tuple(x, n)\n}\n",
    "while": "HloModule m\ncond {\n  s = (s32[], f32[3]) parameter(0)\n"
             "  i = s32[] get-tuple-element(s), index=0\n  k = s32[] constant(3)\n"
             "  ROOT c = pred[] compare(i, k), direction=LT\n}\n"
             "body {\n  s = (s32[], f32[3]) parameter(0)\n  i = s32[] get-tuple-element(s), index=0\n"
             "  v = f32[3] get-tuple-element(s), index=1\n  one = s32[] constant(1)\n"
             "  j = s32[] add(i, one)\n  w = f32[3] add(v, v)\n  ROOT t = (s32[], f32[3]) tuple(j, w)\n}\n"
             "ENTRY e {\n  x = f32[3] parameter(0)\n  z = s32[] constant(0)\n"
             "  t = (s32[], f32[3]) tuple(z, x)\n"
             "  w = (s32[], f32[3]) while(t), condition=cond, body=body\n"
             "  ROOT r = f32[3] get-tuple-element(w), index=1\n}\n",
}


WRITTEN["async-start"] = WRITTEN["async-update"] = WRITTEN["async-done"]
WRITTEN["copy-start"] = WRITTEN["copy-done"]


def opcode_case(op: str) -> str:
    """A tiny module using ``op``; ``KeyError`` for an opcode with no case yet."""
    if op in WRITTEN:
        return WRITTEN[op]
    if op in UNARY_FLOAT:
        return unary(op)
    if op in BINARY_FLOAT:
        return binary(op)
    if op in BINARY_INT:
        return binary(op, "s32")
    if op in UNARY_INT:
        return unary(op, "s32")
    raise KeyError(f"no test module for opcode {op!r}: add one to op_coverage_cases")


#: A sort longer than one tile: covered, as one library call (``sort/library_call.py``).
LONG_SORT = ("HloModule m\n" + LT + "ENTRY e {\n  x = f32[4097] parameter(0)\n"
             "  ROOT r = f32[4097] sort(x), dimensions={0}, to_apply=lt\n}\n")

LIMIT_CASES: dict[str, tuple[str, str, str]] = {
    "reducer_with_a_copy": (
        ("HloModule m\ncopyadd {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
        "  c = f32[] copy(a)\n  ROOT s = f32[] add(c, b)\n}\n"
        "ENTRY e {\n  x = f32[2,3] parameter(0)\n  z = f32[] constant(0)\n"
        "  ROOT r = f32[2] reduce(x, z), dimensions={1}, to_apply=copyadd\n}\n"), "c", "reducer"),
    "reduce_window_reversed": (
        ("HloModule m\n" + MAX + "ENTRY e {\n  x = f32[6] parameter(0)\n  z = f32[] constant(-inf)\n"
        "  ROOT r = f32[5] reduce-window(x, z), window={size=2 rhs_reversal=1}, to_apply=max\n}\n"),
        "r", "reversal"),
    # a map whose to_apply calls a computation: the one op with no Triton path (a map of
    # scalar elementwise ops is inlined as array ops).
    "uncovered_op_in_while_body": (
        ("HloModule m\n" + ADD + CALL_ADD + "cond {\n  s = (s32[], f32[3]) parameter(0)\n  i = s32[] get-tuple-element(s), index=0\n"
        "  k = s32[] constant(2)\n  ROOT c = pred[] compare(i, k), direction=LT\n}\n"
        "body {\n  s = (s32[], f32[3]) parameter(0)\n  i = s32[] get-tuple-element(s), index=0\n"
        "  v = f32[3] get-tuple-element(s), index=1\n  one = s32[] constant(1)\n  j = s32[] add(i, one)\n"
        "  w = f32[3] map(v, v), dimensions={0}, to_apply=call_add\n"
        "  ROOT t = (s32[], f32[3]) tuple(j, w)\n}\n"
        "ENTRY e {\n  x = f32[3] parameter(0)\n  z = s32[] constant(0)\n  t = (s32[], f32[3]) tuple(z, x)\n"
        "  w = (s32[], f32[3]) while(t), condition=cond, body=body\n"
        "  ROOT r = f32[3] get-tuple-element(w), index=1\n}\n"), "w", "cannot be inlined"),
    "uncovered_op_in_xla_fusion": (
        ("HloModule m\n" + ADD + CALL_ADD + "fused {\n  a = f32[2,3] parameter(0)\n"
        "  n = f32[2,3] negate(a)\n"
        "  ROOT p = f32[2,3] map(n, a), dimensions={0,1}, to_apply=call_add\n}\n"
        "ENTRY e {\n  x = f32[2,3] parameter(0)\n"
        "  ROOT r = f32[2,3] fusion(x), kind=kLoop, calls=fused\n}\n"), "p", "cannot be inlined"),
    "collective_over_two_devices": (
        _collective("  ROOT r = f32[2,3] all-reduce(x), replica_groups={{0,1}}, to_apply=add",
                    ADD), "r", "needs 2 devices"),
    "custom_call": (
        ("HloModule m\nENTRY e {\n  x = f32[4] parameter(0)\n"
        "  ROOT r = f32[4] custom-call(x), custom_call_target=\"foo\"\n}\n"), "r", "custom-call"),
}
