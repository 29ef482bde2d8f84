"""The tiled instruction graph: golden text for seed/corpus fusions, and a brute-force check
on random data-movement fusions that every tile is exactly the set of elements its block
needs (enumerated through the composed indexing maps)."""
from __future__ import annotations

import itertools
import random
from pathlib import Path

import pytest

from fusion.text.parser import parse_hlo
from tiling.maps.indexing_map import enumerate_points
from tiling.symbolic.tiled_fusion import TilingError, analyze_fusion_tiling, tile_fusion

ROOT = Path(__file__).resolve().parents[2]


def _fusion(path, name=None):
    m = parse_hlo((ROOT / path).read_text())
    for _, f in m.fusions():
        if name is None or f.name == name:
            return m, f
    raise AssertionError(name)


def test_gelu_golden():
    m, f = _fusion("examples/gelu.hlo")
    text = tile_fusion(m, f, (1, 1, 1024)).to_string().splitlines()
    assert text[0] == (
        "param = parameter() tile_sizes=(1, 1, 1024) tile_strides=(1, 1, 1) "
        "tile_offsets_indexing=(d0, d1, d2) -> (d0, d1, d2 * 1024), "
        "domain: d0 in [0, 5], d1 in [0, 511], d2 in [0, 3]")
    assert text[3] == (
        "constant_3 = constant() tile_sizes=() tile_strides=() "
        "tile_offsets_indexing=(d0, d1, d2) -> (), "
        "domain: d0 in [0, 5], d1 in [0, 511], d2 in [0, 3]")
    assert text[-1].startswith("multiply_0 = multiply(param, multiply_1) tile_sizes=(1, 1, 1024)")
    # `param` is read by square, cube, add_1 and multiply_0 at the same tile: one node.
    assert sum(line.startswith("param ") for line in text) == 1
    assert len(text) == 18


def test_softmax_reduction_golden():
    m, f = _fusion("tests/data/hlo/softmax.after.hlo", "reduce_divide_fusion")
    text = tile_fusion(m, f, (4,)).to_string()
    assert "param_0.2 = parameter() tile_sizes=(4, 8) tile_strides=(1, 1) " \
           "tile_offsets_indexing=(d0) -> (d0 * 4, 0), domain: d0 in [0, 0]" in text
    assert "reduce_sum.0 = reduce(param_0.2, constant.1) tile_sizes=(4) tile_strides=(1) " \
           "tile_offsets_indexing=(d0) -> (d0 * 4), domain: d0 in [0, 0]" in text
    chunked = tile_fusion(m, f, (4,), reduction_chunk=4).to_string()
    assert "param_0.2 = parameter() tile_sizes=(4, 4) tile_strides=(1, 1) " \
           "tile_offsets_indexing=(d0)[s0] -> (d0 * 4, s0 * 4), domain: d0 in [0, 0], " \
           "s0 in [0, 1]" in chunked


def test_transpose_golden():
    m, f = _fusion("tests/data/hlo/transpose.after.hlo")
    lines = tile_fusion(m, f, (2, 2, 3)).to_string().splitlines()
    assert lines[0] == (
        "param_0.2 = parameter() tile_sizes=(2, 3, 2) tile_strides=(1, 1, 1) "
        "tile_offsets_indexing=(d0, d1, d2) -> (d1 * 2, d2 * 3, d0 * 2), "
        "domain: d0 in [0, 1], d1 in [0, 0], d2 in [0, 0]")
    assert lines[-2].startswith("transpose.5 = transpose(add.2) tile_sizes=(2, 2, 3)")


def test_two_paths_with_different_tiles_are_two_nodes():
    m, f = _fusion("tests/data/hlo/slices.after.hlo")
    tiled = tile_fusion(m, f, (2, 3))
    assert [t.label for t in tiled.instructions].count("param_0.1") == 1
    assert "param_0.1#2" in [t.label for t in tiled.instructions]


def test_inexact_tile_is_an_error_naming_the_constraint():
    m = parse_hlo("""HloModule m
f {
  p = f32[4,8] parameter(0)
  ROOT r = f32[32] reshape(p)
}
ENTRY e {
  x = f32[4,8] parameter(0)
  ROOT y = f32[32] fusion(x), kind=kLoop, calls=f
}""")
    assert tile_fusion(m, m.entry.root, (16,)).instructions[0].tile.sizes == (2, 8)
    with pytest.raises(TilingError, match="8 mod ts0 == 0 \\|\\| ts0 mod 8 == 0"):
        tile_fusion(m, m.entry.root, (12,))


# --- brute force on random fusions ---------------------------------------------------------
def _random_fusion(rng: random.Random) -> str:
    dims = [rng.choice([2, 3, 4, 6]), rng.choice([2, 4, 8])]
    lines = [f"  p0 = f32[{dims[0]},{dims[1]}] parameter(0)"]
    cur, n = "p0", 0

    def emit(op, new_dims, operands, attrs=""):
        nonlocal cur, n, dims
        n += 1
        name = f"v{n}"
        shape = ",".join(map(str, new_dims))
        lines.append(f"  {name} = f32[{shape}] {op}({', '.join(operands)}){attrs}")
        cur, dims = name, list(new_dims)

    for _ in range(rng.randint(1, 4)):
        kind = rng.choice(["transpose", "reverse", "slice", "broadcast", "reshape", "pad",
                           "exp", "add_self_transpose"])
        rank = len(dims)
        if kind == "transpose" and rank >= 2:
            perm = list(range(rank))
            rng.shuffle(perm)
            emit("transpose", [dims[p] for p in perm], [cur],
                 ", dimensions={" + ",".join(map(str, perm)) + "}")
        elif kind == "reverse":
            emit("reverse", dims, [cur], ", dimensions={" + str(rng.randrange(rank)) + "}")
        elif kind == "slice" and max(dims) > 1:
            spec, new = [], []
            for dd in dims:
                start = rng.randrange(dd)
                stride = rng.choice([1, 1, 2])
                limit = rng.randint(start + 1, dd)
                spec.append(f"[{start}:{limit}:{stride}]")
                new.append(len(range(start, limit, stride)))
            emit("slice", new, [cur], ", slice={" + ",".join(spec) + "}")
        elif kind == "broadcast" and rank < 3:
            pos = rng.randrange(rank + 1)
            new = dims[:pos] + [rng.choice([2, 3])] + dims[pos:]
            kept = [i for i in range(rank + 1) if i != pos]
            emit("broadcast", new, [cur], ", dimensions={" + ",".join(map(str, kept)) + "}")
        elif kind == "reshape":
            total = 1
            for dd in dims:
                total *= dd
            if rank >= 2 and rng.random() < 0.5:
                emit("reshape", [total], [cur])
            else:
                divisors = [k for k in range(2, total) if total % k == 0]
                if divisors:
                    k = rng.choice(divisors)
                    emit("reshape", [k, total // k], [cur])
        elif kind == "pad":
            cfg = [(rng.randint(0, 2), rng.randint(0, 2)) for _ in dims]
            lines.append(f"  z{n} = f32[] constant(0)")
            emit("pad", [dd + a + b for dd, (a, b) in zip(dims, cfg)], [cur, f"z{n}"],
                 ", padding=" + "x".join(f"{a}_{b}" for a, b in cfg))
        elif kind == "exp":
            emit("exponential", dims, [cur])
        elif kind == "add_self_transpose" and rank == 2 and dims[0] == dims[1]:
            prev = cur
            emit("transpose", [dims[1], dims[0]], [cur], ", dimensions={1,0}")
            emit("add", dims, [prev, cur])
    lines[-1] = "  ROOT" + lines[-1][1:]
    shape = ",".join(map(str, dims))
    return ("HloModule r\nf {\n" + "\n".join(lines) + "\n}\nENTRY e {\n"
            f"  x = {lines[0].split('=')[1].split(' parameter')[0].strip()} parameter(0)\n"
            f"  ROOT y = f32[{shape}] fusion(x), kind=kLoop, calls=f\n}}")


def _tile_set(tiled_instr, block, operand_dims):
    tile = tiled_instr.tile
    offsets = tile.offsets_map.evaluate(block, (0,) * tile.offsets_map.num_symbols)
    axes = [[o + k * s for k in range(size) if 0 <= o + k * s < n]
            for o, size, s, n in zip(offsets, tile.sizes, tile.strides, operand_dims)]
    return set(itertools.product(*axes))


def _needed(indexing, origin, sizes, out_dims):
    from tiling.maps.interval import Interval
    bounds = []
    for b, o, t, n in zip(indexing.dim_bounds, origin, sizes, out_dims):
        bounds.append(b.intersect(Interval(o, min(o + t, n) - 1)))
    if any(b.is_empty for b in bounds):
        return set()
    sub = indexing.replace(dim_bounds=tuple(bounds))
    return {indexing.evaluate(p, q) for p, q in enumerate_points(sub)}


@pytest.mark.parametrize("seed", range(40))
def test_random_fusion_tiles_cover_exactly_what_blocks_need(seed):
    rng = random.Random(seed)
    text = _random_fusion(rng)
    m = parse_hlo(text)
    fusion = m.entry.root
    analysis = analyze_fusion_tiling(m, fusion)
    out_dims = analysis.output_dims
    for _ in range(6):
        sizes = tuple(rng.randint(1, n) for n in out_dims)
        if analysis.problems(sizes):
            continue  # rejected, with a reason: nothing to check
        tiled = analysis.instantiate(sizes)
        for ti in tiled.instructions:
            if ti.instruction.opcode != "parameter":
                continue
            operand_dims = ti.instruction.shape.dims
            for block in itertools.product(*[range(g) for g in tiled.grid]):
                origin = [b * t for b, t in zip(block, sizes)]
                need = _needed(ti.indexing, origin, sizes, out_dims)
                have = _tile_set(ti, block, operand_dims)
                ragged = any(o + t > n for o, t, n in zip(origin, sizes, out_dims))
                assert need <= have, (text, sizes, block)
                if not ragged:
                    assert need == have, (text, sizes, block, sorted(need ^ have)[:4])


def test_random_fusions_are_mostly_tileable():
    """Guard against the brute-force test passing vacuously: most random fusions tile."""
    tileable = 0
    for seed in range(40):
        text = _random_fusion(random.Random(seed))
        m = parse_hlo(text)
        tileable += not analyze_fusion_tiling(m, m.entry.root).not_tileable()
    assert tileable >= 25


_MULTI_OUTPUT = """HloModule m
add {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}}
f {{
  p = f32[4,8] parameter(0)
  e = f32[4,8] exponential(p)
  z = f32[] constant(0)
  r = f32[4] reduce(e, z), dimensions={{1}}, to_apply=add
  ROOT t = ({out}, f32[4,8]) tuple({first}, e)
}}
ENTRY main {{
  x = f32[4,8] parameter(0)
  ROOT y = ({out}, f32[4,8]) fusion(x), kind=kInput, calls=f
}}"""


def test_multi_output_reduction_is_tiled_over_the_larger_shape():
    m = parse_hlo(_MULTI_OUTPUT.format(out="f32[4]", first="r"))
    tiled = tile_fusion(m, m.entry.root, (2, 8))
    assert tiled.output_dims == (4, 8) and tiled.grid == (2, 1)
    by_label = {t.label: t for t in tiled.instructions}
    # The reduce output is the projection onto its kept dim: 2 rows per block, each reduce
    # reading its rows whole (the brute-force truth: rows 0-1, every column).
    assert by_label["r"].tile.sizes == (2,)
    reads = {t.tile.sizes for t in tiled.instructions if t.name == "p"}
    assert reads == {(2, 8)}
    roots = [tiled.instructions[i].name for i in tiled.roots]
    assert roots == ["r", "e"]


def test_multi_output_of_unrelated_shapes_is_refused():
    m = parse_hlo(_MULTI_OUTPUT.format(out="f32[8]", first="z2").replace(
        "  ROOT t", "  z2 = f32[8] broadcast(z), dimensions={}\n  ROOT t"))
    with pytest.raises(TilingError, match="reduces of the largest"):
        analyze_fusion_tiling(m, m.entry.root)


@pytest.mark.parametrize("out, first, projection", [
    # bf16_softmax's multi-output fusion: the row sums leave as f32[4,1].
    ("f32[4,1]", "r1", ["d0", "0"]),
    ("f32[1,4]", "rb", ["0", "d0"]),
    ("f32[4,1,1]", "r11", ["d0", "0", "0"]),
])
def test_multi_output_reduction_through_unit_dim_reshape(out, first, projection):
    text = _MULTI_OUTPUT.format(out=out, first=first).replace("  ROOT t", (
        "  r1 = f32[4,1] reshape(r)\n"
        "  rb = f32[1,4]{1,0} bitcast(r)\n"
        "  r11 = f32[4,1,1] reshape(n1)\n"
        "  n1 = f32[4,1] negate(r1)\n  ROOT t"))
    m = parse_hlo(text)
    analysis = analyze_fusion_tiling(m, m.entry.root)
    assert analysis.output_dims == (4, 8)
    root = analysis.nodes[analysis.roots[0]]
    assert [str(e) for e in root.indexing.results] == projection
    for sizes in [(1, 8), (2, 8), (4, 8)]:
        tiled = analysis.instantiate(sizes)
        for ti in tiled.instructions:  # brute force: each tile is what its block needs
            dims = ti.instruction.shape.dims
            for block in itertools.product(*[range(g) for g in tiled.grid]):
                origin = [b * t for b, t in zip(block, sizes)]
                assert _needed(ti.indexing, origin, sizes, (4, 8)) == _tile_set(ti, block, dims)
        assert {t.tile.sizes for t in tiled.instructions if t.name == "p"} == {(sizes[0], 8)}


def test_multi_output_reduction_through_data_moving_reshape_is_refused():
    text = _MULTI_OUTPUT.format(out="f32[2,2]", first="r2").replace(
        "  ROOT t", "  r2 = f32[2,2] reshape(r)\n  ROOT t")
    m = parse_hlo(text)
    with pytest.raises(TilingError, match="reduces of the largest"):
        analyze_fusion_tiling(m, m.entry.root)
