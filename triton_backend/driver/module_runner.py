"""``compile_hlo``: a whole HLO module as generated Triton kernels plus host glue.

``compile_hlo(text_or_module)`` parses and verifies the module, fuses it when it is unfused
(``tiling.fusion_pass.priority_fusion``; ``fuse=False`` skips it), wraps every remaining lone
op as a one-op fusion (``single_op_fusion``), and compiles every fusion that the host will
launch, once, up front: an op the backend cannot emit is an ``UnsupportedOpError`` here, with
the op, its line:column and the reason, never at run time.  Calling the result with torch
tensors (one per ENTRY parameter) runs the ENTRY computation: kernels for the fusions, the
host (``host_ops``) for parameters, tuples, views, constants and control flow.  It returns the
ENTRY result flattened to a tuple of tensors.

**Tiled layouts.**  Tensors cross the ENTRY boundary in their LOGICAL form (the HLO's dtype and
dims) even when the ENTRY signature has tiled or word-packed layouts (``bf16[37,300]{1,0:
T(8,128)(2,1)}``): such an argument is packed on the host (``host_packing.pack_tensor``, padding
zero); an argument that is already the flat physical buffer (``input_validation.
physical_buffer``: 1-D, its length and dtype, e.g. ``torch.uint32`` words) is taken as is.
Such a result is unpacked to its logical tensor, unless ``physical_outputs=True`` (on
``compile_hlo`` or on the call) asks for the physical buffers (padding zero).  Inside the
module such values stay physical between kernels (every kernel reads and writes them so), and
``call``/``while``/``conditional`` must pass them to computations declaring the same layout.

**Tuned tilings.**  A fusion that ``tiling`` does not name gets its tile sizes from the tuning
database (``tuning_db``, filled by ``fusion-compile autotune``) when it holds an entry for the
fusion on the tuning device: by default the detected GPU (``device_specs.detect_device``)
when kernels run on one, and none under the Triton interpreter, whose default tiling (large
blocks: it pays per program) suits it better than a GPU's tuned one.  ``tuning_device="h100"``
names a device explicitly (also on CPU), ``tuning_device=None`` turns the lookup off.  The
fusion's ``tiling_reason`` says when its sizes came from the database.

Without a CUDA device the kernels run under the Triton interpreter on CPU tensors
(``launch_mode``); with one, inputs must be CUDA tensors on the device current at compile time.

Results are new values, as in XLA without buffer donation (which is not supported): the
caller's tensors are never written, not even by a fusion XLA would emit in place (a
dynamic-update-slice of parameter 0), and no output shares storage with an input, a constant
or another output (a tuple returning one value twice gives two tensors).

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
from contextlib import nullcontext
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import torch

from fusion.errors import BadArgumentError, FusionCompilerError, UnsupportedOpError
from fusion.evaluator.control_flow_ops import check_iteration_limit
from fusion.gc_pause import paused_gc
from fusion.analysis.computation_partitioner import post_order
from fusion.ir.hlo_module import HloComputation, HloInstruction, HloModule
from fusion.ir.shape import ArrayShape, Shape, TupleShape, flatten_shape
from triton_backend.host.host_ops import (
    CONTROL_FLOW_OPCODES, Executor, HostContext, Value, host_executor,
)
from triton_backend.host.input_validation import (
    parameter_label, torch_dtype, unpack_physical, validate_arguments,
)
from triton_backend.runtime.lazy_module import ParsedWhenRead, Unparsed
from triton_backend.runtime.launch_mode import configure_launch_mode
from triton_backend.driver.op_coverage import check_triton_coverage
from triton_backend.driver.single_op_fusion import wrap_lone_ops
from fusion.shapes.verifier import verify_module
from fusion.text.parser import parse_hlo
from tiling.fusion_pass import priority_fusion  # called through the module: tests patch fuse_module there
from triton_backend.driver import compiled_fusion  # likewise compile_fusion
from triton_backend.runtime import module_cache
from triton_backend.runtime.kernel_cache import KernelCache
from fusion.text.printer import print_hlo
from triton_backend.runtime import device_specs  # likewise detect_device
from triton_backend.runtime.tuning_db import TuningDb, tuned_configs
from triton_backend.lowering.emitter.addressing import is_physical_layout

TileSizes = Sequence[int]

#: ``tuning_device`` default: the detected GPU's tuned tilings on a GPU, none on the interpreter.
AUTO = "auto"


@dataclass(frozen=True)
class Step:
    """One instruction of a host program: how to run it and which values die after it."""

    name: str
    operands: tuple[str, ...]
    execute: Executor
    release: tuple[str, ...]
    constant: Value | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Program:
    """A host-executed computation: its steps in dependency order and its root."""

    name: str
    steps: tuple[Step, ...]
    root: str


@dataclass(frozen=True)
class CompiledModule:
    """A module ready to run: call it with one torch tensor per ENTRY parameter.

    ``module`` is what runs (fused, lone ops wrapped); ``source_module`` what was given (a
    warm compile of text parses it when it is first read);
    ``fusions`` maps each launched fusion's name to its ``CompiledFusion`` (``kernel_path``,
    ``source``, ``grid``, ``tile_sizes``, ``kind``); a fusion whose outputs all have zero
    elements launches nothing and is not there.  ``fusion_mode`` says how the module was
    fused: ``"fused"`` (the fusion pass), ``"fused-single-output"`` (the pass without
    multi-output fusion, after the backend rejected a multi-output fusion) or ``"unfused"``
    (XLA's fusions only, lone ops as one-op fusions); ``fusion_fallbacks`` says why a more
    aggressive mode was given up.  ``physical_outputs`` is the default of the call's option
    of that name (tiled results as physical buffers); ``tuning_device`` the device key whose
    tuned tilings were looked up (None: none were).
    """

    module: HloModule
    source_module: HloModule = ParsedWhenRead()
    fusions: Mapping[str, Any]
    programs: Mapping[str, Program] = field(repr=False)
    device: torch.device
    fusion_mode: str = "unfused"
    fusion_fallbacks: tuple[str, ...] = ()
    fusion_decisions: tuple = field(default=(), repr=False)
    constant_storages: frozenset[int] = field(default=frozenset(), repr=False)
    physical_outputs: bool = False
    tuning_device: str | None = None

    def __call__(self, *args: torch.Tensor, physical_outputs: bool | None = None,
                 max_while_iterations: int | None = None) -> tuple[torch.Tensor, ...]:
        """Run the ENTRY computation; see the module docstring for tiled layouts.

        ``max_while_iterations`` (default None: unbounded, as XLA) stops a while loop still
        running after that many iterations with an ``EvaluationError`` naming it.
        """
        check_iteration_limit(max_while_iterations)
        entry = self.module.entry
        tensors = validate_arguments(entry.parameters, args, self.device,
                                     computation=f"ENTRY {entry.name}")
        # Triton launches on the current CUDA device: make it the one the constants live on.
        with torch.cuda.device(self.device) if self.device.type == "cuda" else nullcontext():
            result = self.call_computation(entry.name, tensors, max_while_iterations)
        outputs = _flatten(result)
        if not (self.physical_outputs if physical_outputs is None else physical_outputs):
            outputs = [unpack_physical(t, s)
                       for t, s in zip(outputs, flatten_shape(entry.root.shape))]
        return _fresh_outputs(outputs, tensors, self.constant_storages)

    def call_computation(self, name: str, arguments: Sequence[Value],
                         max_while_iterations: int | None = None) -> Value:
        """Run the host program of computation ``name`` on ``arguments``."""
        program = self.programs[name]
        ctx = HostContext(tuple(arguments),
                          partial(self.call_computation, max_while_iterations=max_while_iterations),
                          max_while_iterations)
        env: dict[str, Value] = {}
        for step in program.steps:
            env[step.name] = step.execute([env[o] for o in step.operands], ctx)
            for dead in step.release:
                env.pop(dead, None)
        return env[program.root]


def compile_hlo(text_or_module: str | HloModule, *, target: str | int | None = None,
                tiling: Mapping[str, TileSizes] | None = None, fuse: bool = True,
                physical_outputs: bool = False, tuning_device: str | None = AUTO,
                tuning_db: Any = None, cache: bool | None = None) -> CompiledModule:
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
    """
    device = _pinned(configure_launch_mode())
    tuning_device = resolve_tuning_device(tuning_device, device)
    key = _module_key(text_or_module, target, tiling, fuse, physical_outputs, tuning_device,
                      tuning_db, device) if module_cache.enabled(cache) else None
    if key is not None:
        compiled = _cached(key, text_or_module, device, physical_outputs, tuning_device)
        if compiled is not None:
            return compiled
    # The compile builds O(n) objects that outlive it (IR, analyses, kernel modules): with
    # the collector on, its full collections walk them again and again (fusion.gc_pause).
    with paused_gc():
        compiled = _compile(text_or_module, target, tiling, fuse, physical_outputs,
                            tuning_device, tuning_db, device)
    if key is not None:
        plan = module_cache.ModulePlan.of(compiled.module, compiled.source_module,
                                          compiled.fusions, compiled.fusion_mode,
                                          compiled.fusion_fallbacks, compiled.fusion_decisions)
        if plan is not None:
            module_cache.ModuleCache().store(key, plan)
        module_cache.remember(key, compiled)
    return compiled


def _compile(text_or_module: str | HloModule, target: str | int | None,
             tiling: Mapping[str, TileSizes] | None, fuse: bool, physical_outputs: bool,
             tuning_device: str | None, tuning_db: Any, device: torch.device) -> CompiledModule:
    """``compile_hlo`` without the module cache: parse, verify, fuse, compile every kernel."""
    source = _parse(text_or_module)
    verify_module(source)
    _check_entry_signature(source)
    # Every op the Triton path cannot run, located, before the fusion pass or any kernel.
    check_triton_coverage(source, canonicalized=fuse and bool(_lone_ops(source)))
    tiling = dict(tiling or {})
    attempts = _fusion_attempts() if fuse and _lone_ops(source) else [("unfused", None)]
    fallbacks: list[str] = []
    for number, (mode, options) in enumerate(attempts):
        module, decisions = _fuse(source, options) if mode != "unfused" else (source, ())
        module = wrap_lone_ops(module, _lone_ops(module))
        try:
            fusions = _compile_fusions(module, tiling, _cache_target(target),
                                       _tuned(module, tuning_device, tuning_db, tiling))
            break
        except UnsupportedOpError as err:
            # A fusion the pass formed but the emitters cannot emit: fuse less, then not at
            # all; the unfused attempt's error (the op itself, located) is the one raised.
            if number == len(attempts) - 1:
                raise
            fallbacks.append(f"{mode}: {err.message}")
    programs = {name: _program(module, module.computation(name), fusions, device)
                for name in host_computations(module)}
    return CompiledModule(module, source, fusions, programs, device, fusion_mode=mode,
                          fusion_fallbacks=tuple(fallbacks), fusion_decisions=tuple(decisions),
                          constant_storages=_constant_storages(programs.values()),
                          physical_outputs=physical_outputs, tuning_device=tuning_device)


def _module_key(text_or_module: str | HloModule, target: str | int | None,
                tiling: Mapping[str, TileSizes] | None, fuse: bool, physical_outputs: bool,
                tuning_device: str | None, tuning_db: Any,
                device: torch.device) -> module_cache.ModuleKey | None:
    """The module cache's key for a compile: the text and every option that changes its
    result; None when an input cannot be keyed (the compile then reports what is wrong)."""
    options = {"target": _cache_target(target) or "", "fuse": repr(bool(fuse)),
               "physical_outputs": repr(bool(physical_outputs)), "device": str(device),
               "tuning_device": repr(tuning_device)}
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


def _from_plan(plan: module_cache.ModulePlan, text_or_module: str | HloModule,
               device: torch.device, physical_outputs: bool,
               tuning_device: str | None) -> CompiledModule | None:
    """The compiled module a plan describes: its module parsed, its kernel files checked
    (imported at their first launch), its host programs rebuilt; None when a kernel file is
    unusable."""
    if isinstance(text_or_module, str) and plan.module_text is not None:
        source: Any = Unparsed(text_or_module)
    else:
        source = _parse(text_or_module)  # the module given is the module that runs
    module = plan.module(source)
    launched = [i.name for c in host_computations(module) for i in module.computation(c)
                if i.opcode == "fusion" and _empty_outputs(i) is None]
    if launched != [f.name for f in plan.fusions]:
        raise module_cache.PlanError("its fusions are not the launched fusions of its module")
    fusions = plan.load_fusions(KernelCache().directory)
    if fusions is None:
        return None
    programs = {name: _program(module, module.computation(name), fusions, device)
                for name in host_computations(module)}
    return CompiledModule(module, source, fusions, programs, device,
                          fusion_mode=plan.fusion_mode, fusion_fallbacks=plan.fusion_fallbacks,
                          fusion_decisions=plan.decisions,
                          constant_storages=_constant_storages(programs.values()),
                          physical_outputs=physical_outputs, tuning_device=tuning_device)


def host_computations(module: HloModule) -> tuple[str, ...]:
    """The ENTRY and every computation it reaches through call/while/conditional, callees first.

    >>> from fusion.text.parser import parse_hlo
    >>> host_computations(parse_hlo('''HloModule m
    ... f { a = f32[] parameter(0)
    ...     ROOT n = f32[] negate(a) }
    ... ENTRY e { x = f32[] parameter(0)
    ...     ROOT c = f32[] call(x), to_apply=f }'''))
    ('f', 'e')
    """
    order: list[str] = []
    seen: set[str] = {module.entry_name}

    def callees(name: str):
        for instr in module.computation(name).instructions:
            if instr.opcode in CONTROL_FLOW_OPCODES:
                yield from instr.called_computations()

    # Depth-first, callees first, with an explicit stack: calls may nest thousands deep.
    stack = [(module.entry_name, callees(module.entry_name))]
    while stack:
        name, pending = stack[-1]
        callee = next((c for c in pending if c not in seen), None)
        if callee is None:
            stack.pop()
            order.append(name)
            continue
        seen.add(callee)
        stack.append((callee, callees(callee)))
    return tuple(order)


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
            raise _located(UnsupportedOpError, f"{label} has tuple shape {param.shape}; compiled "
                           "modules take one tensor per parameter", param)
        _torch_dtype_at(param.shape, param, label)
    for shape in flatten_shape(entry.root.shape):
        _torch_dtype_at(shape, entry.root, f"ENTRY result %{entry.root.name}")


def _torch_dtype_at(shape: ArrayShape, instr: HloInstruction, label: str) -> None:
    try:
        torch_dtype(shape.dtype)
    except UnsupportedOpError as err:
        raise _located(UnsupportedOpError, f"{label}: {err.message}", instr) from None


def _located(cls: type[FusionCompilerError], message: str, instr: HloInstruction,
             where: str | None = None) -> FusionCompilerError:
    loc = instr.location
    return cls(message, line=loc.line if loc else None, column=loc.column if loc else None,
               where=where or instr.name)


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


def _compile_fusions(module: HloModule, tiling: dict[str, TileSizes],
                     target: str | None, tuned: Mapping[str, _Tuned]) -> dict[str, Any]:
    fusions = [(module.computation(c), i) for c in host_computations(module)
               for i in module.computation(c).instructions if i.opcode == "fusion"]
    names = {i.name for _, i in fusions}
    launched = [(c, i) for c, i in fusions if _empty_outputs(i) is None]
    unknown = sorted(set(tiling) - names)
    if unknown:
        close = sorted({c for u in unknown for c in difflib.get_close_matches(u, names, n=3)})
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise BadArgumentError(
            f"names fusion(s) {', '.join(unknown)} not in the compiled module; its fusions are "
            f"{', '.join(sorted(names)) or 'none'}{hint}", where="tiling")
    compiled: dict[str, Any] = {}
    for comp, instr in launched:
        sizes = tiling.get(instr.name)
        try:
            if instr.name in tuned:
                compiled[instr.name] = _compile_tuned(module, instr, tuned[instr.name], target)
            else:
                compiled[instr.name] = compiled_fusion.compile_fusion(
                    module, instr, tile_sizes=None if sizes is None else tuple(sizes),
                    target=target)
        except UnsupportedOpError as err:
            raise _unsupported_in(err, module, comp, instr) from None
    return compiled


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


def _program(module: HloModule, comp: HloComputation, fusions: Mapping[str, Any],
             device: torch.device) -> Program:
    order = post_order(comp)
    last_use: dict[str, int] = {}
    for k, name in enumerate(order):
        for operand in comp.instruction(name).operands:
            last_use[operand] = k
    steps = []
    for k, name in enumerate(order):
        instr = comp.instruction(name)
        if instr.opcode in CONTROL_FLOW_OPCODES or instr.opcode in _PASS_THROUGH_OPCODES:
            _check_carried_layouts(module, comp, instr)
        if instr.opcode == "fusion" and name not in fusions:
            execute = _empty_executor(instr, _empty_outputs(instr), device)
        elif instr.opcode == "fusion":
            execute = _fusion_executor(fusions[name], instr)
        else:
            execute = host_executor(comp, instr, device)
            assert execute is not None, f"{instr.opcode} {name} was neither wrapped nor host-run"
        release = tuple(o for o in dict.fromkeys(instr.operands)
                        if last_use.get(o) == k and o != comp.root_name)
        constant = execute([], None) if instr.opcode == "constant" else None
        steps.append(Step(name, instr.operands, execute, release, constant))
    return Program(comp.name, tuple(steps), comp.root_name)


def _check_carried_layouts(module: HloModule, comp: HloComputation, instr: HloInstruction) -> None:
    """Values in a tiled layout are physical buffers: a callee must declare the same layout
    for what it receives and returns, or it would read one buffer format as another."""
    def shape_of(name: str) -> Shape:
        return comp.instruction(name).shape

    pairs: list[tuple[Shape, Shape, str]] = []
    if instr.opcode in ("call", "fusion"):
        callee = module.computation(instr.attr("to_apply" if instr.opcode == "call" else "calls"))
        pairs += [(shape_of(o), p.shape, f"operand {k} and parameter {k} of {callee.name}")
                  for k, (o, p) in enumerate(zip(instr.operands, callee.parameters))]
        pairs.append((callee.root.shape, instr.shape, f"the result of {callee.name}"))
    elif instr.opcode == "while":
        body = module.computation(instr.attr("body"))
        cond = module.computation(instr.attr("condition"))
        state = shape_of(instr.operands[0])
        pairs += [(state, body.parameters[0].shape, f"the state and {body.name}'s parameter"),
                  (state, cond.parameters[0].shape, f"the state and {cond.name}'s parameter"),
                  (body.root.shape, state, f"the result of {body.name} and the state")]
        if any(_is_tiled(s) for s in flatten_shape(cond.root.shape)):
            raise _located(UnsupportedOpError, f"the predicate of condition {cond.name} has the "
                           f"tiled layout {cond.root.shape}; a while predicate must be untiled",
                           instr)
    elif instr.opcode == "tuple":  # the host groups values as they are: no relayout
        pairs += [(shape_of(o), e, f"operand {k} as tuple element {k}")
                  for k, (o, e) in enumerate(zip(instr.operands, instr.shape.elements))]
    elif instr.opcode == "get-tuple-element":
        index = instr.attr("index")
        pairs.append((shape_of(instr.operands[0]).elements[index], instr.shape,
                      f"tuple element {index} as its result"))
    else:
        branches = (tuple(instr.attr("branch_computations"))
                    if instr.has_attr("branch_computations")
                    else (instr.attr("true_computation"), instr.attr("false_computation")))
        for k, name in enumerate(branches):
            branch = module.computation(name)
            pairs += [(shape_of(instr.operands[1 + k]), p.shape,
                       f"operand {1 + k} and {name}'s parameter") for p in branch.parameters[:1]]
            pairs.append((branch.root.shape, instr.shape, f"the result of {name}"))
    for given, declared, what in pairs:
        for a, b in zip(flatten_shape(given), flatten_shape(declared)):
            if (_is_tiled(a) or _is_tiled(b)) and (a.layout, a.dims) != (b.layout, b.dims):
                raise _located(UnsupportedOpError, f"{instr.opcode} passes {what} in different "
                               f"layouts ({a} vs {b}); a tiled layout is a buffer format, so "
                               "both sides must declare the same one", instr)


#: Ops whose operands reach a computation or a result as the host holds them (a fusion's
#: kernel reads its parameters' buffer format), so their layouts must agree like a call's.
_PASS_THROUGH_OPCODES = ("fusion", "get-tuple-element", "tuple")


def _is_tiled(shape: ArrayShape) -> bool:
    return shape.layout is not None and bool(shape.layout.tiles or shape.layout.element_size_in_bits)


def _fusion_executor(compiled: Any, instr: HloInstruction) -> Executor:
    is_tuple = isinstance(instr.shape, TupleShape)

    def run(operands: Sequence[Value], ctx: HostContext) -> Value:
        outputs = compiled(*operands)
        return tuple(outputs) if is_tuple else outputs[0]

    return run


def _empty_outputs(instr: HloInstruction) -> tuple[ArrayShape, ...] | None:
    """A fusion's outputs when every one has zero elements (in a logical layout), else None.

    Such a fusion writes nothing: like XLA, we compile and launch no kernel for it (it would
    have an empty grid), so no emitter ever sees a zero-size iteration space.
    """
    shapes = flatten_shape(instr.shape)
    if shapes and all(s.num_elements == 0 and not is_physical_layout(s) for s in shapes):
        return shapes
    return None


def _empty_executor(instr: HloInstruction, shapes: tuple[ArrayShape, ...],
                    device: torch.device) -> Executor:
    is_tuple = isinstance(instr.shape, TupleShape)

    def run(operands: Sequence[Value], ctx: HostContext) -> Value:
        outputs = tuple(torch.empty(s.dims, dtype=torch_dtype(s.dtype), device=device)
                        for s in shapes)
        return outputs if is_tuple else outputs[0]

    return run


def _flatten(value: Value) -> list[torch.Tensor]:
    if isinstance(value, tuple):
        return [t for v in value for t in _flatten(v)]
    return [value]


def _constant_storages(programs) -> frozenset[int]:
    """Storages of the constants materialized at compile time (shared by every call)."""
    ptrs = set()
    for program in programs:
        for step in program.steps:
            if step.constant is not None:
                ptrs.update(t.untyped_storage().data_ptr() for t in _flatten(step.constant))
    return frozenset(ptrs)


def _fresh_outputs(outputs: list[torch.Tensor], inputs: Sequence[torch.Tensor],
                   constants: frozenset[int]) -> tuple[torch.Tensor, ...]:
    """Outputs the caller may own: contiguous, and never sharing memory with an input, a
    constant (reused by every call) or another output."""
    taken = {t.untyped_storage().data_ptr() for t in inputs} | constants
    out = []
    for tensor in outputs:
        fresh = tensor.untyped_storage().data_ptr() not in taken
        tensor = tensor.contiguous() if fresh else tensor.clone(memory_format=torch.contiguous_format)
        taken.add(tensor.untyped_storage().data_ptr())
        out.append(tensor)
    return tuple(out)


__all__ = ["AUTO", "CompiledModule", "Program", "Step", "compile_hlo", "host_computations",
           "resolve_tuning_device"]
