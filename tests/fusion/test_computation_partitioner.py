"""The computation partitioner (seed: partitioning; XLA's computation_partitioner_test.cc).

Besides the worked examples, a brute-force checker verifies on random graphs that every
subgraph can be emitted at one index: each instruction that is not a subgraph root is used
only inside its subgraph, and all its users there read it at the same index.
"""
from __future__ import annotations


from hypothesis import given, settings, strategies as st

from fusion.analysis.computation_partitioner import partition_computation, post_order
from fusion.analysis.hero import ELEMENTWISE_OPCODES
from fusion.ir.hlo_module import HloComputation, HloInstruction
from fusion.text.parser import parse_hlo
from fusion.ir.shape import ArrayShape


def fused(body: str, name: str = "fused_computation") -> HloComputation:
    m = parse_hlo(f"HloModule m\n\n{name} {{\n{body}\n}}\n\nENTRY e {{\n"
                  "  ROOT r = f32[] constant(0)\n}\n")
    return m.computation(name)


def labels_are_single(comp: HloComputation, part) -> bool:
    """Brute force: within a subgraph every non-root is read at exactly one index."""
    users = comp.users
    for s in part.subgraphs:
        members = set(s.instructions)
        label: dict[str, set] = {}
        for name in reversed(s.instructions):
            if name in s.roots:
                if any(u in members for u in users[name]):
                    return False
                label[name] = {("root", s.name)}
                continue
            if not users[name] or any(u not in members for u in users[name]):
                return False
            out = set()
            for u in users[name]:
                user = comp.instruction(u)
                if user.opcode in ELEMENTWISE_OPCODES or user.opcode == "tuple":
                    out |= label[u]
                else:
                    out.add(("through", u))
            if len(out) != 1:
                return False
            label[name] = out
    return True


def covers_once(comp: HloComputation, part) -> bool:
    names = [n for s in part.subgraphs for n in s.instructions]
    return sorted(names) == sorted(i.name for i in comp.instructions)


SEED = """
  param = f32[64,64] parameter(0)
  log.3 = f32[64,64] log(param)
  transpose.1 = f32[64,64] transpose(log.3), dimensions={1,0}
  ROOT add.2 = f32[64,64] add(log.3, transpose.1)"""


def test_seed_log_transpose_add_gives_three_functions():
    comp = fused(SEED)
    part = partition_computation(comp)  # the transpose is the hero: a subgraph root
    assert [s.roots for s in part.subgraphs] == [("add.2",), ("transpose.1",), ("log.3",)]
    assert [s.name for s in part.subgraphs] == [
        "fused_computation_add_2", "fused_computation_transpose_1", "fused_computation_log_3"]
    by_root = {s.roots[0]: s for s in part.subgraphs}
    assert by_root["log.3"].instructions == ("param", "log.3")  # parameters join, as in XLA
    assert by_root["add.2"].called_roots == ("log.3", "transpose.1")
    assert by_root["transpose.1"].calls == ("fused_computation_log_3",)
    assert labels_are_single(comp, part) and covers_once(comp, part)
    text = str(part)
    assert "SUBGRAPH fused_computation_log_3" in text and "ROOT log.3 = f32[64,64] log(param)" in text


def test_without_hero_roots_transpose_joins_its_user_xla_partially_mergable():
    comp = fused(SEED)
    part = partition_computation(comp, is_subgraph_root=lambda i: False)
    assert [s.instructions for s in part.subgraphs] == [
        ("transpose.1", "add.2"), ("param", "log.3")]


def test_xla_partition_diamonds_of_slices():
    comp = fused("""
  param = f32[6] parameter(0)
  slice0.1 = f32[5] slice(param), slice={[0:5]}
  slice0.2 = f32[5] slice(param), slice={[1:6]}
  add0 = f32[5] add(slice0.1, slice0.2)
  slice1.1 = f32[4] slice(add0), slice={[0:4]}
  slice1.2 = f32[4] slice(add0), slice={[1:5]}
  add1 = f32[4] add(slice1.1, slice1.2)
  slice2.1 = f32[3] slice(add1), slice={[0:3]}
  slice2.2 = f32[3] slice(add1), slice={[1:4]}
  add2 = f32[3] add(slice2.1, slice2.2)
  slice3.1 = f32[2] slice(add2), slice={[0:2]}
  slice3.2 = f32[2] slice(add2), slice={[1:3]}
  ROOT add3 = f32[2] add(slice3.1, slice3.2)""")
    part = partition_computation(comp)
    assert [s.name for s in part.subgraphs] == [
        "fused_computation_add3", "fused_computation_add2", "fused_computation_add1",
        "fused_computation_add0", "fused_computation_param"]
    assert part.subgraphs[0].instructions == ("slice3.1", "slice3.2", "add3")
    assert part.subgraphs[0].index_ranges == (2,)
    assert labels_are_single(comp, part)


def test_slice_and_pad_of_add():
    # Seed: "the same for slice and pad of add": add is read at two different indices.
    comp = fused("""
  p0 = f32[6] parameter(0)
  p1 = f32[6] parameter(1)
  add = f32[6] add(p0, p1)
  slice = f32[4] slice(add), slice={[1:5]}
  zero = f32[] constant(0)
  pad = f32[8] pad(add, zero), padding=1_1
  slice.1 = f32[4] slice(pad), slice={[2:6]}
  ROOT mul = f32[4] multiply(slice, slice.1)""")
    part = partition_computation(comp)
    assert [s.roots for s in part.subgraphs] == [("mul",), ("add",)]
    assert part.subgraph_of("pad").name == "fused_computation_mul"
    assert part.subgraph_of("p1").name == "fused_computation_add"
    assert labels_are_single(comp, part) and covers_once(comp, part)


def test_elementwise_diamonds_stay_one_function_gelu_too():
    lines = ["  x0 = f32[16] parameter(0)"]
    for i in range(60):
        lines += [f"  e{i} = f32[16] exponential(x{i})", f"  n{i} = f32[16] negate(x{i})",
                  f"  x{i + 1} = f32[16] add(e{i}, n{i})"]
    lines[-1] = "  ROOT" + lines[-1][1:]
    comp = fused("\n".join(lines))
    part = partition_computation(comp)
    assert len(part.subgraphs) == 1 and covers_once(comp, part)
    import pathlib
    gelu = parse_hlo((pathlib.Path(__file__).resolve().parents[2] / "examples" / "gelu.hlo")
                     .read_text()).computation("gelu")
    # Seed: a single function @gelu, since no tensor is read at two different indices.
    assert len(partition_computation(gelu).subgraphs) == 1


def naive_emitted_ops(comp: HloComputation) -> int:
    """Ops a one-function emitter would generate, re-emitting operands per use."""
    cost: dict[str, int] = {}
    for name in post_order(comp):
        cost[name] = 1 + sum(cost[o] for o in comp.instruction(name).operands)
    return cost[comp.root_name]


def test_sixty_slice_diamonds_partition_into_one_subgraph_per_add():
    n = 60
    lines = [f"  x0 = f32[{n + 2}] parameter(0)"]
    for i in range(n):
        size = n + 1 - i
        lines += [f"  a{i} = f32[{size}] slice(x{i}), slice={{[0:{size}]}}",
                  f"  b{i} = f32[{size}] slice(x{i}), slice={{[1:{size + 1}]}}",
                  f"  x{i + 1} = f32[{size}] add(a{i}, b{i})"]
    lines[-1] = "  ROOT" + lines[-1][1:]
    comp = fused("\n".join(lines))
    part = partition_computation(comp)
    assert len(part.subgraphs) == n + 1  # one per add, plus the parameter
    assert sum(len(s.instructions) for s in part.subgraphs) == 3 * n + 1
    assert naive_emitted_ops(comp) > 2 ** n  # what the partitioner avoids
    assert labels_are_single(comp, part)


def test_same_index_callback_replaces_the_structural_rule():
    comp = fused(SEED)
    seen = []

    def always(instr, users):
        seen.append((instr.name, tuple(u.name for u in users)))
        return True

    part = partition_computation(comp, is_subgraph_root=lambda i: False, same_index=always)
    assert ("log.3", ("transpose.1", "add.2")) in seen
    assert len(part.subgraphs) == 1  # told that both users read log.3 at one index

    def never(instr, users):
        return False

    # A single user is always safe to join (seed), at a new index: only log.3 splits off.
    part = partition_computation(comp, is_subgraph_root=lambda i: False, same_index=never)
    assert [s.roots for s in part.subgraphs] == [("add.2",), ("log.3",)]


UNARY = ("exponential", "negate")


@st.composite
def random_graphs(draw):
    """Random DAGs over f32[8,8]: unary/binary elementwise ops, transposes, reverses."""
    shape = ArrayShape("f32", (8, 8))
    instrs = [HloInstruction("p0", "parameter", shape, (), (("parameter_number", 0),))]
    for k in range(draw(st.integers(1, 14))):
        names = [i.name for i in instrs]
        kind = draw(st.sampled_from(["unary", "binary", "transpose", "reverse"]))
        a = draw(st.sampled_from(names))
        if kind == "binary":
            b = draw(st.sampled_from(names))
            instrs.append(HloInstruction(f"v{k}", "add", shape, (a, b)))
        elif kind == "unary":
            instrs.append(HloInstruction(f"v{k}", draw(st.sampled_from(UNARY)), shape, (a,)))
        elif kind == "transpose":
            instrs.append(HloInstruction(f"v{k}", "transpose", shape, (a,),
                                         (("dimensions", (1, 0)),)))
        else:
            instrs.append(HloInstruction(f"v{k}", "reverse", shape, (a,),
                                         (("dimensions", (0,)),)))
    return HloComputation("c", tuple(instrs), instrs[-1].name)


@settings(max_examples=150, deadline=None)
@given(random_graphs())
def test_random_graphs_partition_into_single_index_subgraphs(comp):
    part = partition_computation(comp, is_subgraph_root=lambda i: False)
    assert covers_once(comp, part)
    assert labels_are_single(comp, part)
    assert part.root_subgraph.roots[0] in {i.name for i in comp.instructions
                                           if not comp.users[i.name]}
    # Every call goes to an existing subgraph whose root is the value read.
    names = {s.name: s for s in part.subgraphs}
    for s in part.subgraphs:
        for root in s.called_roots:
            assert root in part.subgraph_of(root).roots
        assert all(c in names for c in s.calls)
