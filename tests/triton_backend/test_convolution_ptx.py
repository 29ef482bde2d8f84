"""Implicit-GEMM convolution kernels compile for sm_80 and sm_90, use the tensor cores for
16-bit and s8 operands (``mma`` / ``wgmma``) and then do not spill (no GPU needed).  The
exact f32 kernel (FMA loop, no tensor cores) only has to compile.

The kernels are generated here (under the interpreter) and compiled by the process's compile
child, as ``test_dot_fusion_ptx`` does for dots.
"""
from __future__ import annotations

from fusion.text.parser import parse_hlo
from tests.triton_backend.test_dot_fusion_ptx import ptx_counts, requires_ptxas
from triton_backend.templates.conv.driver import compile_conv_fusion

# (operand type, result type, lhs, rhs, result, attributes): a ResNet-like 3x3 conv with a
# bias + relu epilogue, a strided 1-D one, the lhs-dilated form of a gradient, a depthwise
# conv and a 3-D one.
CASES = [
    ("bf16", "bf16", "8,16,16,64", "3,3,64,64", "8,16,16,64",
     "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f", True),
    ("f16", "f32", "8,64,128", "5,64,128", "8,30,128",
     "window={size=5 stride=2}, dim_labels=b0f_0io->b0f", False),
    ("bf16", "f32", "8,8,8,64", "3,3,64,64", "8,16,16,64",
     "window={size=3x3 pad=1_2x1_2 lhs_dilate=2x2}, dim_labels=b01f_01oi->b01f", False),
    ("f16", "f16", "8,16,16,64", "3,3,16,64", "8,16,16,64",
     "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, feature_group_count=4", False),
    ("s8", "s32", "4,8,8,8,32", "3,3,3,32,64", "4,6,6,6,64",
     "window={size=3x3x3}, dim_labels=b012f_012io->b012f", False),
    ("f32", "f32", "8,16,16,32", "3,3,32,64", "8,16,16,64",
     "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f", False),
]


def conv_module(dtype, out, lhs, rhs, result, attrs, epilogue):
    feature = result.split(",")[-1]
    body = (f"  x = {dtype}[{lhs}] parameter(0)\n  w = {dtype}[{rhs}] parameter(1)\n"
            f"  c = {out}[{result}] convolution(x, w), {attrs}\n")
    if epilogue:
        body += (f"  b = {out}[{feature}] parameter(2)\n"
                 f"  bb = {out}[{result}] broadcast(b), dimensions={{{len(result.split(',')) - 1}}}\n"
                 f"  a = {out}[{result}] add(c, bb)\n  z = {out}[] constant(0)\n"
                 f"  zz = {out}[{result}] broadcast(z), dimensions={{}}\n"
                 f"  ROOT r = {out}[{result}] maximum(a, zz)\n")
    else:
        body = body.replace("  c = ", "  ROOT c = ")
    params = [f"{dtype}[{lhs}]", f"{dtype}[{rhs}]"] + ([f"{out}[{feature}]"] if epilogue else [])
    entry = "\n".join(f"  p{i} = {p} parameter({i})" for i, p in enumerate(params))
    args = ", ".join(f"p{i}" for i in range(len(params)))
    return parse_hlo(f"HloModule m\nf {{\n{body}}}\nENTRY e {{\n{entry}\n"
                     f"  ROOT r = {out}[{result}] fusion({args}), kind=kOutput, calls=f\n}}\n")


@requires_ptxas
def test_conv_kernels_use_tensor_cores_without_spills_on_sm80_and_sm90():
    requests = []
    for case in CASES:
        module = conv_module(*case)
        path = str(compile_conv_fusion(module, "r", tile_sizes=(64, 64, 32)).kernel_path)
        requests += [[path, 80], [path, 90]]
    reports = ptx_counts(requests)
    for case, sm80, sm90 in zip(CASES, reports[0::2], reports[1::2]):
        if case[0] == "f32":  # exact f32 ("ieee"): no tensor cores, by design
            assert sm80["mma"] == 0 and sm90["wgmma"] == 0
            continue
        assert sm80["spills"] == 0 and sm90["spills"] == 0, (case, sm80, sm90)
        assert sm80["mma"] > 0, (case, sm80)
        assert sm90["wgmma"] + sm90["mma"] > 0, (case, sm90)

