"""Is a dot prologue worth its recomputation?  Fusion around dots judged by time, not bytes.

A prologue fused into a dot is computed on every operand tile the dot loads, and each lhs
tile is loaded by every program along N (each rhs tile by every program along M): with the
template's default 128-wide output tiles, a layernorm feeding a 2048x2304 QKV projection is
re-applied 18 times per element, a GELU feeding a 768-wide down projection 6 times.  That
work sits inside the dot's K loop, between the loads and the tensor cores.  A prologue of
data movement and a conversion is cheap to repeat; a normalization or a transcendental chain
is not, and the kernel of its own that it becomes instead writes the operand once, in the
dot's input type, and the dot reads it back.

The judgement is a roofline comparison (``tiling.policy.roofline``): the recomputation's
instructions (every repetition past the first, at the CUDA cores' rate) against the bytes the
separate kernel adds (writing the operand and reading it back, at DRAM bandwidth) plus one
kernel launch.

>>> from fusion.text.parser import parse_hlo
>>> text = '''HloModule m
... ENTRY e {
...   x = f32[2048,768] parameter(0)
...   w = bf16[768,@] parameter(1)
...   t = f32[2048,768] tanh(x)
...   c = bf16[2048,768] convert(t)
...   ROOT d = f32[2048,@] dot(c, w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
... }'''
>>> producer = Node(("t", "c"), ("c",), True)
>>> merged = Node(("x", "w", "t", "c", "d"), ("d",), True)
>>> wide = parse_hlo(text.replace("@", "3072")).entry  # 24 programs along N load each row
>>> print(recompute_problem(wide, producer, merged))
the prologue (9 instructions per element) would be computed 24 times per element of c by the dot: 325.6 M instructions (9.73 us) against 6.29 MB (3.88 us with the launch) as a kernel of its own
>>> narrow = parse_hlo(text.replace("@", "128")).entry  # N fits one block: computed once
>>> recompute_problem(narrow, producer, merged) is None
True
"""
from __future__ import annotations

import math

from fusion.ir.hlo_module import HloComputation
from fusion.opcodes import traits
from tiling.fusion_pass.decisions import Node, elements, value_bytes
from tiling.policy.devices import DeviceSpec
from tiling.policy.limits import DEFAULT_DEVICE, attention_default_block_m, dot_default_block
from tiling.policy.roofline import (
    KERNEL_LAUNCH_SECONDS,
    compute_seconds,
    instructions_per_element,
    memory_seconds,
)


def recompute_problem(comp: HloComputation, producer: Node, merged: Node,
                      device: DeviceSpec = DEFAULT_DEVICE) -> str | None:
    """Why ``producer`` should not become a prologue of the one dot of ``merged`` (None when
    its recomputation costs less time than a kernel of its own would)."""
    dot = _the_dot(comp, merged)
    if dot is None:
        return None
    inside = set(merged.members)
    mine = set(producer.members)
    for side, operand in enumerate(comp.instruction(dot).operands[:2]):
        upstream = upstream_members(comp, operand, inside)
        if not upstream & mine:
            continue
        per_element = sum(instructions_per_element(comp.instruction(m).opcode)
                          for m in upstream & mine)
        factor = _reads_per_element(comp, dot, side)
        problem = slower_problem(comp, operand, per_element, factor, device)
        if problem:
            return problem
    return None


def slower_problem(comp: HloComputation, operand: str, per_element: int, factor: int,
                   device: DeviceSpec, by: str = "the dot") -> str | None:
    if factor <= 1 or per_element == 0:
        return None
    count = elements(comp, operand)
    extra = (factor - 1) * count * per_element
    operand_bytes = value_bytes(comp.instruction(operand).shape)
    # Unfused, the operand is written once and read back once; what the prologue reads is
    # read either way.
    separate = memory_seconds(2 * operand_bytes, device) + KERNEL_LAUNCH_SECONDS
    recompute = compute_seconds(extra, device)
    if recompute <= separate:
        return None
    return (f"the prologue ({per_element} instructions per element) would be computed "
            f"{factor} times per element of {operand} by {by}: {extra / 1e6:.1f} M "
            f"instructions ({recompute * 1e6:.2f} us) against {2 * operand_bytes / 1e6:.2f} MB "
            f"({separate * 1e6:.2f} us with the launch) as a kernel of its own")


def attention_recompute_problem(comp: HloComputation, producer_members, merged: Node,
                                device: DeviceSpec = DEFAULT_DEVICE) -> tuple[str, str] | None:
    """``(operand, why)`` for the first K or V operand (a dot's rhs) of the attention node
    ``merged`` whose prologue, made of ``producer_members``, costs more time recomputed than
    a kernel of its own would take; None when there is none.

    The attention template streams all of K and V through every program: one per query block
    (``attention_default_block_m``) of every query head sharing the kv head, so each element
    of a K/V prologue is computed that many times (Q's prologue once: each program loads its
    own query block)."""
    dots = [m for m in merged.members if traits(comp.instruction(m).opcode).contraction]
    if len(dots) != 2:
        return None
    inside = set(merged.members)
    mine = set(producer_members)
    for dot in dots:
        # K or V: the operand not computed from the other dot (the rhs, unless the second
        # dot reads the probabilities as rhs: ``attention_orientation``)
        other = dots[1 - dots.index(dot)]
        lhs, rhs = comp.instruction(dot).operands
        side = 0 if other in upstream_members(comp, rhs, inside) else 1
        operand = (lhs, rhs)[side]
        upstream = upstream_members(comp, operand, inside)
        if not upstream & mine:
            continue
        per_element = sum(instructions_per_element(comp.instruction(m).opcode)
                          for m in upstream & mine)
        factor = _attention_programs(comp, dot, ("rhs", "lhs")[side])
        problem = slower_problem(comp, operand, per_element, factor, device,
                                 "the attention's programs (one per query block and head)")
        if problem:
            return operand, problem
    return None


def _attention_programs(comp: HloComputation, dot: str, side: str = "lhs") -> int:
    """How many attention programs read each element of ``dot``'s K or V operand: the free
    dims of its other operand (``side``) are the query-head group (one program each) then
    the queries (one per query block)."""
    instr = comp.instruction(dot)
    dims = comp.instruction(instr.operands[side == "rhs"]).shape.dims
    taken = set(instr.attr(f"{side}_batch_dims", ())) | \
        set(instr.attr(f"{side}_contracting_dims", ()))
    free = [n for i, n in enumerate(dims) if i not in taken]
    if not free:
        return 1
    queries = free[-1]
    return math.prod(free[:-1]) * math.ceil(queries / attention_default_block_m(queries))


def _the_dot(comp: HloComputation, node: Node) -> str | None:
    dots = [m for m in node.members if traits(comp.instruction(m).opcode).contraction]
    return dots[0] if len(dots) == 1 and comp.instruction(dots[0]).opcode == "dot" else None


def upstream_members(comp: HloComputation, name: str, inside: set[str]) -> set[str]:
    """``name`` and the members of the node it is computed from."""
    seen: set[str] = set()
    stack = [name]
    while stack:
        current = stack.pop()
        if current in seen or current not in inside:
            continue
        seen.add(current)
        stack.extend(comp.instruction(current).operands)
    return seen


def _reads_per_element(comp: HloComputation, dot: str, side: int) -> int:
    """How many programs of the dot template's default tiling load each element of operand
    ``side`` (0: lhs, 1: rhs): the tiles along the other operand's free dims."""
    instr = comp.instruction(dot)
    other = 1 - side
    prefix = ("lhs", "rhs")[other]
    dims = comp.instruction(instr.operands[other]).shape.dims
    taken = set(instr.attr(f"{prefix}_batch_dims", ())) | set(
        instr.attr(f"{prefix}_contracting_dims", ()))
    free = math.prod(n for i, n in enumerate(dims) if i not in taken)
    return math.ceil(free / dot_default_block(free))
