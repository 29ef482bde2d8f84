"""The HLO verifier: is a parsed (or built) module valid HLO?

Checks, in order, so that later checks may rely on earlier ones: unique computation and
instruction names, an entry computation, a ROOT in every computation, operands that exist,
parameter numbers ``0..N-1``, called computations that exist (and no recursion), no cycles
among instructions, then every layout against its shape (``fusion.ir.layout.layout_problem``:
a permutation, sane tiles, bounded padding) and every instruction's declared shape against
the shape inferred from its operands (layouts ignored), and the entry's signature against ``entry_computation_layout``.
The first problem found is raised as an ``HloVerifyError`` with the line:column of the
instruction (when the module came from text) and its name.

>>> from fusion.text.parser import parse_hlo
>>> verify_module(parse_hlo('''HloModule m
... ENTRY e {
...   p = f32[2] parameter(0)
...   ROOT n = s32[2] negate(p)
... }'''))
Traceback (most recent call last):
  ...
fusion.errors.HloVerifyError: 4:3: declared shape s32[2] of negate does not match the inferred shape f32[2] (in n)
  expected: f32[2]
"""
from __future__ import annotations

from fusion.errors import HloVerifyError
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.ir.layout import layout_problem
from fusion.ir.shape import ArrayShape, Shape, TupleShape, flatten_shape
from fusion.shapes.checks import fail
from fusion.shapes.inference import infer_shape, same_shape
from fusion.text.parser import parse_shape


def verify_module(module: HloModule) -> None:
    """Raise ``HloVerifyError`` on the first problem found; return ``None`` when valid."""
    _check_names(module)
    if not module.has_computation(module.entry_name):
        raise HloVerifyError(f"entry computation '{module.entry_name}' does not exist",
                             where=module.name)
    for comp in module.computations:
        _check_root(comp)
        _check_operands_exist(comp)
        _check_parameters(comp)
    _check_call_graph(module)
    for comp in module.computations:
        _check_acyclic(comp)
    for comp in module.computations:
        for instr in comp.instructions:
            _check_layouts(instr)
            _check_shape(instr, comp, module)
    _check_entry_layout(module)


def _comp_error(comp: HloComputation, message: str) -> HloVerifyError:
    loc = comp.location
    return HloVerifyError(message, line=loc.line if loc else None,
                          column=loc.column if loc else None, where=comp.name)


def _check_names(module: HloModule) -> None:
    # Instruction names are scoped per computation, as in XLA's HLO parser (which uniquifies
    # them module-wide afterwards): the seed's GELU reproducer names a parameter `param` in
    # both of its computations, and run_hlo_module accepts it.
    seen_comps: set[str] = set()
    for comp in module.computations:
        if comp.name in seen_comps:
            raise _comp_error(comp, f"duplicate computation name '{comp.name}'")
        seen_comps.add(comp.name)
        seen: set[str] = set()
        for instr in comp.instructions:
            if instr.name in seen:
                fail(instr, f"duplicate instruction name '{instr.name}' in computation "
                     f"'{comp.name}'")
            seen.add(instr.name)


def _check_root(comp: HloComputation) -> None:
    if not comp.instructions:
        raise _comp_error(comp, f"computation '{comp.name}' has no instructions")
    if not comp.root_name or not comp.has_instruction(comp.root_name):
        raise _comp_error(comp, f"computation '{comp.name}' has no ROOT instruction"
                          + (f" (root '{comp.root_name}' does not exist)" if comp.root_name else ""))


def _check_operands_exist(comp: HloComputation) -> None:
    for instr in comp.instructions:
        for operand in instr.operands:
            if not comp.has_instruction(operand):
                fail(instr, f"operand '{operand}' of instruction '{instr.name}' does not exist "
                     f"in computation '{comp.name}'")


def _check_parameters(comp: HloComputation) -> None:
    numbers: dict[int, HloInstruction] = {}
    for instr in comp.instructions:
        if instr.opcode != "parameter":
            continue
        n = instr.attr("parameter_number", None)
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            fail(instr, f"parameter has invalid number {n!r}")
        if n in numbers:
            fail(instr, f"parameter number {n} is used twice in computation '{comp.name}' "
                 f"(also by '{numbers[n].name}')")
        numbers[n] = instr
    missing = sorted(set(range(len(numbers))) - set(numbers))
    if missing:
        highest = numbers[max(numbers)]
        fail(highest, f"parameter numbers of computation '{comp.name}' must be 0..{len(numbers) - 1}"
             f" without gaps, but parameter {missing[0]} is missing")


def _check_call_graph(module: HloModule) -> None:
    calls: dict[str, list[str]] = {}
    for comp in module.computations:
        calls[comp.name] = []
        for instr in comp.instructions:
            for name in instr.called_computations():
                if not module.has_computation(name):
                    fail(instr, f"called computation '{name}' of instruction '{instr.name}' "
                         "does not exist")
                calls[comp.name].append(name)
    cycle = _find_cycle(calls, [c.name for c in module.computations])
    if cycle:
        raise _comp_error(module.computation(cycle[0]),
                          "computations call each other recursively: " + " -> ".join(cycle))
    chain = _deepest_call_chain(calls)
    if len(chain) - 1 > MAX_CALL_DEPTH:
        raise _comp_error(module.computation(chain[MAX_CALL_DEPTH + 1]),
                          f"computations nest {len(chain) - 1} calls deep ({chain[0]} -> "
                          f"{chain[1]} -> ... -> {chain[-1]}); at most {MAX_CALL_DEPTH} are "
                          "supported")


#: Deepest chain of nested calls (call, fusion, while, conditional, to_apply ...) accepted.
#: JAX and XLA modules nest a few levels; the evaluator and host programs recurse once per
#: level, so the cap turns what would be Python's RecursionError into a located error.
MAX_CALL_DEPTH = 64


def _deepest_call_chain(calls: dict[str, list[str]]) -> list[str]:
    """The longest path of computation names in the acyclic call graph ``calls``.

    >>> _deepest_call_chain({"e": ["a", "b"], "a": ["b"], "b": []})
    ['e', 'a', 'b']
    """
    # Iterative post-order: longest[name] is the deepest chain starting at name.
    longest: dict[str, list[str]] = {}
    for start in calls:
        stack = [start]
        while stack:
            name = stack[-1]
            if name in longest:
                stack.pop()
                continue
            pending = [c for c in calls.get(name, ()) if c not in longest]
            if pending:
                stack.extend(pending)
                continue
            stack.pop()
            best = max((longest[c] for c in calls.get(name, ())), key=len, default=[])
            longest[name] = [name, *best]
    return max(longest.values(), key=len, default=[])


def _check_acyclic(comp: HloComputation) -> None:
    graph = {i.name: list(i.operands) for i in comp.instructions}
    cycle = _find_cycle(graph, [i.name for i in comp.instructions])
    if cycle:
        fail(comp.instruction(cycle[0]),
             f"instruction '{cycle[0]}' is on a cycle: " + " -> ".join(cycle))


def _find_cycle(graph: dict[str, list[str]], order: list[str]) -> list[str] | None:
    """A cycle ``[a, b, ..., a]`` in ``graph`` (edges node -> successors), or ``None``.

    >>> _find_cycle({"a": ["b"], "b": ["c"], "c": ["a"]}, ["a", "b", "c"])
    ['a', 'b', 'c', 'a']
    >>> _find_cycle({"a": ["b", "b"], "b": []}, ["a", "b"]) is None
    True
    """
    done: set[str] = set()
    for start in order:
        if start in done:
            continue
        # Iterative DFS: deep operand chains in real modules would overflow Python's stack.
        path: list[str] = [start]
        on_path = {start}
        stack = [iter(graph.get(start, ()))]
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                done.add(path[-1])
                on_path.discard(path.pop())
                stack.pop()
            elif nxt in on_path:
                return path[path.index(nxt):] + [nxt]
            elif nxt not in done:
                path.append(nxt)
                on_path.add(nxt)
                stack.append(iter(graph.get(nxt, ())))
    return None


def _check_layouts(instr: HloInstruction) -> None:
    # Later stages index dims through minor_to_major and allocate padded buffers: a layout
    # that is not a permutation, or pads to terabytes, is refused here, located.
    for leaf in flatten_shape(instr.shape):
        if isinstance(leaf, ArrayShape) and leaf.layout is not None:
            problem = layout_problem(leaf.dims, leaf.layout)
            if problem:
                fail(instr, f"layout {leaf.layout} of {leaf.dtype}[{leaf.dims_text()}] is "
                     f"invalid: {problem}")


def _check_shape(instr: HloInstruction, comp: HloComputation, module: HloModule) -> None:
    operand_shapes = [comp.instruction(name).shape for name in instr.operands]
    inferred = infer_shape(instr, operand_shapes, module)
    if not same_shape(inferred, instr.shape):
        fail(instr, f"declared shape {_plain(instr.shape)} of {instr.opcode} does not match the "
             f"inferred shape {_plain(inferred)}", expected=_plain(inferred))


def _plain(shape: Shape) -> str:
    """A shape printed without layouts, as it is compared."""
    if isinstance(shape, TupleShape):
        return "(" + ", ".join(_plain(e) for e in shape.elements) + ")"
    return f"{shape.dtype}[{shape.dims_text()}]"


def _check_entry_layout(module: HloModule) -> None:
    """The entry's parameters and root match the header's ``entry_computation_layout``."""
    text = dict(module.attributes).get("entry_computation_layout")
    if not text:
        return

    body = text.strip()
    if body.startswith("{") and body.endswith("}"):
        body = body[1:-1]
    depth = 0
    for k, ch in enumerate(body):
        depth += ch in "([{"
        depth -= ch in ")]}"
        if depth == 0 and body.startswith("->", k):
            params_text, result_text = body[:k], body[k + 2:]
            break
    else:
        raise HloVerifyError(f"entry_computation_layout {text} has no '->'", where=module.name)
    params = parse_shape(params_text.strip())
    result = parse_shape(result_text.strip())
    entry = module.entry
    declared = TupleShape(tuple(p.shape for p in entry.parameters))
    if not same_shape(params, declared) or not same_shape(result, entry.root.shape):
        signature = f"{_plain(declared)}->{_plain(entry.root.shape)}"
        raise _comp_error(entry, f"entry computation '{entry.name}' has signature {signature}, "
                          f"but entry_computation_layout says {_plain(params)}->{_plain(result)}")
