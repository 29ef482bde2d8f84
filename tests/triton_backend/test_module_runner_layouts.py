"""``compile_hlo`` on modules whose ENTRY parameters, results and intermediates are in TPU-style
tiled and word-packed layouts, in the Triton interpreter.

bf16 ``(8,128)(2,1)``, s8 ``(8,128)(4,1)``, PRED ``(32,128)(32,1)`` and f32 ``(8,128)``
through elementwise, reduction and transpose ops, fused and unfused (every op its own kernel,
so values cross kernels in their physical form).  Every output is compared BIT-EXACTLY with
the reference evaluator run on the logical arrays (it ignores layouts).  Inputs go in as
logical tensors (packed by ``compile_hlo``) and as physical buffers whose padding holds a
NaN/sentinel (which must not leak); results come back logical, or physical on request.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from fusion.errors import EvaluationError, UnsupportedOpError
from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo
from fusion.ir.shape import ArrayShape, flatten_shape
from tests.triton_backend.fusion_check import random_array, to_torch
from tests.triton_backend.packed_layout_check import PADDING_FILL, bits
from triton_backend import compile_hlo
from triton_backend.host.host_packing import pack_tensor
from triton_backend.host.input_validation import physical_buffer

B = "bf16[37,300]{1,0:T(8,128)(2,1)}"
S = "s8[13,260]{1,0:T(8,128)(4,1)}"
P = "pred[40,130]{1,0:T(32,128)(32,1)}"
F = "f32[10,130]{1,0:T(8,128)}"

MAX_F32 = "mf {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n  ROOT m = f32[] maximum(a, b)\n}"
ADD_S8 = "ad {\n  a = s8[] parameter(0)\n  b = s8[] parameter(1)\n  ROOT m = s8[] add(a, b)\n}"

MODULES = {
    "bf16_elementwise": f"""HloModule m
ENTRY e {{
  a = {B} parameter(0)
  b = {B} parameter(1)
  s = {B} add(a, b)
  m = {B} multiply(s, a)
  ROOT n = {B} negate(m)
}}""",
    "bf16_transpose": f"""HloModule m
ENTRY e {{
  a = {B} parameter(0)
  n = {B} negate(a)
  ROOT t = bf16[300,37]{{1,0:T(8,128)(2,1)}} transpose(n), dimensions={{1,0}}
}}""",
    # A tuple returning a parameter: the packed input goes back out, unpacked.
    "s8_reduction_and_passthrough": f"""HloModule m
{ADD_S8}
ENTRY e {{
  a = {S} parameter(0)
  b = {S} parameter(1)
  m = {S} multiply(a, b)
  z = s8[] constant(0)
  r = s8[13]{{0:T(128)}} reduce(m, z), dimensions={{1}}, to_apply=ad
  ROOT t = (s8[13]{{0:T(128)}}, {S}) tuple(r, a)
}}""",
    "pred_logic": f"""HloModule m
ENTRY e {{
  a = bf16[40,130]{{1,0:T(8,128)(2,1)}} parameter(0)
  b = bf16[40,130]{{1,0:T(8,128)(2,1)}} parameter(1)
  p = {P} parameter(2)
  c = {P} compare(a, b), direction=LT
  x = {P} xor(c, p)
  ROOT n = {P} not(x)
}}""",
    "f32_reductions": f"""HloModule m
{MAX_F32}
ENTRY e {{
  a = {F} parameter(0)
  b = {F} parameter(1)
  m = {F} maximum(a, b)
  z = f32[] constant(-inf)
  r0 = f32[130]{{0:T(256)}} reduce(m, z), dimensions={{0}}, to_apply=mf
  r1 = f32[10] reduce(m, z), dimensions={{1}}, to_apply=mf
  ROOT t = (f32[130]{{0:T(256)}}, f32[10], {F}) tuple(r0, r1, m)
}}""",
    "f32_tiled_constant": """HloModule m
ENTRY e {
  a = f32[2,3]{1,0:T(8,128)} parameter(0)
  c = f32[2,3]{1,0:T(8,128)} constant({{1, 2, 3}, {4, 5, -6}})
  ROOT s = f32[2,3]{1,0:T(8,128)} multiply(a, c)
}""",
}


def _inputs(module, seed=0):
    rng = np.random.default_rng(seed)
    return [random_array(p.shape, rng) for p in module.entry.parameters]


def _check(outputs, want, module) -> None:
    shapes = flatten_shape(module.entry.root.shape)
    assert len(outputs) == len(want) == len(shapes)
    for got, ref, shape in zip(outputs, want, shapes):
        expected = to_torch(np.asarray(ref), shape.dtype)
        assert got.dtype == expected.dtype and tuple(got.shape) == shape.dims
        np.testing.assert_array_equal(bits(got), bits(expected))


def _layouts_by_name(module):
    return {i.name: i.shape for c in module.computations for i in c.instructions}


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("name", sorted(MODULES))
def test_logical_inputs_and_outputs_match_the_evaluator(name, fuse):
    text = MODULES[name]
    module = parse_hlo(text)
    arrays = _inputs(module)
    compiled = compile_hlo(text, fuse=fuse)
    got = compiled(*[to_torch(a, p.shape.dtype) for a, p in zip(arrays, module.entry.parameters)])
    _check(got, evaluate(module, *arrays), module)
    # The fusion pass keeps every surviving value's layout, and a fused computation's
    # parameters declare the layouts of the operands they read.
    source = _layouts_by_name(module)
    for comp in compiled.module.computations:
        for instr in comp.instructions:
            if comp.is_entry and instr.name in source:
                assert instr.shape == source[instr.name], instr.name
            if instr.opcode == "fusion":
                params = compiled.module.computation(instr.attr("calls")).parameters
                for operand, param in zip(instr.operands, params):
                    assert comp.instruction(operand).shape == param.shape


@pytest.mark.parametrize("name", ["bf16_elementwise", "s8_reduction_and_passthrough",
                                  "pred_logic", "f32_reductions"])
def test_physical_inputs_with_poisoned_padding_do_not_leak(name):
    text = MODULES[name]
    module = parse_hlo(text)
    arrays = _inputs(module, seed=3)
    physical = []
    for array, param in zip(arrays, module.entry.parameters):
        shape = param.shape
        physical.append(pack_tensor(to_torch(array, shape.dtype), shape.layout, shape.dtype,
                                    fill=PADDING_FILL[shape.dtype]))
        assert (physical[-1].dtype, physical[-1].numel()) == physical_buffer(shape)
    compiled = compile_hlo(text, fuse=False)
    _check(compiled(*physical), evaluate(module, *arrays), module)


def test_physical_outputs_on_request_with_zero_padding():
    text = MODULES["s8_reduction_and_passthrough"]
    module = parse_hlo(text)
    arrays = _inputs(module, seed=5)
    tensors = [to_torch(a, p.shape.dtype) for a, p in zip(arrays, module.entry.parameters)]
    want = evaluate(module, *arrays)
    shapes = flatten_shape(module.entry.root.shape)
    expected = [pack_tensor(to_torch(np.asarray(w), s.dtype), s.layout, s.dtype, fill=0)
                for w, s in zip(want, shapes)]
    physical_by_default, logical_by_default = (compile_hlo(text, physical_outputs=True),
                                               compile_hlo(text))
    by_compile = physical_by_default(*tensors)
    by_call = logical_by_default(*tensors, physical_outputs=True)
    logical = physical_by_default(*tensors, physical_outputs=False)
    assert expected[1].dtype == torch.uint32  # s8 (4,1): four per word
    for outputs in (by_compile, by_call):
        for got, exp in zip(outputs, expected):
            assert got.dtype == exp.dtype and got.shape == exp.shape
            np.testing.assert_array_equal(bits(got), bits(exp))
    _check(logical, want, module)
    # The returned passthrough buffer is the caller's own, never the input packed for it.
    physical_a = pack_tensor(tensors[0], shapes[1].layout, "s8")
    out = logical_by_default(physical_a, tensors[1], physical_outputs=True)[1]
    assert out.untyped_storage().data_ptr() != physical_a.untyped_storage().data_ptr()
    assert torch.equal(out, physical_a)


def test_while_loop_carries_a_tiled_value_between_kernels():
    text = f"""HloModule m
cond {{
  s = (s32[], {B}) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}}
body {{
  s = (s32[], {B}) parameter(0)
  i = s32[] get-tuple-element(s), index=0
  x = {B} get-tuple-element(s), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  y = {B} add(x, x)
  ROOT t = (s32[], {B}) tuple(j, y)
}}
ENTRY e {{
  a = {B} parameter(0)
  zero = s32[] constant(0)
  init = (s32[], {B}) tuple(zero, a)
  w = (s32[], {B}) while(init), condition=cond, body=body
  ROOT r = {B} get-tuple-element(w), index=1
}}"""
    module = parse_hlo(text)
    arrays = _inputs(module, seed=7)
    compiled = compile_hlo(text)
    _check(compiled(to_torch(arrays[0], "bf16")), evaluate(module, *arrays), module)


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
def test_conditional_and_call_pass_tiled_values_through(fuse):
    text = f"""HloModule m
neg {{
  p = {B} parameter(0)
  ROOT n = {B} negate(p)
}}
ab {{
  p = {B} parameter(0)
  ROOT n = {B} abs(p)
}}
ENTRY e {{
  s = pred[] parameter(0)
  a = {B} parameter(1)
  c = {B} conditional(s, a, a), true_computation=neg, false_computation=ab
  ROOT k = {B} call(c), to_apply=neg
}}"""
    module = parse_hlo(text)
    compiled = compile_hlo(text, fuse=fuse)
    x = _inputs(module, seed=11)[1]
    for selector in (True, False):
        arrays = [np.array(selector), x]
        got = compiled(torch.tensor(selector), to_torch(x, "bf16"))
        _check(got, evaluate(module, *arrays), module)


@pytest.mark.parametrize("fuse", [True, False], ids=["fused", "unfused"])
def test_a_reduce_of_nothing_into_a_tiled_result_is_packed_on_the_host(fuse):
    text = f"""HloModule m
{MAX_F32}
ENTRY e {{
  z = f32[0,130]{{1,0:T(8,128)}} parameter(0)
  i = f32[] constant(-inf)
  ROOT r = f32[130]{{0:T(256)}} reduce(z, i), dimensions={{0}}, to_apply=mf
}}"""
    module = parse_hlo(text)
    compiled = compile_hlo(text, fuse=fuse)
    assert compiled.fusions == {}
    empty = np.zeros((0, 130), np.float32)
    _check(compiled(torch.from_numpy(empty)), evaluate(module, empty), module)
    (physical,) = compiled(torch.from_numpy(empty), physical_outputs=True)
    assert physical.shape == (256,) and bool((physical[130:] == 0).all())


def test_call_with_a_different_layout_is_refused_at_compile_time():
    text = f"""HloModule m
f {{
  p = bf16[37,300] parameter(0)
  ROOT n = bf16[37,300] negate(p)
}}
ENTRY e {{
  a = {B} parameter(0)
  ROOT c = bf16[37,300] call(a), to_apply=f
}}"""
    with pytest.raises(UnsupportedOpError, match="different layouts") as info:
        compile_hlo(text, fuse=False)  # the fusion pass would inline the call
    assert info.value.line == 8 and info.value.where == "c"


def test_a_bitcast_out_of_a_tiled_layout_is_refused_with_the_reason():
    text = f"""HloModule m
ENTRY e {{
  a = {B} parameter(0)
  ROOT r = bf16[37,300]{{1,0}} bitcast(a)
}}"""
    with pytest.raises(UnsupportedOpError, match="tiled or packed layout") as info:
        compile_hlo(text)
    assert info.value.line == 4


def test_a_bitcast_to_the_same_tiled_shape_is_the_buffer_itself():
    text = f"""HloModule m
ENTRY e {{
  a = {B} parameter(0)
  ROOT r = {B} bitcast(a)
}}"""
    compiled = compile_hlo(text)
    assert compiled.fusions == {}
    x = torch.randn(37, 300).to(torch.bfloat16)
    (out,) = compiled(x)
    assert torch.equal(out.view(torch.int16), x.view(torch.int16))


def test_wrong_arguments_name_both_accepted_forms():
    compiled = compile_hlo(MODULES["bf16_elementwise"])
    x = torch.zeros(37, 300, dtype=torch.bfloat16)
    with pytest.raises(EvaluationError) as info:
        compiled(x, torch.zeros(7680, dtype=torch.int32))
    message = str(info.value)
    assert "parameter 1 (%b)" in message and "torch.bfloat16 [37, 300]" in message \
        and "torch.uint32 [7680]" in message
    with pytest.raises(EvaluationError, match="shape"):
        compiled(x, torch.zeros(37, 301, dtype=torch.bfloat16))


def test_fusion_compile_run_checks_a_tiled_module(tmp_path, monkeypatch, capsys):
    from triton_backend.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiled.hlo").write_text(MODULES["pred_logic"])
    assert main(["run", "tiled.hlo", "--check"]) == 0
    out = capsys.readouterr().out
    assert "check passed" in out and "o0: pred[40,130]" in out


def test_physical_buffer_sizes_match_the_packer():
    for text in (B, S, P, F):
        from fusion.text.parser import parse_shape

        shape = parse_shape(text)
        assert isinstance(shape, ArrayShape)
        packed = pack_tensor(to_torch(random_array(shape, np.random.default_rng(0)), shape.dtype),
                             shape.layout, shape.dtype)
        assert physical_buffer(shape) == (packed.dtype, packed.numel())
