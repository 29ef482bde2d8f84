"""Split a fused computation into subgraphs that can each be emitted at a single index.

Seed ``gpu_emitters.th.txt`` (partitioning) and XLA's ``computation_partitioner.cc``: emitting
a whole fusion as one function would evaluate an op once per distinct index its users read
it at (``log`` read by both ``transpose`` and ``add``), and with repeated diamonds the code
grows exponentially.  Each instruction instead gets a *function* and an *indexing*:

* a fusion root or a chosen subgraph root (the heroes) starts a new function;
* an instruction whose users all are in one function, read at one indexing and are
  elementwise (or the root tuple) joins that function with that indexing;
* else an instruction with a single (non-elementwise) user joins the user's function with a
  new indexing (the user reads it at a transformed index, e.g. a transpose);
* else (several users reading it at different indices) it starts a new function.

Instructions are visited users-first, so this is one linear pass.  A subgraph's roots are
its instructions used outside it (or not used at all); it *calls* the subgraphs whose roots
it reads.  Parameters are ordinary instructions, as in XLA.

>>> from fusion.ir.hlo_module import HloComputation, HloInstruction
>>> from fusion.ir.shape import ArrayShape
>>> f = lambda *d: ArrayShape("f32", d)
>>> comp = HloComputation("fused", (
...     HloInstruction("p", "parameter", f(10, 10), (), (("parameter_number", 0),)),
...     HloInstruction("log.3", "log", f(10, 10), ("p",)),
...     HloInstruction("t", "transpose", f(10, 10), ("log.3",), (("dimensions", (1, 0)),)),
...     HloInstruction("add", "add", f(10, 10), ("log.3", "t"))), "add")
>>> [s.name for s in partition_computation(comp).subgraphs]
['fused_add', 'fused_log_3']
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

from fusion.analysis.hero import is_elementwise
from fusion.ir.hlo_module import HloComputation, HloInstruction
from fusion.ir.instruction_order import operands_first
from fusion.opcodes import traits
from fusion.text.printer import print_instruction
from fusion.ir.shape import ArrayShape, flatten_shape
from fusion.analysis.emitter_kind import EmitterKind, analyze_computation

SameIndex = Callable[[HloInstruction, tuple[HloInstruction, ...]], bool]
IsSubgraphRoot = Callable[[HloInstruction], bool]


@dataclass(frozen=True)
class Subgraph:
    """One function: ``instructions`` in post order; ``index_ranges`` are the dims of the
    first root (the function's index arguments); ``called_roots`` are the other subgraphs'
    roots it reads and ``calls`` the names of those subgraphs."""

    name: str
    roots: tuple[str, ...]
    instructions: tuple[str, ...]
    calls: tuple[str, ...]
    called_roots: tuple[str, ...]
    index_ranges: tuple[int, ...]


@dataclass(frozen=True)
class PartitionedComputation:
    """The subgraphs of ``computation``, the root subgraph first (XLA's order)."""

    computation: str
    subgraphs: tuple[Subgraph, ...]
    instruction_text: tuple[tuple[str, str], ...] = ()

    @property
    def root_subgraph(self) -> Subgraph:
        return self.subgraphs[0]

    def subgraph_of(self, instruction: str) -> Subgraph:
        """The subgraph holding ``instruction``."""
        for s in self.subgraphs:
            if instruction in s.instructions:
                return s
        raise KeyError(f"{instruction!r} is in no subgraph of {self.computation!r}")

    def __str__(self) -> str:
        text = dict(self.instruction_text)
        lines = [f"PartitionedComputation {self.computation}:"]
        for s in self.subgraphs:
            calls = f"  // calls {', '.join(s.calls)}" if s.calls else ""
            lines.append(f"  SUBGRAPH {s.name} {{{calls}")
            for name in s.instructions:
                prefix = "ROOT " if name in s.roots else ""
                lines.append(f"    {prefix}{text.get(name, name)}")
            lines.append("  }")
        return "\n".join(lines)


def sanitize_function_name(name: str) -> str:
    """XLA's ``SanitizeFunctionName``: only letters, digits and ``_``.

    >>> sanitize_function_name("fused_computation_log.3")
    'fused_computation_log_3'
    """
    return re.sub(r"[^A-Za-z0-9_]", "_", name)


def post_order(computation: HloComputation) -> tuple[str, ...]:
    """Operands before users, walking from the unused instructions (the root among them) in
    text order."""
    users = computation.users
    return operands_first(computation, (i.name for i in computation.instructions
                                        if not users[i.name]))


def _reads_at_own_index(computation: HloComputation, user: HloInstruction, instr) -> bool:
    """A user that reads ``instr`` at the user's own index (a copy is elementwise)."""
    if user.opcode == "tuple" or is_elementwise(computation, user):
        return True
    if traits(user.opcode).reshape_like and isinstance(user.shape, ArrayShape):
        return isinstance(instr.shape, ArrayShape) and user.shape.dims == instr.shape.dims
    return False


def _hero_roots(computation: HloComputation) -> IsSubgraphRoot:
    # Imported here: the emitter decision is only needed for this default.

    analysis = analyze_computation(computation)
    if analysis.kind in (EmitterKind.REDUCTION, EmitterKind.TRANSPOSE):
        heroes = set(analysis.heroes)
        return lambda instr: instr.name in heroes
    return lambda instr: False


def partition_computation(
    computation: HloComputation,
    *,
    is_subgraph_root: IsSubgraphRoot | None = None,
    same_index: SameIndex | None = None,
) -> PartitionedComputation:
    """Partition ``computation`` as XLA's ``PartitionedComputation`` does (module doc).

    ``is_subgraph_root`` picks extra subgraph roots; by default the heroes of a reduction or
    transpose fusion (``fusion.analysis.emitter_kind``).  ``same_index(instr, users)`` says whether
    users that are all in one subgraph read ``instr`` at the same index (e.g. by comparing
    indexing maps); by default they must share an indexing and each read ``instr`` at its own
    index (elementwise ops, the tuple, or a bitcast/reshape/copy keeping the dims).
    """
    if is_subgraph_root is None:
        is_subgraph_root = _hero_roots(computation)
    order = post_order(computation)
    users = computation.users
    ids: dict[str, tuple[int, int]] = {}
    next_function = 0
    next_indexing = 0
    for name in reversed(order):
        instr = computation.instruction(name)
        user_names = users[name]
        is_root = not user_names or is_subgraph_root(instr)
        user_ids = {ids[u] for u in user_names}
        same_function = len({f for f, _ in user_ids}) == 1
        if not is_root and same_function:
            user_instrs = tuple(computation.instruction(u) for u in user_names)
            if same_index is not None:
                joins = same_index(instr, user_instrs)
            else:
                joins = len(user_ids) == 1 and all(
                    _reads_at_own_index(computation, u, instr) for u in user_instrs
                )
            if joins:
                ids[name] = ids[user_names[0]]
                continue
        if is_root or len(user_names) > 1:
            ids[name] = (next_function, next_indexing)
            next_function += 1
            next_indexing += 1
        else:
            ids[name] = (ids[user_names[0]][0], next_indexing)
            next_indexing += 1
    return _build(computation, order, ids, next_function)


def _build(computation, order, ids, count) -> PartitionedComputation:
    members: list[list[str]] = [[] for _ in range(count)]
    for name in order:
        members[ids[name][0]].append(name)
    users = computation.users
    names: list[str] = []
    roots_of: list[tuple[str, ...]] = []
    for fid, instrs in enumerate(members):
        roots = tuple(
            n for n in instrs if not users[n] or any(ids[u][0] != fid for u in users[n])
        )
        roots_of.append(roots)
        names.append(sanitize_function_name(f"{computation.name}_{'_'.join(roots)}"))
    subgraphs = []
    for fid, instrs in enumerate(members):
        called_roots = tuple(dict.fromkeys(
            op
            for n in instrs
            for op in computation.instruction(n).operands
            if ids[op][0] != fid
        ))
        calls = tuple(dict.fromkeys(names[ids[op][0]] for op in called_roots))
        first = computation.instruction(roots_of[fid][0])
        leaves = flatten_shape(first.shape)
        ranges = tuple(leaves[0].dims) if leaves else ()
        subgraphs.append(
            Subgraph(names[fid], roots_of[fid], tuple(instrs), calls, called_roots, ranges)
        )
    text = tuple((i.name, _instruction_text(i)) for i in computation.instructions)
    return PartitionedComputation(computation.name, tuple(subgraphs), text)


def _instruction_text(instr: HloInstruction) -> str:
    return print_instruction(instr)
