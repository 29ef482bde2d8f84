"""``compile_hlo``: a whole HLO module compiled to generated Triton kernels plus host glue.

``compile_hlo(text_or_module)`` parses and verifies the module, fuses it when it is unfused
(``tiling.fusion_pass.priority_fusion``; ``fuse=False`` skips it), wraps every remaining lone
op as a one-op fusion (``single_op_fusion``), and compiles every fusion that the host will
launch, once, up front: an op the backend cannot emit is an ``UnsupportedOpError`` here, with
the op, its line:column and the reason, never at run time.  The result is a
``module_runner.CompiledModule``: called with torch tensors (one per ENTRY parameter), it runs
the ENTRY computation (see ``module_runner`` for how: host programs, tiled layouts, devices).
A module compiled before with the same options is loaded from the module cache
(``runtime.module_cache``) instead; this module also makes that cache's key.

**Tuned tilings.**  A fusion that ``tiling`` does not name gets its tile sizes from the tuning
database (``tuning_db``, filled by ``fusion-compile autotune``) when it holds an entry for the
fusion on the tuning device: by default the detected GPU (``device_specs.detect_device``)
when kernels run on one, and none under the Triton interpreter, whose default tiling (large
blocks: it pays per program) suits it better than a GPU's tuned one.  ``tuning_device="h100"``
names a device explicitly (also on CPU), ``tuning_device=None`` turns the lookup off.  The
fusion's ``tiling_reason`` says when its sizes came from the database.

>>> import torch
>>> compiled = compile_hlo('''HloModule m
... ENTRY e {
...   x = f32[4] parameter(0)
...   c = f32[] constant(2)
...   b = f32[4] broadcast(c), dimensions={}
...   ROOT y = f32[4] multiply(x, b)
... }''')
>>> compiled(torch.tensor([1.0, 2.0, -3.0, 0.5]))[0].tolist()
[2.0, 4.0, -6.0, 1.0]
"""
from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from fusion.analysis.spmd_groups import device_counts, header_counts
from fusion.errors import BadArgumentError, FusionCompilerError, UnsupportedOpError
from fusion.gc_pause import paused_gc
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.ir.shape import ArrayShape, flatten_shape
from fusion.shapes.verifier import verify_module
from fusion.text.parser import parse_hlo, parse_module_header
from fusion.text.printer import print_hlo
from fusion.transforms.dot_algorithm import check_f32_dot_precision, with_f32_dot_precision
from fusion.transforms.plain_ops import plain_ops
from fusion.transforms.scan_tree import rewrite_tree_scans
from tiling.fusion_pass import priority_fusion  # called through the module: tests patch fuse_module there
from triton_backend.host.host_ops import host_executor
from triton_backend.host.input_validation import parameter_label, torch_dtype
from triton_backend.runtime import device_specs  # likewise detect_device
from triton_backend.runtime import module_cache, module_plan
from triton_backend.runtime.kernel_cache import KernelCache
from triton_backend.runtime.lazy_module import Unparsed
from triton_backend.runtime.launch_mode import configure_launch_mode
from triton_backend.runtime.tuning_db import TuningDb, tuned_configs
from triton_backend.driver import compiled_fusion  # likewise compile_fusion
from triton_backend.driver import fusion_split
from triton_backend.driver.cuda_graphs import check_capturable, check_mode
from triton_backend.driver.module_runner import (
    CompiledModule, constant_storages, empty_outputs, host_computations, host_program, located,
)
from triton_backend.driver.op_coverage import check_triton_coverage
from triton_backend.driver.process_world import (
    check_one_device, check_spmd_module, resolve_world,
)
from triton_backend.host.distributed import join_process_groups
from triton_backend.driver.single_op_fusion import wrap_lone_ops
from triton_backend.templates.dot.library_call import (
    LibraryDot, check_dot_library, library_dot_reason,
)

TileSizes = Sequence[int]

#: ``tuning_device`` default: the detected GPU's tuned tilings on a GPU, none on the interpreter.
AUTO = "auto"


def compile_hlo(text_or_module: str | HloModule, *, target: str | int | None = None,
                tiling: Mapping[str, TileSizes] | None = None, fuse: bool = True,
                physical_outputs: bool = False, tuning_device: str | None = AUTO,
                tuning_db: Any = None, cache: bool | None = None, rank: int | None = None,
                world_size: int | None = None, cuda_graph: bool | str = False,
                f32_dot_precision: str = "ieee", dot_library: str = AUTO) -> CompiledModule:
    """Compile every kernel of a module; the result runs the ENTRY computation on torch tensors.

    ``target`` (``"sm_80"``, ``"sm_90"``, 80, 90) keys the kernel cache; ``tiling`` maps fusion
    names of the compiled module (``CompiledModule.fusions``, or the report of
    ``fusion-compile compile``) to tile sizes (one power of two per output dim); ``fuse`` runs
    the fusion pass on ops left unfused.  ``physical_outputs`` returns results in tiled layouts
    as their physical buffers; ``tuning_device`` (``"auto"``, a device key such as ``"h100"``,
    or None) and ``tuning_db`` (a ``tuning_db.TuningDb``; default: ``$FUSION_TUNING_DB`` or the
    user cache) choose the tuned tilings used for fusions ``tiling`` does not name (module
    docstring).  Raises a ``FusionCompilerError`` (parse, verify, unsupported op) with its
    location on bad input.

    A module compiled before with the same options (``module_cache``: in this process, or
    its plan on disk) is loaded without fusion, tiling or code generation; ``cache=False``
    (or ``FUSION_MODULE_CACHE=0``) compiles it afresh and stores nothing.

    ``rank`` and ``world_size`` (default: those of an initialised ``torch.distributed``, else
    one device) run a module partitioned for ``world_size`` devices as that many processes,
    this one ``rank``: every rank compiles the same module, and each collective is a
    ``torch.distributed`` call (``host.distributed``; ``process_world`` checks the fit).

    ``cuda_graph`` (``True``, or ``"reuse-outputs"`` to get the graph's own output buffers)
    replays the module's launches from a CUDA graph captured on the first call
    (``cuda_graphs``); a module a graph cannot capture is refused here, located.  Without a
    GPU it does nothing.

    ``f32_dot_precision`` (``"ieee"``, ``"tf32"``, ``"tf32x3"``) is the opt-in to TF32 for f32
    dots, as ``torch.backends.cuda.matmul.allow_tf32`` is: every f32 x f32 dot without an
    ``algorithm`` and not asked for ``highest`` precision gets XLA's TF32 algorithm
    (``fusion.transforms.dot_algorithm``) before anything else; ``"ieee"`` keeps them exact.

    ``dot_library`` (``"auto"``, ``"never"``, ``"always"``) runs plain dot fusions (nothing
    fused) as one ``torch.einsum`` (cuBLAS on a GPU), by the rule of
    ``templates.dot.library_call``: ``"auto"`` for tensor-core-sized dots on a GPU only.
    """
    dot_library = check_dot_library(dot_library)
    text_or_module = _f32_dots_as(text_or_module, check_f32_dot_precision(f32_dot_precision))
    cuda_graph = check_mode(cuda_graph)
    rank, world_size = resolve_world(rank, world_size, lambda: _devices_asked(text_or_module))
    device = _pinned(configure_launch_mode())
    tuning_device = resolve_tuning_device(tuning_device, device)
    key = _module_key(text_or_module, target, tiling, fuse, physical_outputs, tuning_device,
                      tuning_db, device, world_size, dot_library) \
        if module_cache.enabled(cache) else None
    if key is not None:
        compiled = _cached(key, text_or_module, device, physical_outputs, tuning_device)
        if compiled is not None:
            return _graphed(_placed(compiled, rank, world_size), cuda_graph)
    # The compile builds O(n) objects that outlive it (IR, analyses, kernel modules): with
    # the collector on, its full collections walk them again and again (fusion.gc_pause).
    # Storing the plan stays inside: it allocates O(n) more (the printed module, its
    # locations, the JSON), which right after the compile set off full collections of the
    # whole heap (two on a 20,000-op chain, a tenth of the compile).
    with paused_gc():
        compiled = _compile(text_or_module, target, tiling, fuse, physical_outputs,
                            tuning_device, tuning_db, device, world_size, dot_library,
                            fusion_memo=key.parts()["text"]
                            if key is not None and isinstance(text_or_module, str) else None)
        if key is not None:
            _store(key, compiled)
    return _graphed(_placed(compiled, rank, world_size), cuda_graph)


def _f32_dots_as(text_or_module: str | HloModule, precision: str) -> str | HloModule:
    """The module to compile: ``text_or_module`` with its f32 dots given ``precision``'s
    algorithm, itself when none changes (then the module cache shares its entry with
    ``"ieee"``); the cache keys the changed module by its text, algorithms included."""
    if precision == "ieee":
        return text_or_module
    module = _parse(text_or_module)
    changed = with_f32_dot_precision(module, precision)
    return text_or_module if changed is module else changed


def _graphed(compiled: CompiledModule, cuda_graph: bool | str) -> CompiledModule:
    """``compiled`` replaying its launches from a CUDA graph when ``cuda_graph`` asks."""
    if not cuda_graph:
        return compiled
    check_capturable(compiled.module, host_computations(compiled.module), compiled.place)
    return replace(compiled, cuda_graph=cuda_graph)


def _devices_asked(text_or_module: str | HloModule) -> int:
    """The device count of the module's header (its header alone is parsed from text)."""
    if isinstance(text_or_module, HloModule):
        return device_counts(text_or_module).world
    return header_counts(parse_module_header(text_or_module)).world


def _placed(compiled: CompiledModule, rank: int, world_size: int) -> CompiledModule:
    """``compiled`` as process ``rank`` of ``world_size`` runs it: its process groups joined."""
    if world_size == 1:
        return compiled
    check_spmd_module(compiled.source_module, world_size)  # a cached plan was checked too
    return replace(compiled, place=join_process_groups(compiled.source_module, rank,
                                                       world_size))


def _store(key: module_cache.ModuleKey, compiled: CompiledModule) -> None:
    """Keep ``compiled`` in this process and its plan on disk under ``key``."""
    plan = module_plan.ModulePlan.of(compiled.module, compiled.source_module,
                                      compiled.fusions, compiled.fusion_mode,
                                      compiled.fusion_fallbacks, compiled.fusion_decisions)
    if plan is not None:
        module_cache.ModuleCache().store(key, plan)
    module_cache.remember(key, compiled)


def _compile(text_or_module: str | HloModule, target: str | int | None,
             tiling: Mapping[str, TileSizes] | None, fuse: bool, physical_outputs: bool,
             tuning_device: str | None, tuning_db: Any, device: torch.device,
             world_size: int = 1, dot_library: str = "never",
             fusion_memo: str | None = None) -> CompiledModule:
    """``compile_hlo`` without the module cache: parse, verify, fuse, compile every kernel
    (a plain dot chosen by ``dot_library``'s rule: a library call, ``_compile_one``).
    ``fusion_memo`` (the module text's hash, for a text): share the fusion pass's result with
    other compiles of the same text (``_fused``); None, as with ``cache=False``, runs the pass
    afresh.  Only a text is keyed: two module objects that print alike may still differ in the
    source locations their errors name."""
    # XLA's wrappers (async pairs, cuBLAS/cuDNN calls, nested fusions, maps) as the plain
    # ops they run (fusion.transforms.plain_ops).  A long fp8 scan becomes XLA:CPU's tree of
    # 16-wide scans, whose order decides its rounding (fused or not: every kernel runs what
    # this returns).
    source = rewrite_tree_scans(plain_ops(_parse(text_or_module)))
    verify_module(source)
    _check_entry_signature(source)
    if world_size > 1:
        check_spmd_module(source, world_size)
    # Every op the Triton path cannot run, located, before the fusion pass or any kernel.
    check_triton_coverage(source, canonicalized=fuse and bool(_lone_ops(source)),
                          devices=world_size)
    if world_size == 1:
        check_one_device(source)
    tiling = dict(tiling or {})
    attempts = _fusion_attempts() if fuse and _lone_ops(source) else [("unfused", None)]
    fallbacks: list[str] = []
    for number, (mode, options) in enumerate(attempts):
        if mode == "unfused":
            module, decisions = source, ()
        elif fusion_memo is not None:
            module, decisions = _fused(fusion_memo, source, mode, options)
        else:
            module, decisions = _fuse(source, options)
        module = wrap_lone_ops(module, _lone_ops(module))
        try:
            module, fusions, splits = _compile_fusions(
                module, tiling, _cache_target(target),
                _tuned(module, tuning_device, tuning_db, tiling),
                split=number == len(attempts) - 1,  # the last attempt: split, not refuse
                library=(dot_library, device.type == "cuda"))
            fallbacks.extend(splits)
            break
        except UnsupportedOpError as err:
            # A fusion the pass formed but the emitters cannot emit: fuse less, then not at
            # all; the unfused attempt's error (the op itself, located) is the one raised.
            if number == len(attempts) - 1:
                raise
            fallbacks.append(f"{mode}: {err.message}")
    programs = {name: host_program(module, module.computation(name), fusions, device)
                for name in host_computations(module)}
    return CompiledModule(module, source, fusions, programs, device, fusion_mode=mode,
                          fusion_fallbacks=tuple(fallbacks), fusion_decisions=tuple(decisions),
                          constant_storages=constant_storages(programs.values()),
                          physical_outputs=physical_outputs, tuning_device=tuning_device)


def _module_key(text_or_module: str | HloModule, target: str | int | None,
                tiling: Mapping[str, TileSizes] | None, fuse: bool, physical_outputs: bool,
                tuning_device: str | None, tuning_db: Any, device: torch.device,
                world_size: int = 1, dot_library: str = AUTO) -> module_cache.ModuleKey | None:
    """The module cache's key for a compile: the text and every option that changes its
    result; None when an input cannot be keyed (the compile then reports what is wrong)."""
    options = {"target": _cache_target(target) or "", "fuse": repr(bool(fuse)),
               "physical_outputs": repr(bool(physical_outputs)), "device": str(device),
               "tuning_device": repr(tuning_device), "dot_library": dot_library}
    if world_size > 1:  # the coverage a plan passed depends on it (one device or several)
        options["world_size"] = str(world_size)
    try:
        text = text_or_module if isinstance(text_or_module, str) else print_hlo(text_or_module)
        options["tiling"] = repr(sorted((str(name), tuple(sizes))
                                        for name, sizes in dict(tiling or {}).items()))
    except (FusionCompilerError, TypeError, ValueError, AttributeError):
        return None
    if tuning_device is not None:
        stamp = module_cache.tuning_db_stamp(tuning_db if tuning_db is not None else TuningDb())
        if stamp is None:
            return None
        options["tuning_db"] = stamp
    return module_cache.ModuleKey.of(text, options)


def _cached(key: module_cache.ModuleKey, text_or_module: str | HloModule, device: torch.device,
            physical_outputs: bool, tuning_device: str | None) -> CompiledModule | None:
    """The module compiled before under ``key``: kept in memory, or rebuilt from its plan."""
    compiled = module_cache.remembered(key)
    if compiled is not None:
        if isinstance(text_or_module, HloModule) and compiled.source_module is not text_or_module:
            compiled = replace(compiled, source_module=text_or_module)
        return compiled
    plan = module_cache.ModuleCache().load(key)
    if plan is None:
        return None
    try:
        compiled = _from_plan(plan, text_or_module, device, physical_outputs, tuning_device)
    except Exception as err:  # noqa: BLE001 - a plan is untrusted data: whatever breaks, recompile
        module_cache.log_unusable_plan(plan, err)
        return None
    if compiled is not None:
        module_cache.remember(key, compiled)
    return compiled


def _from_plan(plan: module_plan.ModulePlan, text_or_module: str | HloModule,
               device: torch.device, physical_outputs: bool,
               tuning_device: str | None) -> CompiledModule | None:
    """The compiled module a plan describes: its module decoded from the plan's snapshot
    (else parsed), its kernel files checked (imported at their first launch), its host
    programs rebuilt; None when a kernel file is unusable."""
    if isinstance(text_or_module, str) and plan.snapshot is not None:
        # The snapshot is the module that runs, fused or the given text's (the key holds the
        # text's hash): decoding it costs a fraction of a parse.
        module = plan.snapshot_module()
        source: Any = module if plan.module_text is None else Unparsed(text_or_module)
    else:
        if isinstance(text_or_module, str) and plan.module_text is not None:
            source = Unparsed(text_or_module)
        else:
            source = _parse(text_or_module)  # the module given is the module that runs
        module = plan.module(source)
    launched = [i.name for c in host_computations(module) for i in module.computation(c)
                if i.opcode == "fusion" and empty_outputs(i) is None]
    if launched != [f.name for f in plan.fusions]:
        raise module_plan.PlanError("its fusions are not the launched fusions of its module")
    fusions = plan.load_fusions(KernelCache().directory, module,
                                compiled_fusion.remade_library_call)
    if fusions is None:
        return None
    programs = {name: host_program(module, module.computation(name), fusions, device)
                for name in host_computations(module)}
    return CompiledModule(module, source, fusions, programs, device,
                          fusion_mode=plan.fusion_mode, fusion_fallbacks=plan.fusion_fallbacks,
                          fusion_decisions=plan.decisions,
                          constant_storages=constant_storages(programs.values()),
                          physical_outputs=physical_outputs, tuning_device=tuning_device)


def _pinned(device: torch.device) -> torch.device:
    """``cuda`` -> ``cuda:<current>``: constants are materialized there, so calls must match."""
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def _parse(text_or_module: str | HloModule) -> HloModule:
    if isinstance(text_or_module, HloModule):
        return text_or_module
    if not isinstance(text_or_module, str):
        raise TypeError(f"compile_hlo takes HLO text or an HloModule, not {type(text_or_module).__name__}")

    return parse_hlo(text_or_module)


def _check_entry_signature(module: HloModule) -> None:
    entry = module.entry
    for number, param in enumerate(entry.parameters):
        label = parameter_label(number, param)
        if not isinstance(param.shape, ArrayShape):
            raise located(UnsupportedOpError, f"{label} has tuple shape {param.shape}; compiled "
                           "modules take one tensor per parameter", param)
        _torch_dtype_at(param.shape, param, label)
    for shape in flatten_shape(entry.root.shape):
        _torch_dtype_at(shape, entry.root, f"ENTRY result %{entry.root.name}")


def _torch_dtype_at(shape: ArrayShape, instr: HloInstruction, label: str) -> None:
    try:
        torch_dtype(shape.dtype)
    except UnsupportedOpError as err:
        raise located(UnsupportedOpError, f"{label}: {err.message}", instr) from None



def _lone_ops(module: HloModule) -> dict[str, tuple[str, ...]]:
    """Per host computation, the ops that need a kernel but are not fusions yet."""
    device = torch.device("cpu")  # rules only decide here; nothing is materialized
    out: dict[str, tuple[str, ...]] = {}
    for name in host_computations(module):
        comp = module.computation(name)
        lone = tuple(i.name for i in comp.instructions
                     if i.opcode != "fusion" and host_executor(comp, i, device) is None)
        if lone:
            out[name] = lone
    return out


def _fusion_attempts() -> list[tuple[str, Any]]:
    """The fusion modes to try, most aggressive first."""
    return [("fused", priority_fusion.FusionOptions()),
            ("fused-single-output", priority_fusion.FusionOptions(multi_output=False)),
            ("unfused", None)]


def _fused(text_hash: str, source: HloModule, mode: str, options: Any) -> tuple[HloModule, tuple]:
    """``_fuse`` of ``source`` (parsed from the text hashed ``text_hash``), once per module
    text and mode in this process (``module_cache.remembered_fusion``)."""
    fused = module_cache.remembered_fusion(text_hash, mode)
    if fused is None:
        fused = _fuse(source, options)
        module_cache.remember_fusion(text_hash, mode, fused)
    return fused


def _fuse(module: HloModule, options: Any) -> tuple[HloModule, tuple]:
    result = priority_fusion.fuse_module(module, options=options)
    return result.module, tuple(result.decisions)


def _cache_target(target: str | int | None) -> str | None:
    """``"sm_90"``/``90`` -> ``"cuda:90"`` (the kernel-cache key)."""
    if target is None:
        return None
    text = str(target).strip().lower().removeprefix("sm_").removeprefix("cuda:")
    if not text.isdigit():
        raise FusionCompilerError(f"unknown target {target!r}; expected sm_80 or sm_90",
                                  where="target")
    return f"cuda:{int(text)}"


def resolve_tuning_device(requested: str | None, device: torch.device) -> str | None:
    """The device key whose tuned tilings apply when kernels run on ``device``: ``"auto"`` is
    the detected GPU's, and none under the interpreter (GPU tilings would be small blocks it
    pays per program for); any other value is returned as is.

    >>> resolve_tuning_device("auto", torch.device("cpu")) is None, resolve_tuning_device("h100", torch.device("cpu"))
    (True, 'h100')
    """
    if requested != AUTO:
        return requested
    if device.type != "cuda":
        return None
    spec = device_specs.detect_device(torch)
    return spec.key if spec is not None else None


@dataclass(frozen=True)
class _Tuned:
    """A tuning-database entry for one fusion: what ``compile_fusion`` takes, and where from."""

    tile_sizes: tuple[int, ...]
    reduction_chunk: int | None
    source: str
    num_warps: int | None = None
    num_stages: int | None = None


def _tuned(module: HloModule, device_key: str | None, db: Any,
           explicit: Mapping[str, TileSizes]) -> dict[str, _Tuned]:
    """The stored tilings of ``module``'s fusions that ``explicit`` does not name."""
    if device_key is None:
        return {}

    db = db if db is not None else TuningDb()
    return {name: _Tuned(tuple(config["tile_sizes"]), config.get("reduction_chunk"),
                         f"tuning database {db.path}, device {device_key}",
                         config.get("num_warps"), config.get("num_stages"))
            for name, config in tuned_configs(module, device_key, db).items()
            if name not in explicit}


def _compile_fusions(module: HloModule, tiling: dict[str, TileSizes], target: str | None,
                     tuned: Mapping[str, _Tuned], split: bool = False,
                     library: tuple[str, bool] = ("never", False),
                     ) -> tuple[HloModule, dict[str, Any], tuple[str, ...]]:
    """Every launched fusion of ``module`` compiled, by name.  With ``split``, a contraction
    fusion the templates refuse is split in two kernels (``_split_or_raise``): the module
    returned is then the split one, and the reasons say so.  ``library``: the
    ``dot_library`` option and whether kernels run on a GPU (``_compile_one``)."""
    fusions = [(module.computation(c), i) for c in host_computations(module)
               for i in module.computation(c).instructions if i.opcode == "fusion"]
    names = {i.name for _, i in fusions}
    launched = [(c, i) for c, i in fusions if empty_outputs(i) is None]
    unknown = sorted(set(tiling) - names)
    if unknown:
        close = sorted({c for u in unknown for c in difflib.get_close_matches(u, names, n=3)})
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise BadArgumentError(
            f"names fusion(s) {', '.join(unknown)} not in the compiled module; its fusions are "
            f"{', '.join(sorted(names)) or 'none'}{hint}", where="tiling")
    compiled: dict[str, Any] = {}
    splits: list[str] = []
    for comp, instr in launched:
        try:
            compiled[instr.name] = _compile_one(module, instr, tiling, target, tuned, library)
        except UnsupportedOpError as err:
            refused = _unsupported_in(err, module, comp, instr)
            if not split:
                raise refused from None
            module, reason = _split_or_raise(module, comp, instr, refused, compiled, tiling,
                                             target)
            splits.append(reason)
    return module, compiled, tuple(splits)


def _split_or_raise(module: HloModule, comp: HloComputation, instr: HloInstruction,
                    refused: UnsupportedOpError, compiled: dict[str, Any],
                    tiling: dict[str, TileSizes], target: str | None) -> tuple[HloModule, str]:
    """A contraction fusion the templates refused, run as two kernels (``fusion_split``):
    the module with its parts compiled into ``compiled``, and why.  ``refused`` stands when
    it cannot be split or a part is refused too (the error then names the fusion given)."""
    split = fusion_split.split_at_contraction(module, comp, instr)
    if split is None:
        raise refused
    try:
        for part in (split.head, split.tail):
            compiled[part.name] = _compile_one(split.module, part, tiling, target, {})
    except UnsupportedOpError:
        raise refused from None
    return split.module, (f"one kernel for fusion {instr.name} of computation {comp.name}: "
                          f"it runs as {split.head.name} (its {split.contraction} through "
                          f"{split.head_root}) and {split.tail.name} (the rest), since "
                          f"{refused.message}")


def _compile_one(module: HloModule, instr: HloInstruction, tiling: dict[str, TileSizes],
                 target: str | None, tuned: Mapping[str, _Tuned],
                 library: tuple[str, bool] = ("never", False)) -> Any:
    """One launched fusion compiled: a plain dot the ``dot_library`` rule gives the library
    as a ``LibraryDot`` (no kernel); else with its tuned sizes, given sizes or the default."""
    reason = library_dot_reason(module, instr, library[0], library[1], instr.name in tiling)
    if reason is not None:
        return LibraryDot.of(module, instr, reason)
    if instr.name in tuned:
        return _compile_tuned(module, instr, tuned[instr.name], target)
    sizes = tiling.get(instr.name)
    return compiled_fusion.compile_fusion(
        module, instr, tile_sizes=None if sizes is None else tuple(sizes), target=target)


def _compile_tuned(module: HloModule, instr: HloInstruction, tuned: _Tuned,
                   target: str | None) -> Any:
    """``compile_fusion`` with stored sizes; a stale entry the backend now refuses (another
    emitter version, a legality rule) falls back to the default tiling, saying why."""
    sizes = list(tuned.tile_sizes)
    try:
        compiled = compiled_fusion.compile_fusion(
            module, instr, tile_sizes=tuned.tile_sizes, target=target,
            reduction_chunk=tuned.reduction_chunk, num_warps=tuned.num_warps,
            num_stages=tuned.num_stages)
    except UnsupportedOpError as err:
        compiled = compiled_fusion.compile_fusion(module, instr, target=target)
        return replace(compiled, tiling_reason=f"tuned tile sizes {sizes} ({tuned.source}) "
                       f"refused ({err.message}); {compiled.tiling_reason}")
    return replace(compiled, tiling_reason=f"tuned tile sizes {sizes} ({tuned.source}); "
                   f"{compiled.tiling_reason}")


def _unsupported_in(err: UnsupportedOpError, module: HloModule, comp: HloComputation,
                    fusion_instr: HloInstruction) -> UnsupportedOpError:
    """``err`` with a line:column: of the op it names if known, else of the fusion."""
    if err.line is not None:
        return err
    fused = module.computation(fusion_instr.attr("calls"))
    instr = fusion_instr
    if err.where and fused.has_instruction(err.where) and fused.instruction(err.where).location:
        instr = fused.instruction(err.where)
    elif fusion_instr.location is None and fused.has_instruction(fused.root_name):
        instr = fused.root
    message = err.message
    if err.where and err.where != fusion_instr.name and err.where not in message:
        message = f"{err.where}: {message}"
    loc = instr.location
    return UnsupportedOpError(message, line=loc.line if loc else None,
                              column=loc.column if loc else None, text=err.text,
                              expected=err.expected,
                              where=f"fusion {fusion_instr.name} of computation {comp.name}")


__all__ = ["AUTO", "compile_hlo", "resolve_tuning_device"]
