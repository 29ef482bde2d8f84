"""The module as the compiler takes it: XLA's wrappers written as the plain ops they run.

An ``async-start``/``async-done`` pair becomes the call it runs (``async_unwrapping``), a
cuBLAS or cuDNN custom-call the dot, convolution or attention and epilogue it computes
(``gpu_call_expansion``), a fusion nested in a reducer or a fused computation its ops
(``nested_fusion_inlining``), a ``map`` of scalar elementwise ops those ops on arrays
(``map_inlining``), a ragged dot the grouped GEMM kernel does not take the dense dot of its
operands masked by group (``ragged_dot_expansion``), an ``rng-bit-generator`` the integer
ops computing its bits (``rng_expansion``, as XLA's ``RngBitGeneratorExpander``), an ``rng``
the ops drawing it from its generator state (``rng_distribution_expansion``, as XLA's
``RngExpander``), a ``stochastic-convert`` its rounding as elementwise ops
(``stochastic_convert_expansion``, as XLA's ``StochasticConvertDecomposer``), a
batch-norm op its reductions and elementwise ops (``batch_norm_expansion``, as XLA's
``BatchNormExpander``), a scaled dot (the ``scaled-dot`` op, JAX's ``__op$block_scaled_dot``
call) the dot of its operands times their repeated scales (``scaled_dot_expansion``, as XLA's
``ScaledDotRewriter`` and ``BlockScalingRewriter``), a dot whose algorithm only rounds its
operands (XLA's ``dot_bf16_bf16_f32``) the conversions and a plain dot
(``dot_operand_rounding``), a dot of complex values dots of their real parts
(``complex_dots``) and a scatter or sort of complex values the same op over their parts
(``complex_variadic_ops``): each the same value, op for op.
``compile_hlo`` and the coverage check both start from this, so the check judges what the
compiler compiles.

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... f {
...   p = f32[4] parameter(0)
...   ROOT n = f32[4] negate(p)
... }
... ENTRY e {
...   x = f32[4] parameter(0)
...   s = ((f32[4]), f32[4], s32[]) async-start(x), calls=f
...   ROOT d = f32[4] async-done(s)
... }''')
>>> [i.opcode for i in plain_ops(m).entry]
['parameter', 'call']
"""
from __future__ import annotations

from fusion.ir.hlo_module import HloModule
from fusion.transforms.async_unwrapping import unwrap_async_calls
from fusion.transforms.batch_norm_expansion import expand_batch_norms
from fusion.transforms.complex_dots import expand_complex_dots
from fusion.transforms.complex_variadic_ops import expand_complex_variadic_ops
from fusion.transforms.dot_operand_rounding import round_dot_operands
from fusion.transforms.gpu_call_expansion import expand_gpu_library_calls
from fusion.transforms.map_inlining import inline_maps
from fusion.transforms.nested_fusion_inlining import inline_nested_fusions
from fusion.transforms.ragged_dot_expansion import expand_ragged_dots
from fusion.transforms.rng_distribution_expansion import expand_rngs
from fusion.transforms.rng_expansion import expand_rng_bit_generators
from fusion.transforms.scaled_dot_expansion import expand_scaled_dots
from fusion.transforms.stochastic_convert_expansion import expand_stochastic_converts


def plain_ops(module: HloModule) -> HloModule:
    """``module`` with XLA's wrappers written as plain ops (module docstring); ``module``
    itself when it has none.  ``UnsupportedOpError`` (located) for a library call this
    project does not compute."""
    plain = inline_maps(inline_nested_fusions(expand_scaled_dots(expand_gpu_library_calls(
        unwrap_async_calls(module)))))
    return expand_stochastic_converts(expand_batch_norms(expand_rngs(expand_rng_bit_generators(
        expand_complex_variadic_ops(expand_complex_dots(round_dot_operands(expand_ragged_dots(
            plain, keep="grouped"))))))))


__all__ = ["plain_ops"]
