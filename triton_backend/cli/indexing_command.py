"""``fusion-compile indexing FILE.hlo``: the indexing maps of one instruction.

By default the ENTRY root (through its fused computation if it is a fusion), output -> input
for output 0 and every operand, each map in XLA's one-line text form (``--multiline``: the
seed's form, with runtime variables' instructions).  ``--direction input-to-output`` needs
``--operand K`` and prints the maps from operand K to every output.  Unknown maps print as
``UNDEFINED``.  Never imports torch or triton.
"""
from __future__ import annotations

import argparse

from fusion.errors import (  # IndexingCommandError: defined there, re-exported here
    FusionCompilerError,
    IndexingCommandError,
)
from fusion.text.parser import parse_hlo
from fusion.shapes.verifier import verify_module
from fusion.ir.shape import flatten_shape
from tiling.indexing_analysis import input_to_output_indexing_per_output, output_to_input_indexing
from triton_backend.cli.check_command import read_text
from triton_backend.cli.diagnostics import did_you_mean
from triton_backend.cli.json_output import emit

HELP = "print an instruction's indexing maps (output->input or input->output)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE.hlo",
                        help="an HLO text file; - reads standard input")
    parser.add_argument("--instruction", help="instruction name (default: the ENTRY root)")
    parser.add_argument("--direction", choices=("output-to-input", "input-to-output"),
                        default="output-to-input")
    parser.add_argument("--output", type=int, default=0, help="output (tuple leaf) index")
    parser.add_argument("--operand", type=int, help="operand index (all by default)")
    parser.add_argument("--multiline", action="store_true", help="the seed's multi-line form")


def _find(module, name: str | None):
    if name is None:
        return module.entry.root
    name = name.lstrip("%")
    for computation in module.computations:
        if computation.has_instruction(name):
            return computation.instruction(name)
    names = [i.name for c in module.computations for i in c.instructions]
    raise IndexingCommandError(f"no instruction named {name!r} in module {module.name}"
                               f"{did_you_mean(name, names, n=5)}",
                               where=f"--instruction {name}")


def _sorted_texts(maps, multiline: bool = False) -> list[str]:
    return sorted(m.to_string(multiline=multiline) for m in maps)


def describe(text: str, instruction: str | None = None, direction: str = "output-to-input",
             output: int = 0, operand: int | None = None) -> dict:
    """The ``--json`` object.

    >>> r = describe('''HloModule m
    ... ENTRY e {
    ...   p = f32[2,3] parameter(0)
    ...   ROOT t = f32[3,2] transpose(p), dimensions={1,0}
    ... }''')
    >>> r["operands"]
    [{'operand': 0, 'maps': ['(d0, d1) -> (d1, d0), domain: d0 in [0, 2], d1 in [0, 1]']}]
    """
    return _describe(text, instruction, direction, output, operand, multiline=False)


def _describe(text, instruction, direction, output, operand, multiline) -> dict:
    module = parse_hlo(text)
    # The analysis trusts the module's shapes and attributes: check them first, so that an
    # invalid module is a located HloVerifyError rather than an internal failure.
    verify_module(module)
    instr = _find(module, instruction)
    n_operands = len(instr.operands)
    if operand is not None and not 0 <= operand < n_operands:
        raise IndexingCommandError(
            f"{instr.opcode} {instr.name} has {n_operands} operands; --operand {operand} is out"
            " of range", where=f"--operand {operand}")
    if direction == "input-to-output":
        if operand is None:
            raise IndexingCommandError(
                "--direction input-to-output needs --operand K (which operand's maps to print)",
                where="--operand")
        holder = _holding(module, instr)
        per_output = input_to_output_indexing_per_output(instr, operand, holder)
        return {"instruction": instr.name, "direction": direction, "operand": operand,
                "outputs": [{"output": j, "maps": _sorted_texts(s, multiline)}
                            for j, s in enumerate(per_output)]}
    n_outputs = len(flatten_shape(instr.shape))
    if not 0 <= output < n_outputs:
        raise IndexingCommandError(
            f"{instr.opcode} {instr.name} has {n_outputs} outputs; --output {output} is out of"
            " range", where=f"--output {output}")
    holder = _holding(module, instr)
    per_operand = output_to_input_indexing(instr, holder, output_index=output)
    wanted = range(n_operands) if operand is None else [operand]
    return {"instruction": instr.name, "direction": direction, "output": output,
            "operands": [{"operand": k, "maps": _sorted_texts(per_operand[k], multiline)}
                         for k in wanted]}


def _holding(module, instr):
    # A fusion needs the module; any other instruction, the computation holding it.
    if instr.opcode == "fusion":
        return module
    for computation in module.computations:
        if computation.has_instruction(instr.name) and computation.instruction(instr.name) is instr:
            return computation
    return module


def run(args: argparse.Namespace) -> int:
    text = read_text(args.file)
    result = _describe(text, args.instruction, args.direction, args.output, args.operand,
                       multiline=args.multiline and not args.json)
    if args.json:
        emit("indexing", result)
        return 0
    print(f"{result['instruction']}: {result['direction']}")
    key = "operand" if "operands" in result else "output"
    groups = result[key + "s"]  # may be empty: an instruction without operands
    for group in groups:
        label = (f"output {result['output']} -> operand {group['operand']}" if key == "operand"
                 else f"operand {result['operand']} -> output {group['output']}")
        print(f"{label}:" + ("" if group["maps"] else " (not read)"))
        for text_ in group["maps"]:
            print("  " + text_.replace("\n", "\n  "))
    return 0
