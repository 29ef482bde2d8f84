"""``fusion-compile tile FILE.hlo [--fusion NAME] [--tile 1,128] [--ours] [--all] [--json]``.

For each fusion: its hero and emitter kind, its partition into subgraphs, the legal output
tilings ranked (blocks, bytes read and written, flops), the rejected ones with the reason,
the default choice with why, XLA's own ``block_level_fusion_config`` when present (honored
unless ``--ours``), and with ``--tile`` the tiled instruction graph.  A module with no fusions
(as JAX lowers it) is read as one single-op fusion per non-trivial ENTRY instruction.  Never
imports torch or triton.

The module is verified first.  ``--tile`` is checked by the rule ``run --tile`` and ``compile
--tile`` use (``tiling.policy.choice.check_requested_tiling``): an illegal tile is an error
(exit 1) with the same message; tile sizes belong to one fusion, so a module with several
needs ``--fusion``.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass

from fusion.analysis.computation_partitioner import partition_computation
from fusion.analysis.emitter_kind import analyze_computation, analyze_fusion
from fusion.errors import BadArgumentError, FusionCompilerError, UnsupportedOpError
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.opcodes import opcodes_with
from fusion.logs import get_logger
from tiling.policy.candidates import TilingReport
from tiling.policy.choice import check_requested_tiling, choose_tiling
from tiling.symbolic.tiled_fusion import (
    SymbolicTiledFusion,
    TilingError,
    analyze_computation_tiling,
    analyze_fusion_tiling,
)
from tiling.policy.xla_tiling_config import xla_tiling_of
from triton_backend.cli.check_command import read_verified_module
from triton_backend.cli.diagnostics import did_you_mean
from triton_backend.cli.json_output import emit

HELP = "tile fusions for Triton: legal output tilings, their costs, the default choice"

# Ops that are not worth a kernel of their own when reading an unfused module.
_TRIVIAL = opcodes_with("trivial")
_SHOWN = 10

_log = get_logger("triton_backend.cli")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE.hlo",
                        help="an HLO text file; - reads standard input")
    parser.add_argument("--fusion", help="only the fusion (or ENTRY instruction) of this name")
    parser.add_argument("--tile", help="output tile sizes, e.g. 1,128: print the tiled graph")
    parser.add_argument("--ours", action="store_true",
                        help="use our default even where XLA's block_level_fusion_config exists")
    parser.add_argument("--all", action="store_true", help="list every legal/rejected tiling")


@dataclass(frozen=True)
class FusionTarget:
    """A fusion to tile: a real fusion op, or an ENTRY op wrapped as a single-op fusion."""

    name: str
    computation: HloComputation
    fusion_instr: HloInstruction | None
    single_op: bool


def single_op_computation(entry: HloComputation, instr: HloInstruction) -> HloComputation:
    """``instr`` alone, its operands turned into parameters (a single-op fusion)."""
    params = []
    names = []
    for i, operand in enumerate(instr.operands):
        producer = entry.instruction(operand)
        name = f"param_{i}"
        params.append(HloInstruction(name, "parameter", producer.shape, (),
                                     (("parameter_number", i),)))
        names.append(name)
    body = instr.replace(operands=tuple(names))
    return HloComputation(f"single_op_{instr.name}", tuple(params) + (body,), instr.name)


def fusion_targets(module: HloModule, only: str | None = None) -> list[FusionTarget]:
    targets = [FusionTarget(i.name, module.computation(i.attr("calls")), i, False)
               for _, i in module.fusions()]
    if not targets:
        targets = [FusionTarget(i.name, single_op_computation(module.entry, i), None, True)
                   for i in module.entry.instructions if i.opcode not in _TRIVIAL]
    if only is not None:
        names = [t.name for t in targets]
        targets = [t for t in targets if t.name == only]
        if not targets:
            raise BadArgumentError(f"no fusion named {only!r} in module {module.name!r}"
                                   f"{did_you_mean(only, names)}", where="--fusion")
    return targets


def _parse_tile(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise BadArgumentError("--tile expects comma-separated integers, e.g. 1,128",
                               text=text) from None
    if not sizes or any(s < 1 for s in sizes):
        raise BadArgumentError("--tile sizes must be positive integers", text=text)
    return sizes


def describe_target(module: HloModule, target: FusionTarget, tile: tuple[int, ...] | None,
                    prefer_ours: bool) -> dict:
    """Everything reported for one fusion, as plain data (the ``--json`` entry plus the
    extra fields the text output prints)."""
    if target.fusion_instr is not None:
        analysis_kind = analyze_fusion(module, target.fusion_instr)
        tiling = analyze_fusion_tiling(module, target.fusion_instr)
        xla = xla_tiling_of(target.fusion_instr)
    else:
        analysis_kind = analyze_computation(target.computation, module)
        tiling = analyze_computation_tiling(target.computation, target.name)
        xla = None
    choice = choose_tiling(tiling, xla=xla, prefer_ours=prefer_ours)
    report = choice.report
    partition = partition_computation(target.computation)
    graph = None
    if tile is not None:
        _check_tile(target, tiling, tile)
        graph = _tiled_graph(tiling, tile)
    return {
        "name": target.name,
        "single_op": target.single_op,
        "kind": analysis_kind.kind.value,
        "hero": ", ".join(analysis_kind.heroes),
        "kind_reason": analysis_kind.reason,
        "partition": [s.name for s in partition.subgraphs],
        "output_dims": list(report.output_dims),
        "legal_tilings": len(report.legal),
        "default": _default_json(report),
        "chosen": None if not choice.found else {"tile_sizes": list(choice.tile_sizes),
                                                 "reason": choice.reason},
        "xla_tiling": None if xla is None else list(xla.tile_sizes),
        "xla_config": None if xla is None else xla.to_json(),
        "xla_problem": report.xla_problem,
        "not_tileable": list(report.not_tileable),
        "rejected": [r.to_json() for r in report.rejected],
        "legal": [c.to_json() for c in report.legal],
        "reread_factor": None if report.default is None else round(
            report.reread_factor(report.default), 3),
        "tiled_graph": graph,
    }


def _check_tile(target: FusionTarget, tiling: SymbolicTiledFusion, tile: tuple[int, ...]) -> None:
    """``run --tile``'s rule (``compiled_fusion.choose_fusion_tiling``): a preference of the
    ranking is allowed on request, anything else is illegal."""
    chunk, problem = check_requested_tiling(tiling, tile, None)
    if problem is not None and not problem.is_preference:
        instr = target.fusion_instr
        loc = instr.location if instr is not None else None
        raise UnsupportedOpError(f"fusion {target.name}: tile sizes {list(tile)}"
                                 + (f" with reduction chunk {chunk}" if chunk else "")
                                 + f" are illegal: {problem}", line=loc.line if loc else None,
                                 column=loc.column if loc else None)
    _log.info("fusion %s: --tile %s is legal%s", target.name, list(tile),
              f" (note: {problem})" if problem is not None else "")


def _default_json(report: TilingReport):
    c = report.default
    if c is None:
        return None
    return {"tile_sizes": list(c.tile_sizes), "reduction_chunk": c.reduction_chunk,
            "num_blocks": c.num_blocks, "bytes_read": c.total_bytes_read,
            "bytes_written": c.total_bytes_written, "reason": report.default_reason}


def _tiled_graph(tiling: SymbolicTiledFusion, tile: tuple[int, ...]) -> str:
    try:
        return tiling.instantiate(tile).to_string()
    except TilingError as err:
        return f"cannot tile with {list(tile)}: {err.message}"


def _format(entry: dict, show_all: bool) -> str:
    lines = [f"fusion {entry['name']}"
             + (" (single-op fusion of an ENTRY instruction: the module has no fusions)"
                if entry["single_op"] else "")]
    lines.append(f"  kind: {entry['kind']}; hero: {entry['hero']}")
    lines.append(f"    ({entry['kind_reason']})")
    lines.append(f"  partition: {', '.join(entry['partition'])}")
    lines.append(f"  output dims: {entry['output_dims']}; {entry['legal_tilings']} legal"
                 f" tilings, {len(entry['rejected'])} rejected")
    for reason in entry["not_tileable"]:
        lines.append(f"  not tileable: {reason}")
    legal = entry["legal"] if show_all else entry["legal"][:_SHOWN]
    if legal:
        lines.append("  legal tilings (best first; bytes are per block, reads with reuse):")
    for c in legal:
        chunk = f" chunk={c['reduction_chunk']}" if c["reduction_chunk"] else ""
        lines.append(
            f"    {tuple(c['tile_sizes'])}{chunk}: blocks={c['num_blocks']}"
            f" read={c['bytes_read']}B (with reuse {c['bytes_read_with_reuse']}B)"
            f" written={c['bytes_written']}B flops={c['flops']}"
            f" total_read={c['total_bytes_read']}B"
            + ("" if c["coalesced"] else " (not coalesced)"))
    if len(legal) < entry["legal_tilings"]:
        lines.append(f"    ... {entry['legal_tilings'] - len(legal)} more (--all)")
    rejected = entry["rejected"] if show_all else entry["rejected"][:_SHOWN]
    if rejected:
        lines.append("  rejected:")
    for r in rejected:
        lines.append(f"    {tuple(r['tile_sizes'])}: {r['reason']}")
    if len(rejected) < len(entry["rejected"]):
        lines.append(f"    ... {len(entry['rejected']) - len(rejected)} more (--all)")
    d = entry["default"]
    if d is None:
        lines.append("  default: none (no legal tiling)")
    else:
        lines.append(f"  default: {tuple(d['tile_sizes'])} -- {d['reason']}")
    if entry["xla_tiling"] is not None:
        status = "legal" if entry["xla_problem"] is None else f"rejected: {entry['xla_problem']}"
        cfg = entry["xla_config"]
        lines.append(f"  XLA's tiling: {tuple(entry['xla_tiling'])} num_warps={cfg['num_warps']}"
                     f" num_stages={cfg['num_stages']} ({status})")
    if entry["chosen"] is not None:
        lines.append(f"  chosen: {tuple(entry['chosen']['tile_sizes'])} -- "
                     f"{entry['chosen']['reason']}")
    if entry["tiled_graph"] is not None:
        lines.append("  tiled graph:")
        lines.extend("    " + line for line in entry["tiled_graph"].splitlines())
    return "\n".join(lines)


def _failed_entry(target: FusionTarget, message: str) -> dict:
    return {"name": target.name, "single_op": target.single_op, "kind": None, "hero": None,
            "kind_reason": message, "partition": [], "output_dims": [], "legal_tilings": 0,
            "default": None, "chosen": None, "xla_tiling": None, "xla_config": None,
            "xla_problem": None, "not_tileable": [message], "rejected": [], "legal": [],
            "reread_factor": None, "tiled_graph": None}


_JSON_KEYS = ("name", "kind", "hero", "legal_tilings", "default", "xla_tiling", "rejected")


def run(args: argparse.Namespace) -> int:
    module = read_verified_module(args.file)
    tile = _parse_tile(args.tile) if args.tile else None
    targets = fusion_targets(module, args.fusion)
    if tile is not None and len(targets) > 1:
        raise BadArgumentError(
            f"--tile gives the tile sizes of one fusion; module {module.name} has "
            f"{len(targets)}: name one with --fusion ({', '.join(t.name for t in targets[:8])}"
            + (", ...)" if len(targets) > 8 else ")"))
    entries = []
    for target in targets:
        try:
            entries.append(describe_target(module, target, tile, args.ours))
        except FusionCompilerError as err:
            if tile is not None:
                raise  # an illegal --tile (as run --tile reports it), or a fusion not tileable
            entries.append(_failed_entry(target, str(err)))  # cannot analyse one: say so, go on
    if args.json:
        out = []
        for e in entries:
            item = {k: e[k] for k in _JSON_KEYS}
            item["rejected"] = [{"tile_sizes": r["tile_sizes"], "reason": r["reason"]}
                                for r in e["rejected"]]
            item.update(single_op=e["single_op"], chosen=e["chosen"],
                        xla_problem=e["xla_problem"], not_tileable=e["not_tileable"],
                        tiled_graph=e["tiled_graph"])
            out.append(item)
        emit("tile", {"module": module.name, "fusions": out})
    else:
        if not module.fusions():
            print(f"module {module.name} has no fusions: each non-trivial ENTRY instruction"
                  " is tiled as a single-op fusion")
        print("\n\n".join(_format(e, args.all) for e in entries))
    return 0
