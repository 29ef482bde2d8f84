"""The VJP of a linear op is its transpose: ``<vjp(ct), x> == <ct, f(x)>`` for every input
``x`` and cotangent ``ct`` (hypothesis draws the shapes, the op's attributes and the values;
f64, the reference evaluator)."""
from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fusion.autodiff import vjp
from fusion.evaluator import evaluate
from fusion.text.parser import parse_hlo
from fusion.shapes.verifier import verify_module
from fusion.shapes.inference import infer_shape

ADD = """add_f64 {
  a = f64[] parameter(0)
  b = f64[] parameter(1)
  ROOT r = f64[] add(a, b)
}
"""


def _dims(shape) -> str:
    return ",".join(str(d) for d in shape)


@st.composite
def linear_programs(draw):
    """``(hlo_text, input shape, extra inputs)`` of one linear op applied to parameter 0."""
    rank = draw(st.integers(1, 3))
    shape = tuple(draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank)))
    kind = draw(st.sampled_from(["transpose", "slice", "pad", "broadcast", "reduce", "reverse",
                                 "concatenate", "reshape", "dot", "reduce-window", "gather"]))
    extra: list[np.ndarray] = []
    params = f"  x = f64[{_dims(shape)}] parameter(0)\n"
    if kind == "transpose":
        perm = draw(st.permutations(range(rank)))
        op, attrs = "transpose(x)", f"dimensions={{{_dims(perm)}}}"
    elif kind == "slice":
        parts = []
        for d in shape:
            start = draw(st.integers(0, d - 1))
            stride = draw(st.integers(1, 3))
            parts.append(f"[{start}:{draw(st.integers(start + 1, d))}:{stride}]")
        op, attrs = "slice(x)", "slice={" + ", ".join(parts) + "}"
    elif kind == "pad":
        parts = []
        for d in shape:
            interior = draw(st.integers(0, 2))
            size = d + (d - 1) * interior
            low = draw(st.integers(-(size - 1) // 2, 2))
            high = draw(st.integers(-(size - 1) // 2, 2))
            parts.append(f"{low}_{high}_{interior}")
        params += "  z = f64[] constant(0)\n"
        op, attrs = "pad(x, z)", "padding=" + "x".join(parts)
    elif kind == "broadcast":
        out_rank = rank + draw(st.integers(0, 2))
        kept = sorted(draw(st.permutations(range(out_rank)))[:rank])
        kept = draw(st.permutations(kept))
        out = [draw(st.integers(1, 3)) for _ in range(out_rank)]
        for i, d in enumerate(kept):
            out[d] = shape[i]
        op, attrs = "broadcast(x)", f"dimensions={{{_dims(kept)}}}"
        return params, op, attrs, tuple(out), shape, extra
    elif kind == "reduce":
        dims = sorted(set(draw(st.lists(st.integers(0, rank - 1), min_size=1, max_size=rank))))
        params += "  z = f64[] constant(0)\n"
        op, attrs = "reduce(x, z)", f"dimensions={{{_dims(dims)}}}, to_apply=add_f64"
    elif kind == "reverse":
        dims = sorted(set(draw(st.lists(st.integers(0, rank - 1), max_size=rank))))
        op, attrs = "reverse(x)", f"dimensions={{{_dims(dims)}}}"
    elif kind == "concatenate":
        dim = draw(st.integers(0, rank - 1))
        op, attrs = "concatenate(x, x, x)", f"dimensions={{{dim}}}"
    elif kind == "reshape":
        return params, "reshape(x)", "", (math.prod(shape),), shape, extra
    elif kind == "dot":
        k = draw(st.integers(1, 4))
        params += f"  w = f64[{shape[-1]},{k}] parameter(1)\n"
        rng = np.random.default_rng(draw(st.integers(0, 99)))
        extra.append(rng.standard_normal((shape[-1], k)))
        op, attrs = "dot(x, w)", f"lhs_contracting_dims={{{rank - 1}}}, rhs_contracting_dims={{0}}"
    elif kind == "reduce-window":
        sizes = [draw(st.integers(1, d)) for d in shape]
        strides = [draw(st.integers(1, 2)) for _ in shape]
        pads = [f"{draw(st.integers(0, 1))}_{draw(st.integers(0, 1))}" for _ in shape]
        params += "  z = f64[] constant(0)\n"
        op = "reduce-window(x, z)"
        attrs = (f"window={{size={'x'.join(map(str, sizes))} stride={'x'.join(map(str, strides))} "
                 f"pad={'x'.join(pads)}}}, to_apply=add_f64")
    else:  # gather rows of x (along dim 0), clamped where out of bounds
        count = draw(st.integers(1, 4))
        rows = draw(st.lists(st.integers(-1, shape[0]), min_size=count, max_size=count))
        params += f"  i = s32[{count},1] parameter(1)\n"
        extra.append(np.array(rows, np.int32).reshape(count, 1))
        offset = ",".join(str(d) for d in range(1, rank))
        op = "gather(x, i)"
        attrs = (f"offset_dims={{{offset}}}, collapsed_slice_dims={{0}}, start_index_map={{0}}, "
                 f"index_vector_dim=1, slice_sizes={{1{''.join(',' + str(d) for d in shape[1:])}}}")
    return params, op, attrs, None, shape, extra


def _module(params: str, op: str, attrs: str, out_shape, in_shape):
    if out_shape is None:
        # The result shape, from shape inference on a first parse with a placeholder.
        probe = parse_hlo(f"HloModule t\n{ADD}\nENTRY e {{\n{params}  ROOT y = f64[] "
                          f"{op}{', ' + attrs if attrs else ''}\n}}\n")
        root = probe.entry.root
        shapes = [probe.entry.instruction(o).shape for o in root.operands]
        out_shape = infer_shape(root, shapes, probe).dims
    text = (f"HloModule t\n{ADD}\nENTRY e {{\n{params}  ROOT y = f64[{_dims(out_shape)}] "
            f"{op}{', ' + attrs if attrs else ''}\n}}\n")
    module = parse_hlo(text)
    verify_module(module)
    return module


@settings(max_examples=20)
@given(linear_programs(), st.integers(0, 2**16))
def test_vjp_of_a_linear_op_is_its_transpose(program, seed: int) -> None:
    params, op, attrs, out_shape, in_shape, extra = program
    module = _module(params, op, attrs, out_shape, in_shape)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(in_shape)
    (y,) = evaluate(module, x, *extra)
    ct = rng.standard_normal(y.shape)
    (g,) = evaluate(vjp(module, [0]), x, *extra, ct)
    lhs, rhs = float(np.sum(g * x)), float(np.sum(ct * y))
    assert abs(lhs - rhs) <= 1e-9 * max(1.0, abs(rhs)), (lhs, rhs, op, attrs)
