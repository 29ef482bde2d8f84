"""``fusion-compile compile FILE.hlo -o DIR [--target sm_80|sm_90] [--device h100] [--tile ...] [--no-fuse]``.

Compiles every fusion the module launches (``triton_backend.compile_hlo``) and writes to DIR:

* ``kernel_<fusion>.py`` for each kernel (the fusion name sanitized, so no file can shadow a
  package), copied from the kernel cache (each runs on its own: ``python DIR/kernel_<fusion>.py``);
* ``report.json`` and ``report.txt``: per fusion its emitter kind and why, input and output
  shapes, tiling, grid, ``num_warps``, compulsory bytes (inputs and outputs, each once), and
  the cost model's modeled DRAM bytes, predicted time and % of the HBM roofline on
  ``--device`` (``triton_backend.runtime.device_specs``: h100 by default); per module the
  kernel count, the compulsory bytes of the module's own inputs and outputs, the bytes the
  kernels move and the modeled bytes, each over the compulsory bytes;
* with ``--target``, ``kernel_<fusion>.sm_NN.ptx`` and ``.cubin`` compiled without a GPU
  (Triton's ``GPUTarget`` and the wheel's ``ptxas``), and the registers, spills and shared
  memory of each kernel in the report.

DIR must be new, empty, or a directory this command wrote before (recognised by its
``report.json``): the files that report lists are removed first, so no stale kernel, PTX or
cubin stays beside the new ones.  Any other directory is refused unless ``--force``.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from fusion.errors import BadArgumentError, OutputPathError
from fusion.logs import get_logger
from triton_backend.cli.run_command import add_compile_options, parse_tiling
from triton_backend.cli.check_command import read_verified_module
from triton_backend.cli.json_output import emit
from triton_backend.reports.compile_report import build_report, compile_for_target, write_kernels
from triton_backend.reports.report_text import render_text, write_report
from triton_backend.runtime.device_specs import device_spec

HELP = "compile an HLO module's fusions to Triton kernel files, with a report (and PTX/cubin)"

TARGETS = {"sm_80": 80, "sm_90": 90}
REPORT_FILES = ("report.json", "report.txt")

_log = get_logger("triton_backend.cli")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE.hlo",
                        help="HLO text (as XLA or JAX prints it); - reads standard input")
    parser.add_argument("-o", "--output-dir", required=True, metavar="DIR",
                        help="directory for the kernel files and the report: new, empty, or "
                             "written by this command before")
    parser.add_argument("--force", action="store_true",
                        help="write into DIR even if it holds files this command did not write")
    parser.add_argument("--target", choices=sorted(TARGETS),
                        help="also compile to PTX and cubin for this GPU (no GPU needed)")
    parser.add_argument("--device", default="h100", metavar="NAME",
                        help="GPU the cost model predicts each kernel's time on "
                             "(a100-40gb, a100-80gb, h100, h200; default h100)")
    add_compile_options(parser)


def files_of_report(report_path: Path) -> list[str] | None:
    """The files a ``report.json`` says this command wrote (None: not such a report).

    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "report.json"
    >>> _ = path.write_text('{"fusions": [{"kernel_file": "kernel_f.py", "target": null}]}')
    >>> files_of_report(path)
    ['report.json', 'report.txt', 'kernel_f.py']
    >>> _ = path.write_text('{"something": "else"}')
    >>> files_of_report(path) is None
    True
    """
    try:
        report = json.loads(report_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    fusions = report.get("fusions") if isinstance(report, dict) else None
    if not isinstance(fusions, list) or not all(
            isinstance(f, dict) and isinstance(f.get("kernel_file"), str) for f in fusions):
        return None
    names = list(REPORT_FILES)
    for entry in fusions:
        names.append(entry["kernel_file"])
        target = entry.get("target")
        if isinstance(target, dict):
            names += [target[k] for k in ("ptx_file", "cubin_file") if isinstance(target.get(k), str)]
    # Only plain names inside DIR: a report edited to say "../x" must not delete anything else.
    return [n for n in names if n and Path(n).name == n and n not in (".", "..")]


def stale_files(out_dir: Path, force: bool) -> list[str]:
    """Check ``out_dir`` (module docstring) before any work; returns this command's earlier
    files in it, to remove once the new ones are ready to be written."""
    if out_dir.exists() and not out_dir.is_dir():
        raise OutputPathError(f"{out_dir} exists and is not a directory", where="-o")
    if not out_dir.exists():
        return []
    ours = files_of_report(out_dir / "report.json")
    present = sorted(p.name for p in out_dir.iterdir())
    if ours is None and present and not force:
        shown = ", ".join(present[:5]) + (", ..." if len(present) > 5 else "")
        raise OutputPathError(
            f"{out_dir} is not empty ({shown}) and was not written by fusion-compile compile "
            "(no report.json of it); choose a new or empty directory, or pass --force",
            where="-o")
    return [n for n in ours or () if (out_dir / n).is_file() or (out_dir / n).is_symlink()]


def prepare_output_dir(out_dir: Path, stale: list[str]) -> None:
    """Create ``out_dir`` and remove the ``stale`` files of an earlier compile from it."""
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise OutputPathError(f"cannot create {out_dir}: {err.strerror}", where="-o") from None
    for name in stale:
        (out_dir / name).unlink(missing_ok=True)
    if stale:
        _log.info("removed %d stale file(s) of an earlier compile from %s", len(stale), out_dir)


def run(args: argparse.Namespace) -> int:
    from triton_backend.driver.module_compiler import compile_hlo  # noqa: PLC0415

    try:  # an unknown device is an error before anything is compiled
        device_spec(args.device)
    except ValueError as err:
        raise BadArgumentError(str(err), where="--device") from None
    tiling = parse_tiling(args.tile)
    out_dir = Path(args.output_dir)
    removed = stale_files(out_dir, args.force)  # a refused directory fails before any work
    module = read_verified_module(args.file)
    compiled = compile_hlo(module, target=args.target, tiling=tiling, fuse=not args.no_fuse,
                           f32_dot_precision=args.f32_dot_precision,
                           dot_library=args.dot_library)
    report = build_report(compiled, device=args.device)
    # Only now, with everything compiled: a failed compile leaves the directory as it was.
    prepare_output_dir(out_dir, removed)
    report, (json_path, text_path) = write_output_files(compiled, report, out_dir, args.target)
    written = files_written(report.to_json())
    if args.json:
        emit("compile", {"output_dir": str(out_dir), "files": written, "removed": removed,
                         "report": report.to_json()})
        return 0
    print(render_text(report), end="")
    if removed:
        print(f"removed {len(removed)} file(s) of the earlier compile in {out_dir}")
    print(f"{len(report.fusions)} kernel file(s), {json_path.name} and {text_path.name} "
          f"written to {out_dir}")
    return 0


def write_output_files(compiled, report, out_dir: Path, target: str | None):
    """Write the kernels (and with ``target`` their PTX and cubin), then the reports; returns
    the report (with the target's numbers) and the reports' paths.

    Each file is written whole or not at all (``runtime.atomic_files``); if one cannot be (a
    full disk), the files this compile already wrote are removed too, so DIR never holds a
    kernel set without its report, and the error names DIR and why.
    """
    try:
        write_kernels(compiled, report, out_dir)
        if target:
            report = compile_for_target(report, out_dir, TARGETS[target])
        return report, write_report(report, out_dir)
    except BaseException as err:
        names = files_written(report.to_json())
        if target:  # the child may have written some before failing; the report lists none
            names += [Path(f.kernel_file).with_suffix(f".{target}.{kind}").name
                      for f in report.fusions for kind in ("ptx", "cubin")]
        for name in names:
            (out_dir / name).unlink(missing_ok=True)
        if isinstance(err, OSError):
            why = err.strerror or str(err)
            raise OutputPathError(f"cannot write the files of this compile into {out_dir}: "
                                  f"{why}; none of them was left there", where="-o") from None
        raise


def files_written(report_json: dict[str, Any]) -> list[str]:
    """The files of a compile, as its report lists them (kernels, PTX/cubin, the reports)."""
    names = [f["kernel_file"] for f in report_json["fusions"]]
    for f in report_json["fusions"]:
        target = f.get("target") or {}
        names += [target[k] for k in ("ptx_file", "cubin_file") if target.get(k)]
    return names + list(REPORT_FILES)
