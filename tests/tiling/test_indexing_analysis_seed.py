"""Every unfused-op example of the seed (indexing_analysis.ja.txt), text for text, in both
directions: the HLO is the seed's (a result shape added where the seed omits it), and the
expected maps are the seed's printed maps."""
from __future__ import annotations

import pytest

from tests.tiling.indexing_seed_helpers import MAX, module_of, normalize, only, texts
from tiling import input_to_output_indexing, output_to_input_indexing
from tiling.indexing_analysis import input_to_output_indexing_per_output


def o2i(body, extra=""):
    m = module_of(body, extra)
    return output_to_input_indexing(m.entry.root, m)


def i2o(body, k, extra=""):
    m = module_of(body, extra)
    return input_to_output_indexing(m.entry.root, k, m)


def check(maps, expected: str):
    assert texts(maps) == [normalize(expected)]


ELEMENTWISE = """
  p0 = f32[10, 20] parameter(0)
  p1 = f32[10, 20] parameter(1)
  add = f32[10, 20] add(p0, p1)
"""
ELEMENTWISE_MAP = """
(d0, d1) -> (d0, d1)
domain:
d0 in [0, 9]
d1 in [0, 19]
"""


@pytest.mark.parametrize("k", [0, 1])
def test_elementwise(k):
    check(o2i(ELEMENTWISE)[k], ELEMENTWISE_MAP)
    check(i2o(ELEMENTWISE, k), ELEMENTWISE_MAP)


BROADCAST = """
p0 = f32[20] parameter(0)
bc0 = f32[10, 20, 30] broadcast(p0), dimensions={1}
"""


def test_broadcast():
    check(o2i(BROADCAST)[0], """
(d0, d1, d2) -> (d1)
domain:
d0 in [0, 9]
d1 in [0, 19]
d2 in [0, 29]
""")
    check(i2o(BROADCAST, 0), """
(d0)[s0, s1] -> (s0, d0, s1)
domain:
d0 in [0, 19]
s0 in [0, 9]
s1 in [0, 29]
""")


@pytest.mark.parametrize("body", ["c = f32[3] constant({1, 2, 3})",
                                  "i = s32[4, 5] iota(), iota_dimension=1"])
def test_constant_and_iota_have_no_operands(body):
    assert o2i(body) == ()


DYNAMIC_SLICE = """
src = s32[2,2,258] parameter(0)
of1 = s32[] parameter(1)
of2 = s32[] parameter(2)
of3 = s32[] parameter(3)
ds = s32[1,2,32] dynamic-slice(s32[2,2,258] src, s32[] of1, s32[] of2, s32[] of3), dynamic_slice_sizes={1, 2, 32}
"""


def test_dynamic_slice():
    maps = o2i(DYNAMIC_SLICE)
    check(maps[0], """
(d0, d1, d2)[s0, s1, s2] -> (d0 + s0, d1 + s1, d2 + s2)
domain:
d0 in [0, 0]
d1 in [0, 1]
d2 in [0, 31]
s0 in [0, 1]
  hlo: of1 = s32[] parameter(1)
  (d0, d1, d2)  -> ()
s1 in [0, 0]
  hlo: of2 = s32[] parameter(2)
  (d0, d1, d2)  -> ()
s2 in [0, 226]
  hlo: of3 = s32[] parameter(3)
  (d0, d1, d2) -> ()
""")
    for k in (1, 2, 3):
        check(maps[k], """
(d0, d1, d2)  -> ()
domain:
d0 in [0, 0]
d1 in [0, 1]
d2 in [0, 31]
""")


DUS = """
src = s32[20,30] parameter(0)
upd = s32[5,10] parameter(1)
of1 = s32[] parameter(2)
of2 = s32[] parameter(3)
dus = s32[20,30] dynamic-update-slice(
    s32[20,30] src, s32[5,10] upd, s32[] of1, s32[] of2)
"""


def test_dynamic_update_slice():
    maps = o2i(DUS)
    check(maps[0], """
(d0, d1) -> (d0, d1)
domain:
d0 in [0, 19]
d1 in [0, 29]
""")
    check(maps[1], """
(d0, d1)[s0, s1]  -> (d0 - s0, d1 - s1)
domain:
d0 in [0, 19]
d1 in [0, 29]
s0 in [0, 15]
  hlo: of1 = s32[] parameter(2)
  (d0, d1)  -> ()
s1 in [0, 20]
  hlo: of2 = s32[] parameter(3)
  (d0, d1)  -> ()
""")
    for k in (2, 3):
        check(maps[k], """
(d0, d1)  -> ()
domain:
d0 in [0, 19]
d1 in [0, 29]
""")


GATHER = """
operand = f32[33,76,70] parameter(0)
indices = s32[1806,2]{1,0} parameter(1)
gather = f32[1806,7,8,4] gather(operand, indices),
  offset_dims={1,2,3},
  collapsed_slice_dims={},
  start_index_map={0,1},
  index_vector_dim=1,
  slice_sizes={7,8,4}
"""


def test_gather():
    maps = o2i(GATHER)
    check(maps[0], """
(d0, d1, d2, d3)[s0, s1] -> (d1 + s0, d2 + s1, d3)
domain:
d0 in [0, 1805]
d1 in [0, 6]
d2 in [0, 7]
d3 in [0, 3]
s0 in [0, 26]
  hlo: indices = s32[1806,2]{1,0} parameter(1)
  (d0, d1, d2, d3) -> (d0, 0)
s1 in [0, 68]
  hlo: indices = s32[1806,2]{1,0} parameter(1)
  (d0, d1, d2, d3) -> (d0, 1)
""")
    check(maps[1], """
  (d0, d1, d2, d3)[s0] -> (d0, s0)
  domain:
  d0 in [0, 1805]
  d1 in [0, 6]
  d2 in [0, 7]
  d3 in [0, 3]
  s0 in [0, 1]
""")


TRANSPOSE = """
p0 = f32[3, 12288, 6, 128] parameter(0)
transpose = f32[3, 6, 128, 12288] transpose(p0), dimensions={0, 2, 3, 1}
"""


def test_transpose():
    check(o2i(TRANSPOSE)[0], """
(d0, d1, d2, d3) -> (d0, d3, d1, d2)
domain:
d0 in [0, 2]
d1 in [0, 5]
d2 in [0, 127]
d3 in [0, 12287]
""")
    check(i2o(TRANSPOSE, 0), """
(d0, d1, d2, d3) -> (d0, d2, d3, d1)
domain:
d0 in [0, 2]
d1 in [0, 12287]
d2 in [0, 5]
d3 in [0, 127]
""")


REVERSE = """
p0 = f32[1, 17, 9, 9] parameter(0)
reverse = f32[1, 17, 9, 9] reverse(p0), dimensions={1, 2}
"""
REVERSE_MAP = """
(d0, d1, d2, d3) -> (d0, -d1 + 16, -d2 + 8, d3)
domain:
d0 in [0, 0]
d1 in [0, 16]
d2 in [0, 8]
d3 in [0, 8]
"""


def test_reverse():
    check(o2i(REVERSE)[0], REVERSE_MAP)
    check(i2o(REVERSE, 0), REVERSE_MAP)


REDUCE = """
p0 = f32[256,10] parameter(0)
p0_init = f32[] constant(-inf)
p1 = s32[256,10] parameter(1)
p1_init = s32[] constant(0)
reduce = (f32[10], s32[10]) reduce(p0, p1, p0_init, p1_init),
  dimensions={0}, to_apply=max
"""


@pytest.mark.parametrize("output", [0, 1])
def test_variadic_reduce_output_to_input(output):
    m = module_of(REDUCE, MAX)
    maps = output_to_input_indexing(m.entry.root, m, output_index=output)
    for j in (0, 1):
        check(maps[j], """
(d0)[s0] -> (s0, d0)
domain:
d0 in [0, 9]
s0 in [0, 255]
""")
        check(maps[2 + j], """
(d0) -> ()
domain:
d0 in [0, 9]
""")


@pytest.mark.parametrize("i", [0, 1])
def test_variadic_reduce_input_to_output(i):
    m = module_of(REDUCE, MAX)
    root = m.entry.root
    for per_output in input_to_output_indexing_per_output(root, i, m):
        check(per_output, """
(d0, d1) -> (d1)
domain:
d0 in [0, 255]
d1 in [0, 9]
""")
    for per_output in input_to_output_indexing_per_output(root, 2 + i, m):
        check(per_output, """
()[s0] -> (s0)
domain:
s0 in [0, 9]
""")
    check(input_to_output_indexing(root, i, m), "(d0, d1) -> (d1)\ndomain:\nd0 in [0, 255]"
                                                 "\nd1 in [0, 9]")


SLICE = """
p0 = f32[10, 20, 50] parameter(0)
slice = f32[5, 3, 25] slice(f32[10, 20, 50] p0),
  slice={[5:10:1], [3:20:7], [0:50:2]}
"""


def test_slice():
    check(o2i(SLICE)[0], """
(d0, d1, d2) -> (d0 + 5, d1 * 7 + 3, d2 * 2)
domain:
d0 in [0, 4]
d1 in [0, 2]
d2 in [0, 24]
""")
    check(i2o(SLICE, 0), """
(d0, d1, d2) -> (d0 - 5, (d1 - 3) floordiv 7, d2 floordiv 2)
domain:
d0 in [5, 9]
d1 in [3, 17]
d2 in [0, 48]
(d1 - 3) mod 7 in [0, 0]
d2 mod 2 in [0, 0]
""")


RESHAPES = [
    ("p0 = f32[4,8] parameter(0)\nreshape = f32[32] reshape(p0)",
     "(d0) -> (d0 floordiv 8, d0 mod 8)\ndomain:\nd0 in [0, 31]",
     "(d0, d1) -> (d0 * 8 + d1)\ndomain:\nd0 in [0, 3]\nd1 in [0, 7]"),
    ("p0 = f32[32] parameter(0)\nreshape = f32[4, 8] reshape(p0)",
     "(d0, d1) -> (d0 * 8 + d1)\ndomain:\nd0 in [0, 3]\nd1 in [0, 7]",
     "(d0) -> (d0 floordiv 8, d0 mod 8)\ndomain:\nd0 in [0, 31]"),
    ("p0 = f32[4,8] parameter(0)\nreshape = f32[2, 4, 4] reshape(p0)",
     """(d0, d1, d2) -> (d0 * 2 + d1 floordiv 2, d2 + (d1 mod 2) * 4)
domain:
d0 in [0, 1]
d1 in [0, 3]
d2 in [0, 3]""",
     """(d0, d1) -> (d0 floordiv 2, d1 floordiv 4 + (d0 mod 2) * 2, d1 mod 4)
domain:
d0 in [0, 3]
d1 in [0, 7]"""),
    ("p0 = f32[4, 8, 12] parameter(0)\nreshape = f32[32, 3, 4] reshape(p0)",
     """(d0, d1, d2) -> (d0 floordiv 8, d0 mod 8, d1 * 4 + d2)
domain:
d0 in [0, 31]
d1 in [0, 2]
d2 in [0, 3]""",
     """(d0, d1, d2) -> (d0 * 8 + d1, d2 floordiv 4, d2 mod 4)
domain:
d0 in [0, 3]
d1 in [0, 7]
d2 in [0, 11]"""),
]


@pytest.mark.parametrize("body,out_to_in,in_to_out", RESHAPES,
                         ids=["collapse", "expand", "generic1", "generic2"])
def test_reshape(body, out_to_in, in_to_out):
    check(o2i(body)[0], out_to_in)
    check(i2o(body, 0), in_to_out)


CONCAT = """
p0 = f32[2, 5, 7] parameter(0)
p1 = f32[2, 11, 7] parameter(1)
p2 = f32[2, 17, 7] parameter(2)
ROOT concat = f32[2, 33, 7] concatenate(f32[2, 5, 7] p0, f32[2, 11, 7] p1, f32[2, 17, 7] p2), dimensions={1}
"""


def test_concatenate():
    maps = o2i(CONCAT)
    check(maps[0], "(d0, d1, d2) -> (d0, d1, d2)\ndomain:\nd0 in [0, 1]\nd1 in [0, 4]\nd2 in [0, 6]")
    check(maps[1], "(d0, d1, d2) -> (d0, d1 - 5, d2)\ndomain:\nd0 in [0, 1]\nd1 in [5, 15]"
                   "\nd2 in [0, 6]")
    check(maps[2], "(d0, d1, d2) -> (d0, d1 - 16, d2)\ndomain:\nd0 in [0, 1]\nd1 in [16, 32]"
                   "\nd2 in [0, 6]")
    check(i2o(CONCAT, 0), "(d0, d1, d2) -> (d0, d1, d2)\ndomain:\nd0 in [0, 1]\nd1 in [0, 4]"
                          "\nd2 in [0, 6]")
    check(i2o(CONCAT, 1), "(d0, d1, d2) -> (d0, d1 + 5, d2)\ndomain:\nd0 in [0, 1]"
                          "\nd1 in [0, 10]\nd2 in [0, 6]")
    check(i2o(CONCAT, 2), "(d0, d1, d2) -> (d0, d1 + 16, d2)\ndomain:\nd0 in [0, 1]"
                          "\nd1 in [0, 16]\nd2 in [0, 6]")


DOT = """
p0 = f32[4, 128, 256] parameter(0)
p1 = f32[4, 256, 64] parameter(1)
dot = f32[4, 128, 64] dot(p0, p1),
  lhs_batch_dims={0}, rhs_batch_dims={0},
  lhs_contracting_dims={2}, rhs_contracting_dims={1}
"""


def test_dot():
    maps = o2i(DOT)
    check(maps[0], """
(d0, d1, d2)[s0] -> (d0, d1, s0)
domain:
d0 in [0, 3]
d1 in [0, 127]
d2 in [0, 63]
s0 in [0, 255]
""")
    check(maps[1], """
(d0, d1, d2)[s0] -> (d0, s0, d2)
domain:
d0 in [0, 3]
d1 in [0, 127]
d2 in [0, 63]
s0 in [0, 255]
""")
    check(i2o(DOT, 0), """
(d0, d1, d2)[s0] -> (d0, d1, s0)
domain:
d0 in [0, 3]
d1 in [0, 127]
d2 in [0, 255]
s0 in [0, 63]
""")


# The seed prints input_2 -> output as `(d0, s0, d1)` with `d1 in [0, 255]`: the contracting
# dim cannot index the output's 64-wide rhs free dim (a typo in the XLA document).  The
# correct map, `(d0, s0, d2)`, is checked here and against brute force in
# test_indexing_analysis_oracle.py.
SEED_DOT_RHS_TO_OUTPUT = """
(d0, d1, d2)[s0] -> (d0, s0, d1)
domain:
d0 in [0, 3]
d1 in [0, 255]
d2 in [0, 63]
s0 in [0, 127]
"""


def test_dot_rhs_to_output_fixes_the_seeds_typo():
    got = texts(i2o(DOT, 1))
    assert got == [normalize(SEED_DOT_RHS_TO_OUTPUT.replace("(d0, s0, d1)", "(d0, s0, d2)"))]
    assert got != [normalize(SEED_DOT_RHS_TO_OUTPUT)]


PAD = """
p0 = f32[4, 4] parameter(0)
p1 = f32[] parameter(1)
pad = f32[12, 16] pad(p0, p1), padding=1_4_1x4_8_0
"""


def test_pad():
    maps = o2i(PAD)
    check(maps[0], """
(d0, d1) -> ((d0 - 1) floordiv 2, d1 - 4)
domain:
d0 in [1, 7]
d1 in [4, 7]
(d0 - 1) mod 2 in [0, 0]
""")
    check(maps[1], """
(d0, d1) -> ()
domain:
d0 in [0, 11]
d1 in [0, 15]
""")
    check(i2o(PAD, 0), "(d0, d1) -> (d0 * 2 + 1, d1 + 4)\ndomain:\nd0 in [0, 3]\nd1 in [0, 3]")


REDUCE_WINDOW = """
c_inf = f32[] constant(-inf)
p0 = f32[1024, 514] parameter(0)
reduce-window = f32[1024, 3] reduce-window(p0, c_inf),
  window={size=1x512 pad=0_0x0_0}, to_apply=max
"""


def test_reduce_window():
    maps = o2i(REDUCE_WINDOW, MAX)
    check(maps[0], """
(d0, d1)[s0] -> (d0, d1 + s0)
domain:
d0 in [0, 1023]
d1 in [0, 2]
s0 in [0, 511]
""")
    check(maps[1], """
(d0, d1) -> ()
domain:
d0 in [0, 1023]
d1 in [0, 2]
""")
