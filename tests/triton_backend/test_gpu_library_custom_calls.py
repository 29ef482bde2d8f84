"""XLA:GPU dumps run: their cuBLAS GEMM, cuDNN convolution and cuDNN fused attention
custom-calls compile (as the dots, convolutions, attention and epilogues they compute,
``fusion.transforms.gpu_call_expansion``) and match the reference evaluator, whose rules for
them are the formulas (``tests/fusion/test_gemm_calls.py`` and ``test_cudnn_conv_calls.py``
check them against torch, ``test_cudnn_fmha_calls.py`` against JAX's attention)."""
from __future__ import annotations

import pytest

from fusion.errors import UnsupportedOpError
from fusion.ir.shape import flatten_shape
from fusion.text.parser import parse_hlo
from tests.fusion.test_cudnn_conv_calls import CASES as CONV_CASES, backward_module, conv_module
from tests.fusion.test_cudnn_fmha_calls import _inputs as attention_inputs, dump
from tests.fusion.test_gemm_calls import CASES, _inputs, gemm_module
from triton_backend.driver.module_compiler import compile_hlo
from triton_backend.driver.op_coverage import uncovered_ops
from triton_backend.host.input_validation import tensor_from_numpy, tensor_to_numpy
from triton_backend.host.output_check import compare_with_evaluator

#: A two-layer MLP step as XLA:GPU leaves it: a cuBLASLt GEMM with its bias and GELU
#: folded in, a loop fusion, and a plain cuBLAS GEMM whose result aliases a bias matrix.
MLP = """HloModule jit_mlp, entry_computation_layout={(bf16[8,32]{1,0}, bf16[32,64]{1,0}, bf16[64]{0}, bf16[64,16]{1,0}, f32[8,16]{1,0})->f32[8,16]{1,0}}

%fused_scale (param_0: bf16[8,64]) -> bf16[8,64] {
  %param_0 = bf16[8,64]{1,0} parameter(0)
  %constant_1 = bf16[] constant(0.5)
  %broadcast.1 = bf16[8,64]{1,0} broadcast(bf16[] %constant_1), dimensions={}
  ROOT %multiply.1 = bf16[8,64]{1,0} multiply(bf16[8,64]{1,0} %param_0, bf16[8,64]{1,0} %broadcast.1)
}

ENTRY %main.10 (x: bf16[8,32], w1: bf16[32,64], b1: bf16[64], w2: bf16[64,16], r: f32[8,16]) -> f32[8,16] {
  %x = bf16[8,32]{1,0} parameter(0)
  %w1 = bf16[32,64]{1,0} parameter(1)
  %b1 = bf16[64]{0} parameter(2)
  %cublas-lt-matmul.1 = (bf16[8,64]{1,0}, s8[4194304]{0}) custom-call(bf16[8,32]{1,0} %x, bf16[32,64]{1,0} %w1, bf16[64]{0} %b1), custom_call_target="__cublas$lt$matmul", backend_config={"operation_queue_id":"0","wait_on_operation_queues":[],"gemm_backend_config":{"alpha_real":1,"beta":0,"dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],"rhs_contracting_dimensions":["0"],"lhs_batch_dimensions":[],"rhs_batch_dimensions":[]},"alpha_imag":0,"precision_config":{"operand_precision":["DEFAULT","DEFAULT"],"algorithm":"ALG_UNSET"},"epilogue":"BIAS_GELU","damax_output":false,"lhs_stride":"256","rhs_stride":"2048","grad_x":false,"grad_y":false},"force_earliest_schedule":false}
  %get-tuple-element.1 = bf16[8,64]{1,0} get-tuple-element((bf16[8,64]{1,0}, s8[4194304]{0}) %cublas-lt-matmul.1), index=0
  %loop_multiply_fusion = bf16[8,64]{1,0} fusion(bf16[8,64]{1,0} %get-tuple-element.1), kind=kLoop, calls=%fused_scale
  %w2 = bf16[64,16]{1,0} parameter(3)
  %r = f32[8,16]{1,0} parameter(4)
  %custom-call.2 = (f32[8,16]{1,0}, s8[4194304]{0}) custom-call(bf16[8,64]{1,0} %loop_multiply_fusion, bf16[64,16]{1,0} %w2, f32[8,16]{1,0} %r), custom_call_target="__cublas$gemm", output_to_operand_aliasing={{0}: (2, {})}, backend_config={"operation_queue_id":"0","wait_on_operation_queues":[],"gemm_backend_config":{"alpha_real":1,"beta":1,"dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],"rhs_contracting_dimensions":["0"],"lhs_batch_dimensions":[],"rhs_batch_dimensions":[]},"alpha_imag":0,"precision_config":{"operand_precision":["DEFAULT","DEFAULT"],"algorithm":"ALG_UNSET"},"epilogue":"DEFAULT","lhs_stride":"512","rhs_stride":"1024","grad_x":false,"grad_y":false,"damax_output":false},"force_earliest_schedule":false}
  ROOT %get-tuple-element.2 = f32[8,16]{1,0} get-tuple-element((f32[8,16]{1,0}, s8[4194304]{0}) %custom-call.2), index=0
}
"""


#: XLA:GPU's generic Triton emitter: a GEMM fusion whose operands are nested fusions of
#: their own (each with the tiling XLA chose for it), here one negating the rhs.
NESTED_GEMM = """HloModule jit_f, entry_computation_layout={(bf16[128,64]{1,0}, bf16[64,256]{1,0})->bf16[128,256]{1,0}}

%lhs_fusion (p0: bf16[128,64]) -> bf16[128,64] {
  ROOT %p0 = bf16[128,64]{1,0} parameter(0)
}

%rhs_fusion (p0: bf16[64,256]) -> bf16[64,256] {
  %p0.1 = bf16[64,256]{1,0} parameter(0)
  ROOT %n = bf16[64,256]{1,0} negate(bf16[64,256]{1,0} %p0.1)
}

%gemm_fusion_dot (p0.2: bf16[128,64], p1.2: bf16[64,256]) -> bf16[128,256] {
  %p0.2 = bf16[128,64]{1,0} parameter(0)
  %lhs = bf16[128,64]{1,0} fusion(bf16[128,64]{1,0} %p0.2), kind=kCustom, calls=%lhs_fusion, backend_config={"fusion_backend_config":{"kind":"__triton_nested_gemm_fusion","block_level_fusion_config":{"output_tiles":[{"sizes":["64","32"]}]}}}
  %p1.2 = bf16[64,256]{1,0} parameter(1)
  %rhs = bf16[64,256]{1,0} fusion(bf16[64,256]{1,0} %p1.2), kind=kCustom, calls=%rhs_fusion, backend_config={"fusion_backend_config":{"kind":"__triton_nested_gemm_fusion","block_level_fusion_config":{"output_tiles":[{"sizes":["32","128"]}]}}}
  ROOT %dot.1 = bf16[128,256]{1,0} dot(bf16[128,64]{1,0} %lhs, bf16[64,256]{1,0} %rhs), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

ENTRY %main.4 (Arg_0.1: bf16[128,64], Arg_1.2: bf16[64,256]) -> bf16[128,256] {
  %Arg_0.1 = bf16[128,64]{1,0} parameter(0)
  %Arg_1.2 = bf16[64,256]{1,0} parameter(1)
  ROOT %gemm_fusion_dot.1 = bf16[128,256]{1,0} fusion(bf16[128,64]{1,0} %Arg_0.1, bf16[64,256]{1,0} %Arg_1.2), kind=kCustom, calls=%gemm_fusion_dot, backend_config={"fusion_backend_config":{"kind":"__triton_gemm","block_level_fusion_config":{"output_tiles":[{"sizes":["64","128"]}],"num_warps":"4","num_ctas":1,"num_stages":3}}}
}
"""


def _check(text: str, arrays=None) -> None:
    module = parse_hlo(text)
    arrays = _inputs(text, seed=3) if arrays is None else arrays
    tensors = [tensor_from_numpy(a, p.shape.dtype) for a, p in zip(arrays, module.entry.parameters)]
    compiled = compile_hlo(text, cache=False)
    outputs = [tensor_to_numpy(t) for t in compiled(*tensors)]
    types = [s.dtype for s in flatten_shape(module.entry.root.shape)]
    for comparison in compare_with_evaluator(module, arrays, outputs, types):
        assert comparison.passed, comparison.describe()


@pytest.mark.parametrize("name", ["gemm_alpha_beta", "lt_bias_relu_column_major",
                                  "lt_bias_gelu_bf16", "lt_bias_gelu_aux", "lt_array_result",
                                  "lt_taken_whole", "batched_bias_layout"])
def test_a_gemm_custom_call_compiles_and_matches_the_evaluator(name):
    _check(gemm_module(**CASES[name]))


@pytest.mark.parametrize("name", ["forward_bf16_scaled_nchw", "bias_relu6_side_f16",
                                  "bias_leaky_grouped"])
def test_a_cudnn_convolution_compiles_and_matches_the_evaluator(name):
    text = conv_module(**CONV_CASES[name])
    _check(text)
    compiled = compile_hlo(text, cache=False)
    assert [f.kind.value for f in compiled.fusions.values()] == ["convolution"]  # one kernel


@pytest.mark.parametrize("direction", ["input", "filter"])
@pytest.mark.parametrize("groups", [1, 2])
def test_a_cudnn_backward_convolution_compiles_and_matches_the_evaluator(direction, groups):
    _check(backward_module(direction, stride=2, dtype="bf16", groups=groups))


def test_an_xla_gpu_dump_of_an_mlp_runs_and_fuses_the_epilogue_with_the_dot():
    _check(MLP)
    compiled = compile_hlo(MLP, cache=False)
    assert not any(i.opcode == "custom-call" for c in compiled.module.computations for i in c)
    # The first dot with its bias and GELU, XLA's own scale fusion as given, the second dot
    # with its residual add (C, beta=1).
    kinds = sorted(f.kind.value for f in compiled.fusions.values())
    assert kinds == ["dot", "dot", "loop"]
    assert uncovered_ops(parse_hlo(MLP)) == []


def test_an_fp8_gemm_is_refused_located():
    text = gemm_module(target="__cublas$lt$matmul$f8")
    with pytest.raises(UnsupportedOpError, match=r"__cublas\$lt\$matmul\$f8") as err:
        compile_hlo(text, cache=False)
    assert err.value.line is not None


def test_a_nested_triton_gemm_fusion_is_one_kernel_matching_the_evaluator():
    _check(NESTED_GEMM)
    compiled = compile_hlo(NESTED_GEMM, cache=False)
    assert [f.kind.value for f in compiled.fusions.values()] == ["dot"]
    fused = compiled.module.computation(compiled.module.entry.root.attr("calls"))
    # the lhs fusion (its root a parameter) is a copy, the rhs one its negate
    assert [i.opcode for i in fused if i.opcode != "parameter"] == ["copy", "negate", "dot"]
    assert uncovered_ops(parse_hlo(NESTED_GEMM)) == []


@pytest.mark.parametrize("name", ["cudnn_fmha_causal_gqa", "cudnn_fmha_padded_causal",
                                  "cudnn_fmha_sliding_window_f16"])
def test_a_cudnn_attention_dump_is_one_attention_kernel_matching_the_evaluator(name):
    text = dump(name)
    _check(text, attention_inputs(text))
    compiled = compile_hlo(text, cache=False)
    kinds = sorted(f.kind.value for f in compiled.fusions.values())
    # the attention stores its result transposed to the caller's [B, T, N, H] itself
    assert kinds == ["attention"]
    assert uncovered_ops(parse_hlo(text)) == []


def test_a_cudnn_attention_training_step_is_the_attention_backward_s_three_kernels():
    """The backward call reads its forward's statistics and output, so it computes them
    from the scores again: nothing reads the forward (the loss' cotangent is given), and the
    backward is the rows, query and key kernels, dQ stored as [B, T, N, H] by its own."""
    text = dump("cudnn_fmha_train_causal_gqa")
    _check(text, attention_inputs(text))
    compiled = compile_hlo(text, cache=False)
    kinds = sorted(f.kind.value for f in compiled.fusions.values())
    assert kinds == ["attention_backward"] * 3
