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

from fusion.evaluator.batch_norm_ops import batch_norm_instructions
from fusion.ir.hlo_module import HloModule
from fusion.shapes.rules_batch_norm import OPERANDS
from fusion.transforms.op_expansion import expand_ops


def expand_batch_norms(module: HloModule) -> HloModule:
    """``module`` with every batch-norm op written as plain ops (module docstring); an
    invalid one is an ``HloVerifyError`` located at it."""
    def write(ops, instr, shapes, adder):
        x = shapes[0]
        ops.out.extend(batch_norm_instructions(instr, x, ops.fresh, adder(x.dtype)))

    return expand_ops(module, OPERANDS, write, "bn", adder_name="batch_norm_add")


__all__ = ["expand_batch_norms"]
