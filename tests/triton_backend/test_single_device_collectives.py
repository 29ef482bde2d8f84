"""Collectives on one device, where XLA defines them: all-reduce of one value is that value,
all-gather / reduce-scatter / all-to-all along their dimension with one participant are the
identity, a collective-permute gives its operand for the pair ``{0,0}`` and zeros when no pair
targets the device.  Modules run on one device here, so a module whose groups name another
device, or whose header asks for several, is refused at the op's line and column.

The programs come from JAX (``shard_map`` over a one-device mesh: ``psum``, ``pmax``,
``all_gather``, ``psum_scatter``, ``ppermute``, one inside a ``fori_loop``), or are written as
XLA writes them (``replica_groups={}``, ``{{0}}``, the iota form ``[1,1]<=[1]``, variadic
all-reduce, the ``-start``/``-done`` pairs); each runs three ways, XLA on the same text, the
reference evaluator and ``compile_hlo`` under the interpreter, and JAX's programs against
JAX's own result too.  The one exception is the tuple form of ``all-to-all`` (no
``dimensions``): XLA's CPU client aborts the process on it, so it is checked against XLA's
documented semantics (with one participant, each operand is its own result) in NumPy.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from fusion.errors import EvaluationError, UnsupportedOpError
from fusion.evaluator import evaluate
from fusion.shapes.verifier import verify_module
from fusion.text.parser import parse_hlo
from triton_backend import compile_hlo

jax = pytest.importorskip("jax")
from jax import lax  # noqa: E402
from jax.sharding import Mesh, PartitionSpec  # noqa: E402

from tests.triton_backend.xla_three_way import compare_three_ways, run_compiled  # noqa: E402

RNG = np.random.default_rng(5)


def _one_device(f):
    mesh = Mesh(np.array(jax.devices()[:1]), ("i",))
    return jax.jit(jax.shard_map(f, mesh=mesh, in_specs=PartitionSpec("i"),
                                 out_specs=PartitionSpec("i")))


JAX_PROGRAMS = {
    "psum": lambda x: lax.psum(x, "i"),
    "pmax": lambda x: lax.pmax(x, "i"),
    "all_gather": lambda x: lax.all_gather(x, "i", axis=1, tiled=True),
    "psum_scatter": lambda x: lax.psum_scatter(x, "i", scatter_dimension=1, tiled=True),
    "ppermute": lambda x: lax.ppermute(x, "i", perm=[(0, 0)]),
    "loop": lambda x: lax.fori_loop(
        0, 3, lambda k, c: lax.psum(c, "i") + lax.ppermute(c, "i", [(0, 0)]), x),
}
COLLECTIVE_OF = {"psum": "all-reduce(", "pmax": "all-reduce(", "all_gather": "all-gather(",
                 "psum_scatter": "reduce-scatter(", "ppermute": "collective-permute(",
                 "loop": "all-reduce("}


@pytest.mark.parametrize("dtype", [np.float32, np.int32, ml_dtypes.bfloat16])
@pytest.mark.parametrize("name", sorted(JAX_PROGRAMS))
def test_jax_collectives_on_one_device(name, dtype):
    x = (RNG.standard_normal((4, 6)) * 8).astype(dtype)
    f = _one_device(JAX_PROGRAMS[name])
    text = f.lower(x).as_text(dialect="hlo")
    assert COLLECTIVE_OF[name] in text
    tolerance = 1e-2 if dtype is ml_dtypes.bfloat16 else 1e-6
    compare_three_ways(text, x, rtol=tolerance, atol=tolerance)
    want = np.asarray(f(x))
    np.testing.assert_array_equal(run_compiled(text, x)[0], want)


ADD = """add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
"""


def _module(body: str, header: str = "") -> str:
    return f"HloModule collectives{header}\n{ADD}\nENTRY e {{\n  x = f32[3,8] parameter(0)\n" \
           f"  y = f32[5] parameter(1)\n{body}\n}}"


XLA_FORMS = {
    "all-reduce, no groups": "  ROOT r = f32[3,8] all-reduce(x), replica_groups={}, to_apply=add",
    "all-reduce, {{0}}, channel": "  ROOT r = f32[3,8] all-reduce(x), channel_id=7, "
                                  "replica_groups={{0}}, use_global_device_ids=true, to_apply=add",
    "all-reduce, iota groups": "  ROOT r = f32[3,8] all-reduce(x), replica_groups=[1,1]<=[1], "
                               "to_apply=add",
    "all-reduce, variadic": "  ROOT r = (f32[3,8], f32[5]) all-reduce(x, y), replica_groups={}, "
                            "to_apply=add",
    "all-gather": "  ROOT r = f32[3,8] all-gather(x), replica_groups={{0}}, dimensions={1}",
    "all-gather, variadic": "  ROOT r = (f32[3,8], f32[5]) all-gather(x, y), replica_groups={}, "
                            "dimensions={0}",
    "reduce-scatter": "  ROOT r = f32[3,8] reduce-scatter(x), replica_groups={}, "
                      "dimensions={0}, to_apply=add",
    "all-to-all": "  ROOT r = f32[3,8] all-to-all(x), replica_groups={{0}}, dimensions={1}",
    "collective-permute to itself": "  ROOT r = f32[3,8] collective-permute(x), channel_id=2, "
                                    "source_target_pairs={{0,0}}",
    "collective-permute from nobody": "  ROOT r = f32[3,8] collective-permute(x), "
                                      "source_target_pairs={}",
    "all-reduce-start/done": "  s = f32[3,8] all-reduce-start(x), replica_groups={}, "
                             "to_apply=add\n  ROOT r = f32[3,8] all-reduce-done(s)",
    "all-gather-start/done": "  s = (f32[3,8], f32[3,8]) all-gather-start(x), "
                             "replica_groups={{0}}, dimensions={0}\n"
                             "  ROOT r = f32[3,8] all-gather-done(s)",
    "collective-permute-start/done": "  s = (f32[3,8], f32[3,8], u32[], u32[]) "
                                     "collective-permute-start(x), source_target_pairs={{0,0}}\n"
                                     "  ROOT r = f32[3,8] collective-permute-done(s)",
    "between kernels": "  e = f32[3,8] exponential(x)\n  a = f32[3,8] all-reduce(e), "
                       "replica_groups={}, to_apply=add\n  ROOT r = f32[3,8] negate(a)",
}


@pytest.mark.parametrize("form", sorted(XLA_FORMS))
def test_xla_forms_on_one_device(form):
    x = RNG.standard_normal((3, 8)).astype(np.float32)
    y = RNG.standard_normal(5).astype(np.float32)
    compiled = compare_three_ways(_module(XLA_FORMS[form]), x, y)
    got = run_compiled(_module(XLA_FORMS[form]), x, y, compiled=compiled)
    if form == "collective-permute from nobody":
        np.testing.assert_array_equal(got[0], np.zeros_like(x))
    elif form != "between kernels":
        np.testing.assert_array_equal(got[0], x)


def test_the_tuple_form_of_all_to_all_against_its_semantics():
    """XLA's CPU client aborts on this form; with one participant each operand is its result."""
    text = _module("  ROOT r = (f32[3,8]) all-to-all(x), replica_groups={{0}}")
    x = RNG.standard_normal((3, 8)).astype(np.float32)
    y = np.zeros(5, np.float32)
    (evaluated,) = evaluate(parse_hlo(text), x, y)
    (compiled,) = run_compiled(text, x, y)
    np.testing.assert_array_equal(evaluated, x)
    np.testing.assert_array_equal(compiled, x)


NEEDS_TWO = "needs 2 devices, one process per device (fusion-compile run --world-size 2, or " \
            "compile_hlo under torch.distributed); on one device only a group of device 0 " \
            "alone is defined (replica_groups={} or {{0}})"
SEVERAL_DEVICES = {
    "two replicas": ("  ROOT r = f32[3,8] all-reduce(x), replica_groups={{0,1}}, to_apply=add",
                     "", "all-reduce with replica_groups={{0,1}} names devices 0, 1: it "
                     + NEEDS_TWO),
    "two groups of one": ("  ROOT r = f32[3,8] all-reduce(x), replica_groups={{0},{1}}, "
                          "to_apply=add", "", "all-reduce with replica_groups={{0},{1}} names "
                          "devices 0, 1: it " + NEEDS_TWO),
    "iota groups": ("  ROOT r = f32[3,16] all-gather(x), replica_groups=[1,2]<=[2], "
                    "dimensions={1}", "", "all-gather with replica_groups={{0,1}} names "
                    "devices 0, 1: it " + NEEDS_TWO),
    "a pair to another device": ("  ROOT r = f32[3,8] collective-permute(x), "
                                 "source_target_pairs={{0,1},{1,0}}", "",
                                 "collective-permute with source_target_pairs={{0,1},{1,0}} "
                                 "names devices 0, 1: it " + NEEDS_TWO),
    "a header with two replicas": ("  ROOT r = f32[3,8] all-reduce(x), replica_groups={}, "
                                   "to_apply=add", ", replica_count=2",
                                   "all-reduce communicates between the 2 devices the module "
                                   "asks for (replica_count=2); run it on 2 processes "
                                   "(fusion-compile run --world-size 2, or compile_hlo under "
                                   "torch.distributed)"),
}


@pytest.mark.parametrize("case", sorted(SEVERAL_DEVICES))
def test_a_collective_over_several_devices_is_refused_where_it_is(case):
    body, header, message = SEVERAL_DEVICES[case]
    text = _module(body, header)
    module = parse_hlo(text)
    verify_module(module)  # valid HLO: XLA accepts it on several devices
    x, y = np.zeros((3, 8), np.float32), np.zeros(5, np.float32)
    with pytest.raises(EvaluationError) as evaluated:
        evaluate(module, x, y)
    assert str(evaluated.value) == f"11:3: {message} (in {module.entry.root.opcode} %r)"
    with pytest.raises(UnsupportedOpError) as compiled:
        compile_hlo(text)
    assert str(compiled.value) == (f"11:3: op {module.entry.root.opcode} (%r) in computation e "
                                   f"is not covered by the Triton path: {message} (in r)")
