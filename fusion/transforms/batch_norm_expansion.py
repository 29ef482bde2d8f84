"""``batch-norm-training``, ``-inference`` and ``-grad`` written as the elementwise ops and
reductions that compute them, as XLA's ``BatchNormExpander`` writes them before fusion
(``fusion.evaluator.batch_norm_ops`` holds the ops and their formulas).  The fusion pass then
fuses them as any normalization: the statistics are row reductions over the non-feature dims,
the output an elementwise kernel reading them.  A module without batch-norm ops is returned
as is.

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... ENTRY e {
...   x = f32[8,3] parameter(0)
...   s = f32[3] parameter(1)
...   o = f32[3] parameter(2)
...   mean = f32[3] parameter(3)
...   var = f32[3] parameter(4)
...   ROOT y = f32[8,3] batch-norm-inference(x, s, o, mean, var), epsilon=0.001, feature_index=1
... }''')
>>> ops = [i.opcode for i in expand_batch_norms(m).entry]
>>> "batch-norm-inference" in ops, ops[-1], ops.count("rsqrt")
(False, 'add', 1)
"""
from __future__ import annotations

from dataclasses import replace

from fusion.evaluator.batch_norm_ops import batch_norm_instructions
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule, binary_computation
from fusion.shapes.inference import infer_shape
from fusion.shapes.rules_batch_norm import OPERANDS
from fusion.transforms.map_inlining import fresh_names
from fusion.transforms.naming import taken_names

#: The three batch-norm opcodes (the keys of their operand table).
_BATCH_NORM = frozenset(OPERANDS)


def expand_batch_norms(module: HloModule) -> HloModule:
    """``module`` with every batch-norm op written as plain ops (module docstring)."""
    if not any(i.opcode in _BATCH_NORM for c in module.computations for i in c):
        return module
    taken = taken_names(module)
    reducers: dict[str, HloComputation] = {}
    comps = tuple(_expanded(module, c, taken, reducers) for c in module.computations)
    return replace(module, computations=tuple(reducers.values()) + comps)


def _expanded(module: HloModule, comp: HloComputation, taken: set[str],
              reducers: dict[str, HloComputation]) -> HloComputation:
    out: list[HloInstruction] = []
    for instr in comp:
        if instr.opcode not in _BATCH_NORM:
            out.append(instr)
            continue
        shapes = tuple(comp.instruction(o).shape for o in instr.operands)
        infer_shape(instr, shapes, module)  # an invalid op: HloVerifyError located at it
        x = shapes[0]
        if x.dtype not in reducers:
            name = fresh_names("batch_norm_add", taken, x.dtype)()
            reducers[x.dtype] = binary_computation(name, "add", x.dtype)
        out.extend(batch_norm_instructions(instr, x, fresh_names(instr.name, taken, "bn"),
                                           reducers[x.dtype].name))
    return replace(comp, instructions=tuple(out))


__all__ = ["expand_batch_norms"]
