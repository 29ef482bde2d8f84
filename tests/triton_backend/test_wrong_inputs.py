"""Wrong and unusual inputs to a compiled module and to a torch op: a clear error naming the
parameter, or the right answer (checked against the NumPy reference evaluator), never garbage.

Covered: count, shape, dtype, device (meta; a CUDA tensor without CUDA, faked by a tensor
subclass reporting ``cuda:1``; mixed CUDA devices), Python numbers, sparse tensors,
non-contiguous views (transposes, strided slices, zero-stride ``expand``), one tensor passed
twice, lazily negated views, ``requires_grad``, zero-size dims (elementwise, empty and
non-empty reductions, empty concatenate operands, pads of empty arrays) and rank-0 tensors.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from fusion.errors import BadArgumentError, EvaluationError
from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo
from triton_backend import compile_hlo
from triton_backend.host.input_validation import tensor_to_numpy, validate_arguments
from triton_backend.integrations.torch_op import torch_op

ADD = """HloModule wrong_inputs_add
ENTRY e {
  x = f32[2,3] parameter(0)
  y = f32[2,3] parameter(1)
  ROOT s = f32[2,3] add(x, y)
}
"""

ADD_REDUCE = """HloModule wrong_inputs_add_reduce
add { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b) }
ENTRY e {
  x = f32[4,6] parameter(0)
  y = f32[4,6] parameter(1)
  m = f32[4,6] multiply(x, y)
  z = f32[] constant(0)
  ROOT r = f32[4] reduce(m, z), dimensions={1}, to_apply=add
}
"""


@pytest.fixture(scope="module")
def add():
    return compile_hlo(ADD)


@pytest.fixture(scope="module")
def add_reduce():
    return compile_hlo(ADD_REDUCE)


@pytest.fixture(scope="module")
def add_op():
    return torch_op(ADD, name="wrong_inputs_add")


def assert_matches_evaluator(text_or_compiled, *tensors: torch.Tensor, text: str | None = None):
    """Run the compiled module on ``tensors`` and the evaluator on their values; compare."""
    compiled = compile_hlo(text_or_compiled) if isinstance(text_or_compiled, str) else text_or_compiled
    outputs = compiled(*tensors)
    arrays = [tensor_to_numpy(t) for t in tensors]
    references = evaluate(compiled.source_module, *arrays)
    assert len(outputs) == len(references)
    for out, ref in zip(outputs, references):
        got = tensor_to_numpy(out)
        assert got.shape == ref.shape and got.dtype == ref.dtype, (got.shape, ref.shape)
        np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64),
                                   rtol=1e-5, atol=1e-6)
    return outputs


# --- Errors: the compiled module ------------------------------------------------------------


@pytest.mark.parametrize("value, name", [(1.0, "float"), (2, "int"), (True, "bool")])
def test_python_number_is_a_clear_error_with_a_hint(add, value, name):
    with pytest.raises(EvaluationError, match=rf"parameter 0 \(%x\): expected a torch.Tensor "
                                              rf"\(f32\[2,3\]\), got {name}; wrap a Python number "
                                              r"as torch.tensor\(value, dtype=torch.float32\)"):
        add(value, torch.zeros(2, 3))


def test_none_is_a_clear_error(add):
    with pytest.raises(EvaluationError, match=r"parameter 1 \(%y\): expected a torch.Tensor .*got NoneType$"):
        add(torch.zeros(2, 3), None)


def test_too_many_arguments(add):
    with pytest.raises(EvaluationError, match=r"takes 2 argument\(s\) .* got 3"):
        add(torch.zeros(2, 3), torch.zeros(2, 3), torch.zeros(2, 3))


def test_rank_mismatch_and_scalar_for_array(add):
    with pytest.raises(EvaluationError, match=r"parameter 0 \(%x\): has shape \[6\]"):
        add(torch.zeros(6), torch.zeros(2, 3))
    with pytest.raises(EvaluationError, match=r"parameter 1 \(%y\): has shape \[\]"):
        add(torch.zeros(2, 3), torch.tensor(1.0))


def test_sparse_tensor_is_a_clear_error(add):
    with pytest.raises(EvaluationError, match=r"parameter 0 \(%x\): has layout torch.sparse_coo.*to_dense"):
        add(torch.zeros(2, 3).to_sparse(), torch.zeros(2, 3))


def test_meta_tensor_is_a_clear_error(add):
    with pytest.raises(EvaluationError, match=r"parameter 0 \(%x\): is on device meta"):
        add(torch.zeros(2, 3, device="meta"), torch.zeros(2, 3, device="meta"))


class _FakeCudaTensor(torch.Tensor):
    """A CPU tensor that reports a CUDA device: the CUDA code path without a GPU."""

    @property
    def device(self):  # mimics torch.Tensor.device
        return torch.device("cuda", 1)


class _FakeCuda0Tensor(torch.Tensor):
    @property
    def device(self):
        return torch.device("cuda", 0)


def test_cuda_tensor_without_cuda_is_a_clear_error(add):
    fake = torch.zeros(2, 3).as_subclass(_FakeCudaTensor)
    assert fake.device.type == "cuda"
    with pytest.raises(EvaluationError, match=r"parameter 0 \(%x\): is on device cuda:1, but the "
                                              r"module runs on cpu \(the Triton interpreter: no "
                                              r"CUDA device here\)"):
        add(fake, torch.zeros(2, 3))


def test_cuda_module_refuses_cpu_and_other_device_tensors():
    """The checks a module compiled for ``cuda:0`` makes (validate_arguments directly)."""
    params = parse_hlo(ADD).entry.parameters
    cuda0 = torch.device("cuda", 0)
    on0 = torch.zeros(2, 3).as_subclass(_FakeCuda0Tensor)
    on1 = torch.zeros(2, 3).as_subclass(_FakeCudaTensor)
    with pytest.raises(EvaluationError, match=r"parameter 0 \(%x\): is on device cpu, but the module runs on cuda:0$"):
        validate_arguments(params, [torch.zeros(2, 3), on0], cuda0)
    with pytest.raises(EvaluationError, match=r"parameter 1 \(%y\): is on device cuda:1, but the module runs on cuda:0$"):
        validate_arguments(params, [on0, on1], cuda0)
    assert len(validate_arguments(params, [on0, on0], cuda0)) == 2


def test_mixed_cuda_devices_are_refused_when_the_module_has_no_index():
    params = parse_hlo(ADD).entry.parameters
    on0 = torch.zeros(2, 3).as_subclass(_FakeCuda0Tensor)
    on1 = torch.zeros(2, 3).as_subclass(_FakeCudaTensor)
    with pytest.raises(EvaluationError, match=r"arguments are on different devices \(parameter 0 "
                                              r"\(%x\) on cuda:0, parameter 1 \(%y\) on cuda:1\)"):
        validate_arguments(params, [on0, on1], torch.device("cuda"))


# --- Errors: the torch op ---------------------------------------------------------------------


@pytest.mark.parametrize("bad", [1.0, 3, None, [1.0, 2.0]])
def test_torch_op_non_tensor_names_the_parameter(add_op, bad):
    with pytest.raises(EvaluationError, match=r"fusion::wrong_inputs_add: argument 1 \(y\) must be "
                                              r"a tensor, got \w+"):
        add_op(torch.zeros(2, 3), bad)


def test_torch_op_packet_with_a_number_names_the_argument(add_op):
    """Called through ``torch.ops`` directly, torch's own schema check names the argument."""
    with pytest.raises(RuntimeError, match=r"argument 'x'"):
        torch.ops.fusion.wrong_inputs_add(1.0, torch.zeros(2, 3))


def test_torch_op_meta_mixed_and_sparse(add_op):
    with pytest.raises(EvaluationError, match=r"argument 0 \(x\) is on meta"):
        add_op(torch.zeros(2, 3, device="meta"), torch.zeros(2, 3))
    with pytest.raises(EvaluationError, match=r"argument 1 \(y\) has layout torch.sparse_coo"):
        add_op(torch.zeros(2, 3), torch.zeros(2, 3).to_sparse())


def test_torch_op_fake_cuda_tensor(add_op):
    with pytest.raises(EvaluationError, match=r"argument 0 \(x\) is on cuda:1, but the kernels run on cpu"):
        add_op(torch.zeros(2, 3).as_subclass(_FakeCudaTensor), torch.zeros(2, 3))


def test_torch_op_error_names_the_op_once(add_op):
    with pytest.raises(EvaluationError) as info:
        add_op(torch.zeros(2, 4), torch.zeros(2, 3))
    assert str(info.value).count("fusion::wrong_inputs_add") == 1, str(info.value)


# --- Correct results: layouts of the arguments -------------------------------------------------


def _views():
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6) / 7 - 1
    return {
        "transposed": base[:3, :2].t(),                      # strides (1, 6)
        "strided_slice": base[::2, 1::2],                   # strides (12, 2)
        "offset_slice": base[1:3, 2:5],                     # contiguous rows, storage offset
        "expanded_row": base[0, :3].expand(2, 3),            # stride 0 on dim 0
        "expanded_scalar": torch.tensor(2.5).expand(2, 3),   # strides (0, 0)
        "channels_last_like": base[:2, :3].clone().t().contiguous().t(),
    }


@pytest.mark.parametrize("kind", list(_views()))
def test_views_give_the_right_answer(add, add_op, kind):
    x = _views()[kind]
    y = torch.linspace(-1, 1, 6).reshape(2, 3)
    want = x.contiguous() + y
    outputs = assert_matches_evaluator(add, x, y)
    torch.testing.assert_close(outputs[0], want)
    torch.testing.assert_close(add_op(x, y), want)
    torch.testing.assert_close(add_op(y, x), y + x.contiguous())


@pytest.mark.parametrize("kind", ["transposed", "strided_slice", "expanded_row"])
def test_views_into_a_reduction(add_reduce, kind):
    base = torch.arange(96, dtype=torch.float32).reshape(8, 12) / 5 - 3
    x = {"transposed": base[:6, :4].t(), "strided_slice": base[::2, ::2],
         "expanded_row": base[0, :6].expand(4, 6)}[kind]
    assert x.shape == (4, 6) and not x.is_contiguous()
    assert_matches_evaluator(add_reduce, x, x)
    assert_matches_evaluator(add_reduce, x, torch.ones(4, 6))


def test_the_same_tensor_twice(add, add_op):
    x = torch.randn(2, 3)
    keep = x.clone()
    (out,) = assert_matches_evaluator(add, x, x)
    torch.testing.assert_close(out, 2 * keep)
    torch.testing.assert_close(add_op(x, x), 2 * keep)
    torch.testing.assert_close(x, keep)  # inputs are read, never written


def test_overlapping_views_of_one_buffer(add):
    buf = torch.arange(8, dtype=torch.float32)
    x, y = buf[:6].view(2, 3), buf[2:8].view(2, 3)   # overlap in buf[2:6]
    assert_matches_evaluator(add, x, y)


def test_lazily_negated_view_is_materialized(add, add_op):
    """``conj().imag`` of a one-element complex slice is a contiguous neg-bit view: its raw
    data is the un-negated value, which a kernel must not read as is."""
    z = torch.tensor([1 + 2j, 3 - 4j, 5 + 6j, 7 - 8j, 9 + 1j, 2 - 2j], dtype=torch.complex64)
    neg = torch._neg_view(torch.arange(6, dtype=torch.float32).reshape(2, 3))
    assert neg.is_neg() and neg.is_contiguous()
    y = torch.ones(2, 3)
    torch.testing.assert_close(add(neg, y)[0], -torch.arange(6.0).reshape(2, 3) + 1)
    torch.testing.assert_close(add_op(neg, y), -torch.arange(6.0).reshape(2, 3) + 1)
    imag = z.conj().imag.reshape(2, 3)
    torch.testing.assert_close(add(imag, y)[0], -z.imag.reshape(2, 3) + 1)


def test_requires_grad_inputs_work_and_outputs_do_not_require_grad(add):
    x = torch.randn(2, 3, requires_grad=True)
    (out,) = assert_matches_evaluator(add, x, x.detach().t().contiguous().t())
    assert not out.requires_grad and out.grad_fn is None
    view_module = compile_hlo("""HloModule m
ENTRY e {
  x = f32[2,3] parameter(0)
  ROOT r = f32[3,2] reshape(x)
}""")
    (view,) = view_module(x)
    assert not view.requires_grad  # a host view of the input, detached and copied


def test_torch_op_requires_grad_forward_works_backward_is_a_clear_error():
    # backward="auto" trains (tests/triton_backend/test_torch_op_autograd.py); an op
    # registered for inference only runs forward and refuses backward, naming itself.
    op = torch_op(ADD, name="wrong_inputs_add_inference_only", backward=None)
    x = torch.randn(2, 3, requires_grad=True)
    out = op(x, torch.ones(2, 3))
    torch.testing.assert_close(out, x.detach() + 1)
    with pytest.raises(BadArgumentError, match=r"backward=None \(inference only\)"):
        out.sum().backward()


# --- Correct results: zero-size dims and scalars -----------------------------------------------

ZERO_SIZE = {
    "elementwise_0x5": ("""HloModule m
ENTRY e {
  x = f32[0,5] parameter(0)
  y = f32[0,5] parameter(1)
  ROOT s = f32[0,5] multiply(x, y)
}""", [(0, 5), (0, 5)]),
    "reduce_empty_rows_gives_init": ("""HloModule m
add { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b) }
ENTRY e {
  x = f32[5,0] parameter(0)
  c = f32[] constant(1.5)
  ROOT r = f32[5] reduce(x, c), dimensions={1}, to_apply=add
}""", [(5, 0)]),
    "reduce_to_scalar_of_nothing": ("""HloModule m
mx { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] maximum(a, b) }
ENTRY e {
  x = f32[0] parameter(0)
  c = f32[] constant(-inf)
  ROOT r = f32[] reduce(x, c), dimensions={0}, to_apply=mx
}""", [(0,)]),
    "variadic_argmax_of_nothing": ("""HloModule m
am { a = f32[] parameter(0)
  b = s32[] parameter(1)
  c = f32[] parameter(2)
  d = s32[] parameter(3)
  g = pred[] compare(a, c), direction=GE
  m = f32[] select(g, a, c)
  i = s32[] select(g, b, d)
  ROOT t = (f32[], s32[]) tuple(m, i) }
ENTRY e {
  x = f32[3,0] parameter(0)
  y = s32[3,0] parameter(1)
  c = f32[] constant(-inf)
  z = s32[] constant(-1)
  ROOT r = (f32[3], s32[3]) reduce(x, y, c, z), dimensions={1}, to_apply=am
}""", [(3, 0), (3, 0)]),
    "reduce_of_empty_output": ("""HloModule m
add { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b) }
ENTRY e {
  x = f32[0,7] parameter(0)
  c = f32[] constant(0)
  ROOT r = f32[0] reduce(x, c), dimensions={1}, to_apply=add
}""", [(0, 7)]),
    "concatenate_with_empty_operands": ("""HloModule m
ENTRY e {
  x = f32[0,3] parameter(0)
  y = f32[2,3] parameter(1)
  z = f32[0,3] parameter(2)
  ROOT c = f32[2,3] concatenate(x, y, z), dimensions={0}
}""", [(0, 3), (2, 3), (0, 3)]),
    "concatenate_empty_in_the_middle": ("""HloModule m
ENTRY e {
  x = f32[2,3] parameter(0)
  y = f32[2,0] parameter(1)
  z = f32[2,4] parameter(2)
  ROOT c = f32[2,7] concatenate(x, y, z), dimensions={1}
}""", [(2, 3), (2, 0), (2, 4)]),
    "pad_of_empty": ("""HloModule m
ENTRY e {
  x = f32[0,2] parameter(0)
  c = f32[] constant(3)
  ROOT p = f32[2,4] pad(x, c), padding=1_1x1_1
}""", [(0, 2)]),
    "dot_with_empty_contraction": ("""HloModule m
ENTRY e {
  x = f32[2,0] parameter(0)
  y = f32[0,3] parameter(1)
  ROOT d = f32[2,3] dot(x, y), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}""", [(2, 0), (0, 3)]),
    "softmax_of_no_rows": ("""HloModule m
add { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b) }
ENTRY e {
  x = f32[0,8] parameter(0)
  c = f32[] constant(0)
  r = f32[0] reduce(x, c), dimensions={1}, to_apply=add
  b = f32[0,8] broadcast(r), dimensions={0}
  ROOT d = f32[0,8] divide(x, b)
}""", [(0, 8)]),
    "transpose_and_slice_to_empty": ("""HloModule m
ENTRY e {
  x = f32[4,3] parameter(0)
  s = f32[0,3] slice(x), slice={[2:2], [0:3]}
  ROOT t = f32[3,0] transpose(s), dimensions={1,0}
}""", [(4, 3)]),
    "scalars": ("""HloModule m
ENTRY e {
  x = f32[] parameter(0)
  y = f32[] parameter(1)
  ROOT s = f32[] multiply(x, y)
}""", [(), ()]),
}


def _inputs_for(text: str, shapes) -> list[torch.Tensor]:
    module = parse_hlo(text)
    gen = torch.Generator().manual_seed(0)
    out = []
    for param, dims in zip(module.entry.parameters, shapes):
        if param.shape.dtype == "s32":
            out.append(torch.randint(-5, 6, dims, generator=gen, dtype=torch.int32))
        else:
            out.append(torch.randn(dims, generator=gen))
    return out


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("name", list(ZERO_SIZE))
def test_zero_size_and_scalar_programs_match_the_evaluator(name, fuse):
    text, shapes = ZERO_SIZE[name]
    compiled = compile_hlo(text, fuse=fuse)
    outputs = assert_matches_evaluator(compiled, *_inputs_for(text, shapes))
    assert all(o.is_contiguous() for o in outputs)
    # Nothing is launched with an empty grid: a fusion writing nothing gets no kernel.
    assert all(math.prod(f.grid) > 0 for f in compiled.fusions.values()), compiled.fusions


def test_a_fusion_writing_nothing_gets_no_kernel():
    text, shapes = ZERO_SIZE["softmax_of_no_rows"]
    compiled = compile_hlo(text, fuse=False)
    launched = {i.name for _, i in compiled.module.fusions()
                if i.name in compiled.fusions}
    assert not launched and not compiled.fusions
    (out,) = compiled(torch.zeros(0, 8))
    assert out.shape == (0, 8) and out.dtype == torch.float32


def test_empty_reduce_feeding_an_elementwise_op_under_the_fusion_pass():
    text = """HloModule m
add { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b) }
ENTRY e {
  x = f32[5,0] parameter(0)
  c = f32[] constant(1.5)
  r = f32[5] reduce(x, c), dimensions={1}, to_apply=add
  ROOT n = f32[5] negate(r)
}"""
    assert_matches_evaluator(compile_hlo(text), torch.zeros(5, 0))


def test_empty_reduce_feeding_an_elementwise_op_unfused():
    text = """HloModule m
add { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b) }
ENTRY e {
  x = f32[5,0] parameter(0)
  c = f32[] constant(1.5)
  r = f32[5] reduce(x, c), dimensions={1}, to_apply=add
  ROOT n = f32[5] negate(r)
}"""
    (out,) = assert_matches_evaluator(compile_hlo(text, fuse=False), torch.zeros(5, 0))
    torch.testing.assert_close(out, torch.full((5,), -1.5))


def test_xla_fusion_holding_an_empty_reduce():
    text = """HloModule m
add { a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b) }
f { p = f32[5,0] parameter(0)
  c = f32[] constant(1.5)
  r = f32[5] reduce(p, c), dimensions={1}, to_apply=add
  ROOT n = f32[5] negate(r) }
ENTRY e {
  x = f32[5,0] parameter(0)
  ROOT r = f32[5] fusion(x), kind=kInput, calls=f
}"""
    assert_matches_evaluator(compile_hlo(text, fuse=False), torch.zeros(5, 0))


def test_empty_reduce_init_is_a_fresh_tensor_each_call():
    text, shapes = ZERO_SIZE["reduce_to_scalar_of_nothing"]
    compiled = compile_hlo(text)
    (a,) = compiled(torch.zeros(0))
    (b,) = compiled(torch.zeros(0))
    a.fill_(7.0)
    assert b.item() == float("-inf")


@settings(max_examples=6, deadline=None)
@given(rows=st.integers(0, 3), cols=st.integers(0, 3), axis=st.sampled_from([0, 1]))
def test_zero_size_reductions_property(rows, cols, axis):
    """Sum over either axis of any [rows, cols] (zeros included) matches the evaluator."""
    kept = (rows, cols)[1 - axis]
    text = f"""HloModule m
add {{ a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b) }}
ENTRY e {{
  x = f32[{rows},{cols}] parameter(0)
  c = f32[] constant(0.25)
  ROOT r = f32[{kept}] reduce(x, c), dimensions={{{axis}}}, to_apply=add
}}"""
    assert_matches_evaluator(compile_hlo(text, fuse=False), torch.randn(rows, cols))


def test_torch_op_zero_size_and_scalar():
    op = torch_op(ZERO_SIZE["concatenate_with_empty_operands"][0], name="wrong_inputs_concat_empty")
    y = torch.randn(2, 3)
    torch.testing.assert_close(op(torch.zeros(0, 3), y, torch.zeros(0, 3)), y)
    scalar = torch_op(ZERO_SIZE["scalars"][0], name="wrong_inputs_scalars")
    out = scalar(torch.tensor(3.0), torch.tensor(-2.0))
    assert out.shape == () and out.item() == -6.0
