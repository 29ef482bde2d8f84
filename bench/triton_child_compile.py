"""Compile generated kernel files to cubin for an NVIDIA arch, in a process without the interpreter.

A ``@triton.jit`` function decorated under ``TRITON_INTERPRET=1`` cannot be compiled, so the
benchmarks hand kernel file paths to this script in a child process whose environment drops
that variable.  For each file it times ``triton.compile`` twice against one fresh
``TRITON_CACHE_DIR`` (cold, then warm: the on-disk cache hit) and, with ``--resources``, runs
the wheel's ``ptxas -v`` for registers, spills and vectorized global accesses
(``triton_backend.reports.ptx_report``).  Prints one JSON object: path -> results or ``{"error": ...}``.

    python bench/triton_child_compile.py --arch 90 [--resources] KERNEL.py ...
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

_POINTER_TYPES = {
    "torch.bool": "*i1", "torch.int8": "*i8", "torch.int16": "*i16", "torch.int32": "*i32",
    "torch.int64": "*i64", "torch.uint8": "*u8", "torch.uint16": "*u16", "torch.uint32": "*u32",
    "torch.uint64": "*u64", "torch.float16": "*fp16", "torch.bfloat16": "*bf16",
    "torch.float32": "*fp32", "torch.float64": "*fp64",
}


def _load(path: str):
    spec = importlib.util.spec_from_file_location(f"_bench_kernel_{abs(hash(path))}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _signature(module) -> dict[str, str]:
    specs = list(module.INPUT_SPECS) + [s[:4] for s in module.CONSTANT_SPECS] + list(module.OUTPUT_SPECS)
    specs += list(getattr(module, "SCRATCH_SPECS", ()))  # split-K's workspace and counters
    names = module.KERNEL.arg_names
    if len(names) != len(specs):
        raise ValueError(f"kernel has {len(names)} parameters but {len(specs)} buffers")
    return {name: _POINTER_TYPES[str(spec[1])] for name, spec in zip(names, specs)}


def compile_one(path: str, arch: int, resources: bool) -> dict:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from triton_backend.reports.ptx_report import count_vector_accesses, parse_ptxas_log, run_ptxas

    module = _load(path)
    signature = _signature(module)
    attrs = {(i,): [["tt.divisibility", 16]] for i in range(len(signature))}
    result = {}
    for phase in ("cold", "warm"):
        source = ASTSource(fn=module.KERNEL, signature=signature, constexprs={}, attrs=attrs)
        start = time.perf_counter()
        compiled = triton.compile(source, target=GPUTarget("cuda", arch, 32),
                                  # the launch options the kernel file itself runs with
                                  options={"num_warps": getattr(module, "NUM_WARPS", 4),
                                           "num_stages": getattr(module, "NUM_STAGES", 3),
                                           "enable_fp_fusion": False})
        result[f"{phase}_s"] = time.perf_counter() - start
    if resources:
        ptx = compiled.asm["ptx"]
        res = parse_ptxas_log(run_ptxas(ptx, arch), compiled.metadata.name)
        result.update(registers=res.registers,
                      spills=res.spill_store_bytes + res.spill_load_bytes,
                      vector_accesses=count_vector_accesses(ptx))
    return result


def run_in_child(paths: list[str], arch: int = 90, resources: bool = False,
                 timeout: float = 600) -> dict[str, dict]:
    """Run this script on ``paths`` in a child process without TRITON_INTERPRET."""
    from triton_backend.reports.compile_child import child_environment

    env = child_environment()
    env["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="bench-triton-cache-")
    command = [sys.executable, os.path.abspath(__file__), "--arch", str(arch), *paths]
    if resources:
        command.insert(2, "--resources")
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=timeout,
                          check=False)
    if done.returncode != 0:
        return {p: {"error": f"child failed ({done.returncode}): {done.stderr.strip()[-300:]}"}
                for p in paths}
    return json.loads(done.stdout)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--arch", type=int, default=90)
    parser.add_argument("--resources", action="store_true")
    parser.add_argument("paths", nargs="+")
    args = parser.parse_args()
    out = {}
    for path in args.paths:
        try:
            out[path] = compile_one(path, args.arch, args.resources)
        except Exception as err:  # noqa: BLE001 - reported per kernel
            out[path] = {"error": f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"}
    json.dump(out, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
