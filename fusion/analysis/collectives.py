"""Collectives on one device: which devices an op names, and what its value is there.

``compile_hlo`` and the reference evaluator run a module on one device.  A collective there has
one participant, and XLA defines its value: an ``all-reduce`` of one value is that value (its
reducer never runs); ``all-gather``, ``reduce-scatter`` and ``all-to-all`` with one participant
are the identity along their dimension, as is a ``collective-broadcast`` (its group's first
member is the device itself); a ``collective-permute`` gives its operand where a pair
sends device 0 to itself (``source_target_pairs={{0,0}}``) and zeros where no pair targets
device 0 (``source_target_pairs={}``).  The ``-start`` halves compute the same value; a
``-done`` reads it from its start (:func:`async_result_index`).

A module whose groups or pairs name another device (``replica_groups={{0,1}}``), or whose
header asks for several (``replica_count=2``, ``num_partitions=4``), needs several devices:
:func:`single_device_problem` says why, and the evaluator and ``compile_hlo`` refuse it at the
op's line and column.  The shape rules accept it: XLA does too.

>>> from fusion.text.parser import parse_hlo
>>> m = parse_hlo('''HloModule m
... add { a = f32[] parameter(0)
...   b = f32[] parameter(1)
...   ROOT c = f32[] add(a, b) }
... ENTRY e {
...   x = f32[4] parameter(0)
...   ROOT r = f32[4] all-reduce(x), replica_groups={{0,1}}, to_apply=add
... }''')
>>> print(single_device_problem(m.entry.root, m))
all-reduce with replica_groups={{0,1}} names devices 0, 1: it needs 2 devices, one process per device (fusion-compile run --world-size 2, or compile_hlo under torch.distributed); on one device only a group of device 0 alone is defined (replica_groups={} or {{0}})
"""
from __future__ import annotations

from fusion.ir.hlo_module import HloInstruction, HloModule
from fusion.opcodes import traits
from fusion.text.printer import print_attribute_value

#: The module header's keys that ask for several devices.
DEVICE_COUNT_KEYS = ("replica_count", "num_partitions")

#: A ``-start`` op whose value is a tuple: the element of it that holds the result (XLA's
#: ``(operand, result)`` or ``(operand, result, contexts...)``); what its ``-done`` returns.
_ASYNC_TUPLE_RESULT = {"all-gather-start": 1, "collective-permute-start": 1}


def is_collective(opcode: str) -> bool:
    return traits(opcode).collective


def group_key(instr: HloInstruction) -> str:
    """The attribute naming the devices an op talks to."""
    return "source_target_pairs" if instr.opcode.startswith("collective-permute") \
        else "replica_groups"


def named_devices(instr: HloInstruction) -> tuple[int, ...]:
    """The distinct device ids in the op's replica groups or source-target pairs, sorted.

    >>> from fusion.ir.shape import ArrayShape
    >>> named_devices(HloInstruction("p", "collective-permute", ArrayShape("f32", (2,)), ("x",),
    ...                              (("source_target_pairs", ((0, 1), (1, 0))),)))
    (0, 1)
    """
    groups = instr.attr(group_key(instr), ())
    if not isinstance(groups, tuple):
        return ()
    return tuple(sorted({i for group in groups if isinstance(group, tuple) for i in group}))


def module_devices(module: HloModule | None) -> int:
    """How many devices the module's header asks for (``replica_count`` times
    ``num_partitions``; 1 when it names neither)."""
    count = 1
    for key, value in module.attributes if module is not None else ():
        if key in DEVICE_COUNT_KEYS and str(value).strip().isdigit():
            count *= max(int(str(value).strip()), 1)
    return count


def single_device_problem(instr: HloInstruction, module: HloModule | None) -> str | None:
    """Why ``instr``, a collective, cannot run on one device; None when it can."""
    if not is_collective(instr.opcode):
        return None
    ids = named_devices(instr)
    key = group_key(instr)
    if any(i != 0 for i in ids):
        text = print_attribute_value(key, instr.attr(key))
        return (f"{instr.opcode} with {key}={text} names devices "
                f"{', '.join(map(str, ids))}: it needs {max(ids) + 1} devices, one process "
                f"per device (fusion-compile run --world-size {max(ids) + 1}, or compile_hlo "
                "under torch.distributed); on one device only a group of device 0 alone is "
                "defined (replica_groups={} or {{0}})")
    devices = module_devices(module)
    if devices > 1:
        header = ", ".join(f"{k}={v}" for k, v in module.attributes if k in DEVICE_COUNT_KEYS)
        return (f"{instr.opcode} communicates between the {devices} devices the module asks "
                f"for ({header}); run it on {devices} processes (fusion-compile run "
                f"--world-size {devices}, or compile_hlo under torch.distributed)")
    return None


def sends_to_self(instr: HloInstruction) -> bool:
    """Whether a collective-permute's pairs send device 0's value to device 0 (else it
    receives nothing, and its result is zeros)."""
    pairs = instr.attr("source_target_pairs", ())
    return isinstance(pairs, tuple) and (0, 0) in pairs


def async_result_index(start_opcode: str) -> int | None:
    """The tuple element of a ``-start`` op's value holding the result (None: the value is
    the result itself, as for ``all-reduce-start``)."""
    return _ASYNC_TUPLE_RESULT.get(start_opcode)


__all__ = ["DEVICE_COUNT_KEYS", "async_result_index", "group_key", "is_collective",
           "module_devices", "named_devices", "sends_to_self", "single_device_problem"]
