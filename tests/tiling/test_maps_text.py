"""Print/parse of indexing maps: every map printed in the seed (indexing_analysis.ja.txt) reads
back and prints exactly as the seed does; bad text gives a located error."""
import pytest

from fusion.errors import FusionCompilerError
from tiling.maps.affine_expr import d, s
from tiling.maps.indexing_map import IndexingMap, RTVar
from fusion.errors import IndexingMapParseError
from tiling.maps.parser import parse_affine_map

# Maps copied verbatim from the seed (whitespace as printed there).
SEED_MAPS = [
    """(d0, d1) -> (d0, d1)
domain:
d0 in [0, 9]
d1 in [0, 19]""",
    """(d0, d1, d2) -> (d1)
domain:
d0 in [0, 9]
d1 in [0, 19]
d2 in [0, 29]""",
    """(d0)[s0, s1] -> (s0, d0, s1)
domain:
d0 in [0, 19]
s0 in [0, 9]
s1 in [0, 29]""",
    """(d0, d1, d2)[s0, s1, s2] -> (d0 + s0, d1 + s1, d2 + s2)
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
  (d0, d1, d2) -> ()""",
    """(d0, d1, d2)  -> ()
domain:
d0 in [0, 0]
d1 in [0, 1]
d2 in [0, 31]""",
    """(d0, d1)[s0, s1]  -> (d0 - s0, d1 - s1)
domain:
d0 in [0, 19]
d1 in [0, 29]
s0 in [0, 15]
  hlo: of1 = s32[] parameter(2)
  (d0, d1)  -> ()
s1 in [0, 20]
  hlo: of2 = s32[] parameter(3)
  (d0, d1)  -> ()""",
    """(d0, d1, d2, d3)[s0, s1] -> (d1 + s0, d2 + s1, d3)
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
  (d0, d1, d2, d3) -> (d0, 1)""",
    """  (d0, d1, d2, d3)[s0] -> (d0, s0)
  domain:
  d0 in [0, 1805]
  d1 in [0, 6]
  d2 in [0, 7]
  d3 in [0, 3]
  s0 in [0, 1]""",
    """(d0, d1, d2, d3) -> (d0, d3, d1, d2)
domain:
d0 in [0, 2]
d1 in [0, 5]
d2 in [0, 127]
d3 in [0, 12287]""",
    """(d0, d1, d2, d3) -> (d0, -d1 + 16, -d2 + 8, d3)
domain:
d0 in [0, 0]
d1 in [0, 16]
d2 in [0, 8]
d3 in [0, 8]""",
    """(d0)[s0] -> (s0, d0)
domain:
d0 in [0, 9]
s0 in [0, 255]""",
    """(d0) -> ()
domain:
d0 in [0, 9]""",
    """()[s0] -> (s0)
domain:
s0 in [0, 9]""",
    """(d0, d1, d2) -> (d0 + 5, d1 * 7 + 3, d2 * 2)
domain:
d0 in [0, 4]
d1 in [0, 2]
d2 in [0, 24]""",
    """(d0, d1, d2) -> (d0 - 5, (d1 - 3) floordiv 7, d2 floordiv 2)
domain:
d0 in [5, 9]
d1 in [3, 17]
d2 in [0, 48]
(d1 - 3) mod 7 in [0, 0]
d2 mod 2 in [0, 0]""",
    """(d0) -> (d0 floordiv 8, d0 mod 8)
domain:
d0 in [0, 31]""",
    """(d0, d1) -> (d0 * 8 + d1)
domain:
d0 in [0, 3]
d1 in [0, 7]""",
    """(d0, d1, d2) -> (d0 * 2 + d1 floordiv 2, d2 + (d1 mod 2) * 4)
domain:
d0 in [0, 1]
d1 in [0, 3]
d2 in [0, 3]""",
    """(d0, d1) -> (d0 floordiv 2, d1 floordiv 4 + (d0 mod 2) * 2, d1 mod 4)
domain:
d0 in [0, 3]
d1 in [0, 7]""",
    """(d0, d1, d2) -> (d0 floordiv 8, d0 mod 8, d1 * 4 + d2)
domain:
d0 in [0, 31]
d1 in [0, 2]
d2 in [0, 3]""",
    """(d0, d1, d2) -> (d0 * 8 + d1, d2 floordiv 4, d2 mod 4)
domain:
d0 in [0, 3]
d1 in [0, 7]
d2 in [0, 11]""",
    """(d0, d1, d2) -> (d0, d1 - 16, d2)
domain:
d0 in [0, 1]
d1 in [16, 32]
d2 in [0, 6]""",
    """(d0, d1, d2)[s0] -> (d0, s0, d2)
domain:
d0 in [0, 3]
d1 in [0, 127]
d2 in [0, 63]
s0 in [0, 255]""",
    """(d0, d1) -> ((d0 - 1) floordiv 2, d1 - 4)
domain:
d0 in [1, 7]
d1 in [4, 7]
(d0 - 1) mod 2 in [0, 0]""",
    """(d0, d1)[s0] -> (d0, d1 + s0)
domain:
d0 in [0, 1023]
d1 in [0, 2]
s0 in [0, 511]""",
    """(d0, d1, d2)[s0] -> (d0, d1, s0)
domain:
d0 in [0, 1]
d1 in [0, 64]
d2 in [0, 124]
s0 in [0, 124]""",
]


def _normalize(text: str) -> str:
    return "\n".join(" ".join(line.split()) for line in text.strip().splitlines())


@pytest.mark.parametrize("text", SEED_MAPS)
def test_seed_map_prints_back_exactly(text):
    m = IndexingMap.parse(text)
    assert _normalize(m.to_string(multiline=True)) == _normalize(text)
    # the seed's maps are already simplified: simplification keeps them as printed
    assert _normalize(m.simplify().to_string(multiline=True)) == _normalize(text)


@pytest.mark.parametrize("text", SEED_MAPS)
def test_seed_map_one_line_round_trip(text):
    m = IndexingMap.parse(text)
    again = IndexingMap.parse(str(m))
    assert str(again) == str(m)
    assert again.affine_map == m.affine_map and again.constraints == m.constraints
    assert again.symbol_bounds == m.symbol_bounds


def test_dynamic_slice_runtime_vars_parsed_with_hlo_and_map():
    m = IndexingMap.parse(SEED_MAPS[3])
    assert m.num_range_vars == 0 and m.num_rt_vars == 3
    assert [v.hlo for v in m.rt_vars] == [f"of{k} = s32[] parameter({k})" for k in (1, 2, 3)]
    assert str(m.rt_vars[2].map) == "(d0, d1, d2) -> ()"
    assert str(m) == ("(d0, d1, d2){rt0, rt1, rt2} -> (d0 + rt0, d1 + rt1, d2 + rt2), domain: "
                      "d0 in [0, 0], d1 in [0, 1], d2 in [0, 31], rt0 in [0, 1], rt1 in [0, 0],"
                      " rt2 in [0, 226]")
    assert m.evaluate((0, 1, 5), (1, 0, 200)) == (1, 1, 205)


def test_gather_rt_map_reads_index_column():
    m = IndexingMap.parse(SEED_MAPS[6])
    assert m.rt_vars[1].map.evaluate((17, 0, 0, 0)) == (17, 1)


def test_runtime_symbols_are_moved_after_range_symbols():
    text = """(d0)[s0, s1] -> (d0 + s0 * 2 + s1)
domain:
d0 in [0, 3]
s0 in [0, 5]
  hlo: off = s32[] parameter(1)
  (d0) -> ()
s1 in [0, 7]"""
    m = IndexingMap.parse(text)
    assert m.range_bounds[0].upper == 7 and m.rt_vars[0].feasible_values.upper == 5
    assert str(m.results[0]) == "d0 + s0 + s1 * 2"  # s0 is now the range var


def test_brief_one_line_example():
    text = ("(d0, d1)[s0]{rt0} -> (d1, s0 + rt0), domain: d0 in [0, 9], d1 in [0, 19], "
            "s0 in [0, 255], rt0 in [0, 3], d0 mod 2 in [0, 0]")
    m = IndexingMap.parse(text)
    assert str(m) == text
    built = IndexingMap.create((d(1), s(0) + s(1)), [(0, 9), (0, 19)], [(0, 255)],
                               [RTVar((0, 3))], {d(0) % 2: (0, 0)})
    assert str(built) == text


def test_slash_is_floordiv_and_percent_is_mod():
    a = IndexingMap.parse("(d0) -> (d0 / 8, d0 % 8), domain: d0 in [0, 31]")
    b = IndexingMap.parse(SEED_MAPS[15])
    assert str(a) == str(b)


def test_seed_simplification_inputs_parse_in_seed_notation():
    am = parse_affine_map("(d0, d1, d2) -> ((100d0 + 10d1 + d2) floorDiv 100, "
                          "((100d0 + 10d1 + d2) mod 100) floordiv 10, d2 mod 10)")
    assert str(am.results[0]) == "(d0 * 100 + d1 * 10 + d2) floordiv 100"
    assert am.evaluate((3, 4, 5)) == (3, 4, 5)


def test_custom_variable_names_and_ceildiv():
    m = IndexingMap.parse("(th_x, bl_x)[vector_index] -> (bl_x * 4 + th_x ceildiv 2 + "
                          "vector_index), domain: th_x in [0, 7], bl_x in [0, 3], "
                          "vector_index in [0, 1]")
    assert m.evaluate((5, 2), (1,)) == (2 * 4 + 3 + 1,)


def test_undefined_and_known_empty_text():
    assert str(IndexingMap.undefined()) == "UNDEFINED"
    assert IndexingMap.parse("UNDEFINED").is_undefined
    assert IndexingMap.parse(" KNOWN EMPTY ").is_known_empty


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("(d0) -> (d0 * d0), domain: d0 in [0, 3]", "not affine"),
        ("(d0) -> (d1), domain: d0 in [0, 3]", "unknown variable 'd1'"),
        ("(d0) -> (d0)", "has no bound"),
        ("(d0) -> (d0 floordiv 0), domain: d0 in [0, 3]", "non-zero constant divisor"),
        ("(d0) -> (d0), domain: d0 in [0 3]", "between the bounds"),
        ("(d0 -> (d0)", "variable list"),
        ("(d0) -> (d0 $ 1), domain: d0 in [0, 3]", "unexpected character"),
        ("(d0) -> (d0)\ndomain:\nd0 in [0, 3]\nd0 + 1 in [0, x]", "integer"),
    ],
)
def test_bad_text_gives_located_error(text, fragment):
    with pytest.raises(IndexingMapParseError) as info:
        IndexingMap.parse(text)
    assert isinstance(info.value, FusionCompilerError)
    assert fragment in str(info.value)
    assert info.value.line is not None and info.value.column is not None


def test_error_position_points_at_the_problem():
    with pytest.raises(IndexingMapParseError) as info:
        IndexingMap.parse("(d0) -> (d0)\ndomain:\nd0 in [0, 3]\nd0 + q in [0, 1]")
    assert (info.value.line, info.value.column) == (4, 6)
