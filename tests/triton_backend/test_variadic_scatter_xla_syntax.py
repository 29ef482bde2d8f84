"""Variadic scatter written as XLA's own tests write it, run three ways (XLA on the same text,
the reference evaluator, ``compile_hlo`` under the interpreter).

XLA's tests (``scatter_simplifier_test.cc``, ``scatter_expander_test.cc``) give the combiner's
root without a shape, ``ROOT tuple = tuple(p2, p3)``, and spread the operand list and the
attributes over several lines; XLA's parser infers a shape it may leave out
(``CanInferShape``).  The parser used to stop there with "expected a shape".  It now infers the
shape of ``tuple``, ``get-tuple-element`` and the elementwise ops other than conversions from
their operands (``fusion.text.implied_shapes``), and refuses any other op without one, at the
opcode, as before.  The programs below are of the kind of those tests (two or more operands
and updates, a tuple-shaped result, mixed element types, scalar updates, a combiner that
combines), not copies of them.
"""
from __future__ import annotations

import numpy as np
import pytest

from fusion.errors import HloParseError
from fusion.ir.shape import ArrayShape, TupleShape
from fusion.text.parser import parse_hlo
from fusion.text.printer import print_hlo

pytest.importorskip("jax")
from tests.conformance.xla_oracle import run_xla  # noqa: E402
from tests.triton_backend.xla_three_way import compare_three_ways  # noqa: E402

RNG = np.random.default_rng(4)

# Two f32 operands, rows replaced by the updates (the combiner keeps the update).
REPLACE_ROWS = """
    HloModule variadic_scatter_rows

    keep_updates {
      old0 = f32[] parameter(0)
      old1 = f32[] parameter(1)
      new0 = f32[] parameter(2)
      new1 = f32[] parameter(3)
      ROOT both = tuple(new0, new1)
    }

    ENTRY main {
      first = f32[5,4] parameter(0)
      second = f32[5,4] parameter(1)
      rows = s32[3] parameter(2)
      first_updates = f32[3,4] parameter(3)
      second_updates = f32[3,4] parameter(4)
      ROOT scatter = (f32[5,4], f32[5,4]) scatter(first, second, rows,
                                                   first_updates, second_updates),
          to_apply=keep_updates,
          update_window_dims={1},
          inserted_window_dims={0},
          scatter_dims_to_operand_dims={0},
          index_vector_dim=1
    }
"""

# Mixed element types, operands made in the module, one scalar update each.
MIXED_TYPES = """
    HloModule variadic_scatter_mixed

    keep_updates {
      i0 = s32[] parameter(0)
      f0 = f32[] parameter(1)
      i1 = s32[] parameter(2)
      f1 = f32[] parameter(3)
      ROOT pair = tuple(i1, f1)
    }

    ENTRY main {
      ints = s32[6] iota(), iota_dimension=0
      floats = f32[6] constant({1, 3, 5, 7, 9, 11})
      where = s32[1] parameter(0)
      new_int = s32[] constant(-1)
      new_float = f32[] constant(0.5)
      ROOT scatter = (s32[6]{0}, f32[6]{0}) scatter(ints, floats, where, new_int, new_float),
        update_window_dims={}, inserted_window_dims={0},
        scatter_dims_to_operand_dims={0}, index_vector_dim=0,
        to_apply=keep_updates
    }
"""

# A combiner that combines, every value of it written without a shape; repeated indices.
COMBINING = """
    HloModule variadic_scatter_combining

    sum_and_max {
      a0 = f32[] parameter(0)
      a1 = s32[] parameter(1)
      b0 = f32[] parameter(2)
      b1 = s32[] parameter(3)
      sum = add(a0, b0)
      top = maximum(a1, b1)
      ROOT out = tuple(sum, top)
    }

    ENTRY main {
      values = f32[8,3] parameter(0)
      counts = s32[8,3] parameter(1)
      at = s32[10,1] parameter(2)
      more_values = f32[10,3] parameter(3)
      more_counts = s32[10,3] parameter(4)
      ROOT scatter = (f32[8,3], s32[8,3]) scatter(values, counts, at, more_values,
                                                   more_counts),
          to_apply=sum_and_max, update_window_dims={1}, inserted_window_dims={0},
          scatter_dims_to_operand_dims={0}, index_vector_dim=1
    }
"""


def test_rows_replaced_in_two_operands():
    module = parse_hlo(REPLACE_ROWS)
    assert module.computation("keep_updates").root.shape == TupleShape(
        (ArrayShape("f32", ()), ArrayShape("f32", ())))
    args = (RNG.standard_normal((5, 4)).astype(np.float32),
            RNG.standard_normal((5, 4)).astype(np.float32), np.int32([4, 0, 2]),
            RNG.standard_normal((3, 4)).astype(np.float32),
            RNG.standard_normal((3, 4)).astype(np.float32))
    compare_three_ways(REPLACE_ROWS, *args)


@pytest.mark.parametrize("where", [0, 3, 5])
def test_mixed_types_and_scalar_updates(where):
    compiled = compare_three_ways(MIXED_TYPES, np.int32([where]))
    assert compiled.source_module.entry.root.shape.elements[0].dtype == "s32"


def test_a_combiner_written_without_shapes_combines_repeated_indices():
    args = (RNG.standard_normal((8, 3)).astype(np.float32),
            RNG.integers(-5, 5, (8, 3)).astype(np.int32),
            np.int32([[1], [6], [1], [0], [6], [6], [3], [1], [7], [2]]),
            RNG.standard_normal((10, 3)).astype(np.float32),
            RNG.integers(-5, 5, (10, 3)).astype(np.int32))
    compare_three_ways(COMBINING, *args, rtol=1e-6)


def test_the_printed_module_writes_the_shapes_and_xla_runs_it_alike():
    printed = print_hlo(parse_hlo(COMBINING))
    assert "out = (f32[], s32[]) tuple(sum, top)" in printed
    assert parse_hlo(printed) == parse_hlo(COMBINING)
    args = (np.ones((8, 3), np.float32), np.zeros((8, 3), np.int32), np.int32([[2]] * 10),
            np.ones((10, 3), np.float32), np.arange(30, dtype=np.int32).reshape(10, 3))
    for want, got in zip(run_xla(COMBINING, *args), run_xla(printed, *args)):
        np.testing.assert_array_equal(got, want)


IMPLIED = """HloModule implied
ENTRY e {
  x = f32[2,3] parameter(0)
  p = pred[] parameter(1)
  c = c64[2,3] parameter(2)
  lt = compare(x, x), direction=LT
  finite = is-finite(x)
  pick = select(p, x, x)
  mag = abs(c)
  t = tuple(lt, pick)
  g = get-tuple-element(t), index=1
  ROOT r = tuple(g, finite, mag)
}"""


def test_the_shapes_xla_infers_are_inferred_from_the_operands():
    entry = parse_hlo(IMPLIED).entry
    shapes = {name: str(entry.instruction(name).shape)
              for name in ("lt", "finite", "pick", "mag", "t", "g", "r")}
    assert shapes == {"lt": "pred[2,3]", "finite": "pred[2,3]", "pick": "f32[2,3]",
                      "mag": "f32[2,3]", "t": "(pred[2,3], f32[2,3])", "g": "f32[2,3]",
                      "r": "(f32[2,3], pred[2,3], f32[2,3])"}


@pytest.mark.parametrize("line,column,message", [
    ("  ROOT y = convert(x)", 12,
     "4:12: expected a shape: convert cannot leave it out (only tuple, get-tuple-element and "
     "elementwise ops other than conversions can)"),
    ("  ROOT y = reduce-precision(x), exponent_bits=5, mantissa_bits=2", 12,
     "4:12: expected a shape: reduce-precision cannot leave it out"),
    ("  ROOT y = negate(later)\n  later = f32[2] parameter(1)", 3,
     "4:3: cannot infer the shape of negate 'y': its operand 'later' is not defined before it"),
])
def test_an_op_that_cannot_leave_its_shape_out_is_a_located_error(line, column, message):
    with pytest.raises(HloParseError) as info:
        parse_hlo("HloModule m\nENTRY e {\n  x = f32[2] parameter(0)\n" + line + "\n}")
    assert (info.value.line, info.value.column) == (4, column)
    assert str(info.value).startswith(message)
