"""One flat computation to differentiate: calls and fusions inlined, loops unrolled.

The reverse pass walks one computation.  Before it does, every ``call`` and ``fusion`` is
replaced by the instructions of the computation it runs (their parameters bound to its
operands), and every ``while`` with a known trip count by that many copies of its body.  A
``get-tuple-element`` of a ``tuple`` then reads the element directly, so an unrolled loop's
state tuples vanish.  What stays called: reducers, comparators, scatter combiners and the
branches of a ``conditional`` (differentiated by their own rule).

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... sq {
...   a = f32[2] parameter(0)
...   ROOT m = f32[2] multiply(a, a)
... }
... ENTRY e {
...   x = f32[2] parameter(0)
...   ROOT c = f32[2] call(x), to_apply=sq
... }''')
>>> flat = flatten_computation(m, m.entry)
>>> [(i.name, i.opcode, i.operands) for i in flat.instructions]
[('x', 'parameter', ()), ('m', 'multiply', ('x', 'x'))]
"""
from __future__ import annotations

from typing import Callable

from fusion.autodiff.trip_count import known_trip_count, xla_trip_count
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.ir.instruction_order import operands_first

# Unrolling copies the body this many times at most: a longer loop stays a loop, which the
# while rule differentiates with loops (a trip's kernels then run once per trip, on the host).
MAX_UNROLLED_TRIPS = 32


class _Flattener:
    def __init__(self, module: HloModule, taken: set[str]) -> None:
        self.module = module
        self.out: list[HloInstruction] = []
        self.by_name: dict[str, HloInstruction] = {}
        self.taken = taken

    def fresh(self, name: str) -> str:
        if name not in self.taken:
            self.taken.add(name)
            return name
        n = 1
        while f"{name}.{n}" in self.taken:
            n += 1
        self.taken.add(f"{name}.{n}")
        return f"{name}.{n}"

    def emit(self, instr: HloInstruction) -> str:
        self.out.append(instr)
        self.by_name[instr.name] = instr
        return instr.name

    def run(self, comp: HloComputation, args: list[str] | None) -> str:
        """Emit ``comp``'s instructions; parameters are ``args`` (kept as they are when
        ``args`` is ``None``, for the outermost computation).  Returns the root's name."""
        env: dict[str, str] = {}
        for name in operands_first(comp, [comp.root_name]):
            instr = comp.instruction(name)
            operands = [env[o] for o in instr.operands]
            if instr.opcode == "parameter":
                if args is None:
                    env[name] = self.emit(instr.replace(name=self.fresh(name)))
                else:
                    env[name] = args[instr.attr("parameter_number")]
            else:
                env[name] = _STEPS.get(instr.opcode, _Flattener.copy)(self, instr, operands)
        # A computation's outermost parameters stay even when the root does not read them.
        if args is None:
            for param in comp.parameters:
                if param.name not in env:
                    env[param.name] = self.emit(param.replace(name=self.fresh(param.name)))
        return env[comp.root_name]

    def copy(self, instr: HloInstruction, operands: list[str]) -> str:
        """``instr`` itself, renamed apart, reading the flattened ``operands``."""
        return self.emit(instr.replace(name=self.fresh(instr.name), operands=tuple(operands)))

    def inline_call(self, instr: HloInstruction, operands: list[str]) -> str:
        return self.run(self.module.computation(instr.attr("to_apply")), operands)

    def inline_fusion(self, instr: HloInstruction, operands: list[str]) -> str:
        return self.run(self.module.computation(instr.attr("calls")), operands)

    def element(self, instr: HloInstruction, operands: list[str]) -> str:
        """A ``get-tuple-element`` of a ``tuple`` is that tuple's operand."""
        source = self.by_name[operands[0]]
        if source.opcode == "tuple":
            return source.operands[instr.attr("index")]
        return self.copy(instr, operands)

    def unroll(self, instr: HloInstruction, operands: list[str]) -> str:
        """The body inlined once per trip; a loop whose trip count is not known, or too large,
        stays a ``while`` (its VJP rule says why it cannot be differentiated)."""
        init = operands[0]
        trips = loop_trip_count(self.module, instr.replace(operands=(init,)), self.by_name.get)
        if trips is None or trips > MAX_UNROLLED_TRIPS:
            return self.emit(instr.replace(name=self.fresh(instr.name), operands=(init,)))
        body = self.module.computation(instr.attr("body"))
        state = init
        for _ in range(trips):
            state = self.run(body, [state])
        return state


#: How each op that is not copied as it is flattens (a parameter is bound to its argument).
_STEPS = {
    "call": _Flattener.inline_call,
    "fusion": _Flattener.inline_fusion,
    "get-tuple-element": _Flattener.element,
    "while": _Flattener.unroll,
}


def loop_trip_count(module: HloModule, loop: HloInstruction,
                    lookup: Callable[[str], HloInstruction | None]) -> int | None:
    """How many trips ``loop`` (a ``while``) makes: XLA's recorded count, else the counter
    ``trip_count`` recognises, its initial state found by ``lookup``; None when unknown."""
    trips = xla_trip_count(loop)
    if trips is not None:
        return trips
    condition = flatten_computation(module, module.computation(loop.attr("condition")))
    body = flatten_computation(module, module.computation(loop.attr("body")))
    return known_trip_count(condition, body, lookup(loop.operands[0]), lookup)


def flatten_computation(module: HloModule, comp: HloComputation, taken: set[str] | None = None
                        ) -> HloComputation:
    """``comp`` with its calls and fusions inlined and its counted loops unrolled; parameters
    keep their names and numbers.  ``taken`` holds names the result must not use (it is
    updated with the names used)."""
    flattener = _Flattener(module, set() if taken is None else taken)
    root = flattener.run(comp, None)
    return HloComputation(comp.name, tuple(flattener.out), root, comp.is_entry, comp.location)
