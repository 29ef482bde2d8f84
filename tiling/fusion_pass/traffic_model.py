"""Kernels of a module and the memory traffic they model, before or after fusion.

A *kernel* is a fusion instruction or an unfused instruction that does work: not a
parameter, constant, tuple, get-tuple-element or bitcast (nor a reshape between row-major
shapes, which is a bitcast), and not control flow itself (``while``/``conditional``/``call``:
their bodies' kernels are counted instead, once each, not per iteration).  A kernel's traffic
is the bytes of its distinct operands plus the bytes of its result.

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... ENTRY e {
...   p = f32[4] parameter(0)
...   e = f32[4] exponential(p)
...   ROOT n = f32[4] negate(e)
... }''')
>>> count_kernels(m), module_traffic(m)
(2, 64)
"""
from __future__ import annotations

from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.opcodes import opcodes_with
from tiling.fusion_pass.decisions import Node, is_kernel, value_bytes
from tiling.fusion_pass.priority_fusion import computations_to_fuse

CONTROL_FLOW_OPCODES = opcodes_with("control_flow")


def _computations(module: HloModule) -> list[HloComputation]:
    return [module.computation(n) for n in computations_to_fuse(module)]


def kernels(module: HloModule) -> list[tuple[HloComputation, HloInstruction]]:
    """Every kernel of the entry and of the control-flow bodies it runs."""
    out = []
    for comp in _computations(module):
        for instr in comp.instructions:
            if instr.opcode in CONTROL_FLOW_OPCODES:
                continue
            if instr.opcode == "fusion" or is_kernel(comp, Node((instr.name,), (instr.name,),
                                                                True)):
                out.append((comp, instr))
    return out


def count_kernels(module: HloModule) -> int:
    """How many kernels the module launches (each body counted once)."""
    return len(kernels(module))


def kernel_traffic(comp: HloComputation, instr: HloInstruction) -> int:
    """Bytes one kernel reads (distinct operands) and writes."""
    reads = sum(value_bytes(comp.instruction(o).shape) for o in dict.fromkeys(instr.operands))
    return reads + value_bytes(instr.shape)


def module_traffic(module: HloModule) -> int:
    """Total modeled traffic of all kernels."""
    return sum(kernel_traffic(c, i) for c, i in kernels(module))
