"""Autotuning: sweep legal tilings x ``num_warps`` x ``num_stages`` for one fusion.

1. Candidates: every legal tiling of ``tiling.policy.candidates`` crossed with the launch
   options; each gets a cost-model estimate (``cost_model``) on the named device, and the
   ``budget`` best predicted ones go on.
2. Compile in parallel through a ``concurrent.futures.Executor`` (a ``ProcessPoolExecutor``
   with the ``spawn`` start method by default, so a parent that initialised CUDA can still
   start workers; any executor works, e.g. ``dask.distributed.Client.get_executor()``).  A
   worker generates and caches the kernel file (``compile_fusion``) and, on a GPU, launches
   it once, which fills Triton's on-disk binary cache for the parent's measurements.
3. Measure on a GPU with ``triton.testing.do_bench`` (it flushes L2 before every rep):
   median with p20/p80.  A fusion that updates a buffer in place (the in-place
   dynamic-update-slice emitter) gets that buffer restored from a pristine copy before every
   rep, and the restore's own time, measured alone, is subtracted: ``triton.autotune``'s
   known trap is timing reps that see the previous rep's writes.
4. Without a GPU nothing can be measured: candidates are ranked by the cost model and the
   result says so (``method``).  The winner is stored in the tuning database.
5. The default configuration (what ``compile_fusion`` picks untuned for a GPU) is timed the
   same way (``AutotuneResult.default``), so the winner's improvement over it is known.

``executor`` may also be a ``dask.distributed.Client`` (``pip install
'hlo-triton-fusion[distributed]'``): its workers compile (and on a GPU launch) the candidates,
the parent stores the winner in its one tuning database.

>>> from fusion.text.parser import parse_hlo
>>> from concurrent.futures import ThreadPoolExecutor
>>> import tempfile, os
>>> m = parse_hlo('''HloModule m
... f {
...   p = f32[64,256] parameter(0)
...   ROOT n = f32[64,256] negate(p)
... }
... ENTRY e {
...   x = f32[64,256] parameter(0)
...   ROOT r = f32[64,256] fusion(x), kind=kLoop, calls=f
... }''')
>>> with ThreadPoolExecutor(2) as pool:
...     result = autotune(m, "r", device="h100", budget=3, executor=pool, num_warps=(4,),
...                       num_stages=(1,), db=TuningDb(os.path.join(tempfile.mkdtemp(), "t.db")))
>>> result.measured, len(result.trials), result.best.config.num_warps
(False, 3, 4)
>>> result.method.startswith("predicted by the cost model")
True
"""
from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any
from concurrent.futures import Executor, Future, ProcessPoolExecutor
from dataclasses import dataclass, replace
import multiprocessing

from fusion.ir.element_types import ELEMENT_TYPES
from fusion.errors import FusionCompilerError
from fusion.ir.hlo_module import HloInstruction, HloModule
from fusion.text.parser import parse_hlo
from fusion.text.printer import print_hlo
from fusion.ir.shape import ArrayShape, flatten_shape
from triton_backend.driver import compiled_fusion  # called through the module: tests patch it
from triton_backend.runtime import device_specs  # likewise detect_device
from triton_backend.tuning.cost_model import CostEstimate, InfeasibleLaunch, Workload, estimate, rank
from triton_backend.runtime.device_specs import DeviceSpec, device_spec
from triton_backend.runtime.tuning_db import TuningDb, find_fusion, fusion_key
from tiling.policy.candidates import tiling_candidates
from triton_backend.templates.dot.driver import is_dot_fusion
from triton_backend.tuning.dot_candidates import dot_workloads
from fusion.analysis.emitter_kind import EmitterKind, analyze_fusion
from fusion.logs import get_logger

DEFAULT_NUM_WARPS = (1, 2, 4, 8)
DEFAULT_NUM_STAGES = (1, 2, 3)
DEFAULT_DEVICE = "h100"
#: The cache key of the untuned default's kernel: a GPU target, so the GPU default tiling.
_DEFAULT_TARGET = "cuda"

_log = get_logger("triton_backend.tuning.autotune")


@dataclass(frozen=True)
class Config:
    """One point of the sweep."""

    tile_sizes: tuple[int, ...]
    reduction_chunk: int | None
    num_warps: int
    num_stages: int

    def label(self) -> str:
        chunk = f" chunk {self.reduction_chunk}" if self.reduction_chunk else ""
        return f"{'x'.join(map(str, self.tile_sizes)) or 'scalar'}{chunk}"

    def to_json(self) -> dict:
        return {"tile_sizes": list(self.tile_sizes), "reduction_chunk": self.reduction_chunk,
                "num_warps": self.num_warps, "num_stages": self.num_stages}


@dataclass(frozen=True)
class Trial:
    """A candidate: its prediction, its compile outcome and (on a GPU) its measurement."""

    config: Config
    estimate: CostEstimate
    error: str | None = None
    median_s: float | None = None
    p20_s: float | None = None
    p80_s: float | None = None

    @property
    def time_s(self) -> float:
        """Measured median when there is one, else the predicted time."""
        return self.median_s if self.median_s is not None else self.estimate.predicted_time_s

    @property
    def gb_per_s(self) -> float:
        return self.estimate.compulsory_bytes / self.time_s / 1e9

    @property
    def fraction_of_peak(self) -> float:
        return self.estimate.compulsory_bytes / self.time_s / self.estimate.peak_bandwidth_bytes_per_s


@dataclass(frozen=True)
class AutotuneResult:
    """The sweep's outcome; ``trials`` best first (failed compiles last)."""

    fusion: str
    device: str
    measured: bool
    method: str
    trials: tuple[Trial, ...]
    from_cache: bool = False
    cached: dict | None = None
    #: The untuned default configuration, timed like the candidates (None when unknown).
    default: Trial | None = None

    @property
    def speedup_over_default(self) -> float | None:
        """Default time over the winner's (1.25: the winner takes 20% less time)."""
        best = self.best
        if best is None or self.default is None or self.default.error is not None:
            return None
        return self.default.time_s / best.time_s

    @property
    def best(self) -> Trial | None:
        ok = [t for t in self.trials if t.error is None]
        return ok[0] if ok else None

    def winner_json(self) -> dict:
        if self.cached is not None:
            return self.cached
        best = self.best
        if best is None:
            return {}
        return {**best.config.to_json(), "time_s": best.time_s, "measured": self.measured,
                "method": self.method}


def gpu_available() -> bool:
    """A CUDA device that kernels will actually run on (not the interpreter)."""
    import torch  # noqa: PLC0415 - only when tuning

    from triton_backend.runtime.launch_mode import interpreting  # noqa: PLC0415

    return bool(torch.cuda.is_available()) and not interpreting()


def workload_for(module: HloModule, fusion_instr: HloInstruction, candidate) -> Workload:
    """The cost model's view of a ``tiling_candidates`` candidate (totals over all blocks)."""
    comp = module.computation(fusion_instr.attr("calls"))
    inputs = sum(_bytes(p.shape) for p in comp.parameters)
    outputs = sum(_bytes(s) for s in flatten_shape(fusion_instr.shape))
    dots = [i for i in comp.instructions if i.opcode == "dot"]
    out_type = flatten_shape(fusion_instr.shape)[0].dtype
    common = dict(tile_sizes=tuple(candidate.tile_sizes), num_blocks=candidate.num_blocks,
                  bytes_read=candidate.total_bytes_read,
                  bytes_written=candidate.total_bytes_written,
                  compulsory_bytes_read=inputs, compulsory_bytes_written=outputs,
                  compute_dtype="f64" if out_type == "f64" else "f32")
    if dots:
        operand_type = comp.instruction(dots[0].operands[0]).shape.dtype
        tc_type = {"f32": "tf32", "f64": "fp64"}.get(operand_type, operand_type)
        return Workload(**common, flops=0, tensor_core_flops=candidate.total_flops,
                        tensor_core_dtype=tc_type)
    return Workload(**common, flops=candidate.total_flops)


def _bytes(shape) -> int:
    if not isinstance(shape, ArrayShape):
        return 0
    return math.prod(shape.dims) * ELEMENT_TYPES[shape.dtype].byte_size


def plan_sweep(module: HloModule, fusion_instr: HloInstruction, spec: DeviceSpec, *,
               num_warps: Iterable[int] = DEFAULT_NUM_WARPS,
               num_stages: Iterable[int] = DEFAULT_NUM_STAGES,
               budget: int | None = None) -> list[Trial]:
    """Every legal (tiling, warps, stages) with its estimate, best predicted first, cut to
    ``budget``.  A ``FusionCompilerError`` when the fusion has no legal tiling."""
    if is_dot_fusion(module, fusion_instr):  # the dot template's own tilings, split-K too
        return _dot_sweep(module, fusion_instr, spec, budget)
    report = tiling_candidates(module, fusion_instr)
    if not report.legal:
        raise FusionCompilerError(f"no legal tiling to tune: {report.default_reason}",
                                  where=fusion_instr.name)
    stages_list = sorted(set(num_stages))
    trials = []
    for candidate in report.legal:
        workload = workload_for(module, fusion_instr, candidate)
        # Software pipelining only acts on loops: a tiling without a reduction loop would
        # spend the budget on identical kernels.
        stages_here = stages_list if candidate.reduction_chunk else stages_list[:1]
        for warps in num_warps:
            for stages in stages_here:
                try:
                    cost = estimate(workload, spec, num_warps=warps, num_stages=stages)
                except InfeasibleLaunch:
                    continue
                config = Config(tuple(candidate.tile_sizes), candidate.reduction_chunk, warps,
                                stages)
                trials.append(Trial(config, cost))
    order = {id(e): i for i, e in enumerate(rank([t.estimate for t in trials]))}
    trials.sort(key=lambda t: order[id(t.estimate)])
    return trials[:budget] if budget else trials


def _dot_sweep(module: HloModule, fusion_instr: HloInstruction, spec: DeviceSpec,
               budget: int | None) -> list[Trial]:
    """``plan_sweep`` of a dot fusion: each candidate of ``dot_candidates`` with the warps
    and stages it names (``(BM, BN, BK[, SPLIT_K])`` tile sizes), best predicted first."""
    trials = []
    for tiling, workload in dot_workloads(module, fusion_instr, spec.compute_capability, spec):
        try:
            cost = estimate(workload, spec, num_warps=tiling.num_warps,
                            num_stages=tiling.num_stages)
        except InfeasibleLaunch:
            continue
        trials.append(Trial(Config(tiling.tile_sizes, None, tiling.num_warps,
                                   tiling.num_stages), cost))
    order = {id(e): i for i, e in enumerate(rank([t.estimate for t in trials]))}
    trials.sort(key=lambda t: order[id(t.estimate)])
    return trials[:budget] if budget else trials


def compile_candidate(hlo_text: str, fusion_name: str, tile_sizes: Sequence[int],
                      num_warps: int, num_stages: int, on_gpu: bool) -> str | None:
    """Executor job: generate (and on a GPU, build and launch once) one candidate.

    Takes and returns plain data so it pickles into worker processes.  Returns None on
    success, else the error text (a candidate that fails is reported, not fatal).
    """
    try:
        module = parse_hlo(hlo_text)
        compiled = compiled_fusion.compile_fusion(module, fusion_name,
                                                  tile_sizes=tuple(tile_sizes))
        if on_gpu:
            inputs = [t.cuda() for t in compiled.module.example_inputs()]
            launch(compiled.module, inputs, num_warps=num_warps, num_stages=num_stages)
        return None
    except Exception as err:  # noqa: BLE001 - any failure disqualifies just this candidate
        return f"{type(err).__name__}: {err}"


def launch(kernel_module, inputs, *, num_warps: int, num_stages: int):
    """Run a generated kernel file with explicit launch options: its own ``run(*inputs,
    num_warps=.., num_stages=..)``, so a measured launch is exactly the file's (layouts,
    zero-filled padded outputs, in-place outputs' initial copies) but for the options."""
    return kernel_module.run(*inputs, num_warps=num_warps, num_stages=num_stages)


def default_executor(jobs: int | None = None, on_gpu: bool = True) -> Executor:
    """A process pool whose workers are spawned (safe after CUDA initialisation); one job
    without a GPU runs in this process (:class:`InlineExecutor`).

    On a GPU each candidate is launched once, and a launch that faults poisons its process's
    CUDA context, so candidates run in workers.  Without one they are only code-generated:
    a single worker would cost a spawned interpreter importing torch (seconds) for nothing.
    """
    if jobs == 1 and not on_gpu:
        return InlineExecutor()
    return ProcessPoolExecutor(max_workers=jobs, mp_context=multiprocessing.get_context("spawn"))


class InlineExecutor(Executor):
    """Runs each job when it is submitted, in the calling thread.

    >>> InlineExecutor().submit(pow, 2, 10).result()
    1024
    """

    def submit(self, fn, /, *args, **kwargs) -> Future:
        future: Future = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except Exception as err:  # noqa: BLE001 - delivered through the future, as a pool does
            future.set_exception(err)
        return future


def _compile_all(trials: list[Trial], hlo_text: str, fusion_name: str, on_gpu: bool,
                 executor: Executor, progress: Callable[[int], None] | None) -> list[Trial]:
    # Launch options do not change the generated file, so on CPU each tiling compiles once.
    jobs = {}
    for t in trials:
        key = (t.config.tile_sizes, t.config.num_warps, t.config.num_stages) if on_gpu \
            else (t.config.tile_sizes,)
        if key not in jobs:
            jobs[key] = executor.submit(compile_candidate, hlo_text, fusion_name,
                                        t.config.tile_sizes, t.config.num_warps,
                                        t.config.num_stages, on_gpu)
    errors = {}
    for key, future in jobs.items():
        errors[key] = future.result()
        if progress is not None:
            progress(1)
    out = []
    for t in trials:
        key = (t.config.tile_sizes, t.config.num_warps, t.config.num_stages) if on_gpu \
            else (t.config.tile_sizes,)
        out.append(replace(t, error=errors[key]))
    return out


def measure(module: HloModule, fusion_instr: HloInstruction, trial: Trial) -> Trial:
    """Time one compiled candidate on the GPU: do_bench median, p20, p80 (seconds)."""
    import torch  # noqa: PLC0415
    from triton.testing import do_bench  # noqa: PLC0415

    compiled = compiled_fusion.compile_fusion(module, fusion_instr,
                                              tile_sizes=trial.config.tile_sizes)
    inputs = [t.cuda() for t in compiled.module.example_inputs()]
    warps, stages = trial.config.num_warps, trial.config.num_stages
    in_place = analyze_fusion(module, fusion_instr, ignore_constant_operands=True).kind \
        is EmitterKind.IN_PLACE_DYNAMIC_UPDATE_SLICE
    quantiles = [0.5, 0.2, 0.8]
    if not in_place:
        times = do_bench(lambda: launch(compiled.module, inputs, num_warps=warps,
                                        num_stages=stages), quantiles=quantiles)
    else:
        # The updated buffer is operand 0 of the dynamic-update-slice: restore every input
        # from a pristine copy before each rep, and subtract the restore's own cost.
        pristine = [t.clone() for t in inputs]

        def restore():
            for t, p in zip(inputs, pristine):
                t.copy_(p)

        def run_once():
            restore()
            launch(compiled.module, inputs, num_warps=warps, num_stages=stages)

        times = do_bench(run_once, quantiles=quantiles)
        restore_times = do_bench(restore, quantiles=quantiles)
        times = [max(a - b, 1e-6) for a, b in zip(times, restore_times)]
    torch.cuda.synchronize()
    median, p20, p80 = (x * 1e-3 for x in times)  # do_bench reports milliseconds
    return replace(trial, median_s=median, p20_s=p20, p80_s=p80)


def default_config(module: HloModule, fusion_instr: HloInstruction) -> Config:
    """The configuration ``compile_fusion`` uses untuned for a GPU: tiling, chunk, launch
    options (read from the generated kernel file)."""
    compiled = compiled_fusion.compile_fusion(module, fusion_instr, target=_DEFAULT_TARGET)
    return Config(tuple(compiled.tile_sizes), compiled.reduction_chunk,
                  int(getattr(compiled.module, "NUM_WARPS", 4)),
                  int(getattr(compiled.module, "NUM_STAGES", 1)))


def _default_trial(module: HloModule, instr: HloInstruction, spec: DeviceSpec,
                   trials: Sequence[Trial], on_gpu: bool) -> Trial | None:
    """The default configuration's trial: from the sweep when it was a candidate, else
    estimated (and on a GPU measured) alone; None when it cannot be built."""
    try:
        config = default_config(module, instr)
    except FusionCompilerError as err:
        _log.info("fusion %s: no default configuration to compare with: %s", instr.name,
                  err.message)
        return None
    for trial in trials:
        if trial.config == config:
            return trial
    found = [t for t in plan_sweep(module, instr, spec, num_warps=(config.num_warps,),
                                   num_stages=(config.num_stages,))
             if t.config == config]
    if not found:
        _log.info("fusion %s: the default %s is not among the legal candidates", instr.name,
                  config)
        return None
    return measure(module, instr, found[0]) if on_gpu else found[0]


def _as_executor(executor: Any) -> Executor:
    """A ``concurrent.futures.Executor``; a ``dask.distributed.Client`` gives its own."""
    get_executor = getattr(executor, "get_executor", None)
    return get_executor() if callable(get_executor) else executor


def autotune(module: HloModule, fusion: HloInstruction | str, *, device: str | None = None,
             budget: int | None = None, executor: Any = None, jobs: int | None = None,
             db: TuningDb | None = None, force: bool = False,
             num_warps: Iterable[int] = DEFAULT_NUM_WARPS,
             num_stages: Iterable[int] = DEFAULT_NUM_STAGES,
             progress: Callable[[int], None] | None = None,
             on_total: Callable[[int], None] | None = None) -> AutotuneResult:
    """Tune ``fusion`` (an instruction of ``module`` or its name); see the module docstring.

    ``device`` names the spec used by the cost model and the database (default: the visible
    GPU, else ``h100``).  A stored result is returned (``from_cache``) unless ``force``.
    ``executor`` (a ``concurrent.futures.Executor`` or a ``dask.distributed.Client``) is used
    as given and not shut down; without one a spawned process pool of ``jobs`` workers is
    created for the sweep.  ``progress(n)`` is called as compiles and
    measurements finish; ``on_total(n)`` first, with their number.
    """
    import torch  # noqa: PLC0415

    instr = find_fusion(module, fusion)
    on_gpu = gpu_available()
    spec = device_spec(device) if device else (
        device_specs.detect_device(torch) if on_gpu else None) or device_spec(DEFAULT_DEVICE)
    db = db if db is not None else TuningDb()
    key = fusion_key(module, instr, spec.key)
    if not force:
        stored = db.get(key)
        if stored is not None:
            _log.info("fusion %s on %s: stored result in %s (use force to re-tune)", instr.name,
                      spec.key, db.path)
            return AutotuneResult(instr.name, spec.key, bool(stored.get("measured")),
                                  f"from the tuning database ({db.path}): "
                                  f"{stored.get('method', '')}", (), True, stored)
    trials = plan_sweep(module, instr, spec, num_warps=num_warps, num_stages=num_stages,
                        budget=budget)
    compiles = len({(t.config.tile_sizes,) + ((t.config.num_warps, t.config.num_stages)
                                              if on_gpu else ()) for t in trials})
    if on_total is not None:
        on_total(compiles + (len(trials) if on_gpu else 0))
    own = executor is None
    pool = default_executor(jobs, on_gpu) if own else _as_executor(executor)
    _log.info("fusion %s on %s: %d candidates, %d compiles on %s", instr.name, spec.key,
              len(trials), compiles, type(pool).__name__)
    try:
        trials = _compile_all(trials, print_hlo(module), instr.name, on_gpu, pool, progress)
    finally:
        if own:
            pool.shutdown()
    if on_gpu:
        measured = []
        for t in trials:
            measured.append(t if t.error else measure(module, instr, t))
            if progress is not None:
                progress(1)
        trials = sorted(measured, key=lambda t: (t.error is not None, t.time_s))
        method = f"measured on {torch.cuda.get_device_name(0)} with triton.testing.do_bench " \
                 "(L2 flushed; median, p20-p80)"
    else:
        trials = sorted(trials, key=lambda t: t.error is not None)  # stable: keeps cost order
        method = (f"predicted by the cost model for {spec.name} (no GPU here: nothing was "
                  "measured; candidates were code-generated and ranked by predicted time)")
    default = _default_trial(module, instr, spec, trials, on_gpu)
    result = AutotuneResult(instr.name, spec.key, on_gpu, method, tuple(trials), default=default)
    if result.best is not None:
        db.put(key, result.winner_json())
        _log.info("fusion %s on %s: winner %s warps %d stages %d stored in %s", instr.name,
                  spec.key, result.best.config.label(), result.best.config.num_warps,
                  result.best.config.num_stages, db.path)
    return result
