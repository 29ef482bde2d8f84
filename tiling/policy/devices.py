"""Datasheet numbers of the GPUs we know, as pure data (the tiling policy and cost model read them).

Sources (vendor documents; dense numbers, i.e. the datasheets' "with sparsity" figures halved):

* A100: *NVIDIA A100 Tensor Core GPU* datasheet (2021, "nvidia-a100-datasheet-us-nvidia-1758950-r4")
  for memory bandwidth (40GB HBM2 1,555 GB/s; 80GB HBM2e SXM 2,039 GB/s), FP64 9.7, FP32 19.5,
  TF32 156, BF16/FP16 312 TFLOPS, INT8 624 TOPS (tensor cores); *NVIDIA A100 Tensor Core GPU
  Architecture* whitepaper (2020) for 108 SMs, 40 MB L2, 164 KB shared memory per SM (163 KB per
  block), non-tensor FP16 78 / BF16 39 TFLOPS.
* H100 SXM5: *NVIDIA H100 Tensor Core GPU* datasheet (2023) for 3.35 TB/s HBM3, FP64 34, FP32 67,
  TF32 989* / BF16 and FP16 1,979* / FP8 3,958* / INT8 3,958* TOPS (*with sparsity); *NVIDIA
  H100 Tensor Core GPU Architecture* whitepaper (2022) for 132 SMs, 50 MB L2, 228 KB shared memory
  per SM (227 KB per block), non-tensor FP16/BF16 133.8 TFLOPS.
* H200 SXM: *NVIDIA H200 Tensor Core GPU* datasheet (2024) for 141 GB HBM3e at 4.8 TB/s; the
  compute figures are the H100 SXM's (same GH100 die, 132 SMs, 50 MB L2), as that datasheet lists.

Neither architecture has FP8 on A100, nor TF32/FP8 on CUDA cores: those entries are absent.
Occupancy limits (64 resident warps and 32 resident blocks per SM) are from the CUDA C
Programming Guide's "compute capabilities" table for 8.0 and 9.0.

>>> spec = device_spec("h100")
>>> spec.name, spec.sm_count, spec.memory_bandwidth_bytes_per_s
('H100 SXM', 132, 3350000000000.0)
>>> spec.peak_flops("bf16", tensor_cores=True) / 1e12
989.5
"""
from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Mapping

_TERA = 1e12
_KIB = 1024
_MIB = 1024 * 1024

# HLO element types -> the key of the peak tables (what hardware path computes them).
_DTYPE_CLASS = {
    "bf16": "bf16", "f16": "f16", "f32": "fp32", "f64": "fp64", "tf32": "tf32",
    "f8e4m3fn": "fp8", "f8e5m2": "fp8", "f8e4m3fnuz": "fp8", "f8e5m2fnuz": "fp8",
    "s8": "int8", "u8": "int8", "fp32": "fp32", "fp64": "fp64", "fp8": "fp8", "int8": "int8",
}


@dataclass(frozen=True)
class DeviceSpec:
    """One GPU: memory system, SMs, and peak throughputs (FLOP/s or OP/s) per data type."""

    key: str
    name: str
    compute_capability: int
    memory_bandwidth_bytes_per_s: float
    memory_bytes: int
    sm_count: int
    l2_bytes: int
    shared_memory_per_sm_bytes: int
    shared_memory_per_block_bytes: int
    max_warps_per_sm: int
    max_blocks_per_sm: int
    cuda_core_flops: Mapping[str, float]
    tensor_core_flops: Mapping[str, float]
    source: str

    def peak_flops(self, dtype: str, *, tensor_cores: bool = False) -> float:
        """Peak FLOP/s for HLO element type ``dtype`` on CUDA cores or tensor cores.

        >>> device_spec("a100-40gb").peak_flops("f32") / 1e12
        19.5
        >>> device_spec("a100-40gb").peak_flops("f8e4m3fn", tensor_cores=True)
        Traceback (most recent call last):
        ...
        ValueError: A100 40GB has no tensor-core fp8 path; known: bf16, f16, fp64, int8, tf32
        """
        key = _DTYPE_CLASS.get(dtype, dtype)
        table = self.tensor_core_flops if tensor_cores else self.cuda_core_flops
        if key not in table:
            unit = "tensor-core" if tensor_cores else "CUDA-core"
            raise ValueError(f"{self.name} has no {unit} {key} path; known: {', '.join(sorted(table))}")
        return table[key]


def _frozen(values: dict[str, float]) -> Mapping[str, float]:
    return MappingProxyType({k: v * _TERA for k, v in sorted(values.items())})


_A100_CUDA = {"bf16": 39.0, "f16": 78.0, "fp32": 19.5, "fp64": 9.7}
_A100_TENSOR = {"bf16": 312.0, "f16": 312.0, "fp64": 19.5, "int8": 624.0, "tf32": 156.0}
# H100 SXM5 whitepaper, dense, at the 1,830 MHz boost clock.
_H100_CUDA = {"bf16": 133.8, "f16": 133.8, "fp32": 66.9, "fp64": 33.5}
_H100_TENSOR = {"bf16": 989.5, "f16": 989.5, "fp8": 1979.0, "fp64": 66.9, "int8": 1979.0,
                "tf32": 494.7}

_A100_SOURCE = "NVIDIA A100 datasheet (2021) and A100 architecture whitepaper (2020)"
_H100_SOURCE = "NVIDIA H100 datasheet (2023) and H100 architecture whitepaper (2022)"

#: The table, keyed by the short names the CLI accepts.
DEVICES: Mapping[str, DeviceSpec] = MappingProxyType({
    "a100-40gb": DeviceSpec(
        "a100-40gb", "A100 40GB", 80, 1.555e12, 40 * 1024 * _MIB, 108, 40 * _MIB, 164 * _KIB,
        163 * _KIB, 64, 32, _frozen(_A100_CUDA), _frozen(_A100_TENSOR), _A100_SOURCE),
    "a100-80gb": DeviceSpec(
        "a100-80gb", "A100 80GB", 80, 2.039e12, 80 * 1024 * _MIB, 108, 40 * _MIB, 164 * _KIB,
        163 * _KIB, 64, 32, _frozen(_A100_CUDA), _frozen(_A100_TENSOR), _A100_SOURCE),
    "h100": DeviceSpec(
        "h100", "H100 SXM", 90, 3.35e12, 80 * 1024 * _MIB, 132, 50 * _MIB, 228 * _KIB,
        227 * _KIB, 64, 32, _frozen(_H100_CUDA), _frozen(_H100_TENSOR), _H100_SOURCE),
    "h200": DeviceSpec(
        "h200", "H200 SXM", 90, 4.8e12, 141 * 1024 * _MIB, 132, 50 * _MIB, 228 * _KIB,
        227 * _KIB, 64, 32, _frozen(_H100_CUDA), _frozen(_H100_TENSOR),
        "NVIDIA H200 datasheet (2024); compute as H100 SXM"),
})

_ALIASES = {"a100": "a100-80gb", "a100-40": "a100-40gb", "a100-80": "a100-80gb",
            "h100-sxm": "h100", "h200-sxm": "h200"}


def device_spec(name: str) -> DeviceSpec:
    """The spec for ``name`` (``a100-40gb``, ``a100-80gb``/``a100``, ``h100``, ``h200``; any case).

    >>> device_spec("H200").memory_bandwidth_bytes_per_s / 1e12
    4.8
    >>> device_spec("v100")
    Traceback (most recent call last):
    ...
    ValueError: unknown device 'v100'; known: a100-40gb, a100-80gb, h100, h200 (aliases: a100, a100-40, a100-80, h100-sxm, h200-sxm)
    """
    key = name.strip().lower().replace("_", "-").replace(" ", "-")
    key = _ALIASES.get(key, key)
    if key not in DEVICES:
        raise ValueError(f"unknown device {name!r}; known: {', '.join(DEVICES)} "
                         f"(aliases: {', '.join(sorted(_ALIASES))})")
    return DEVICES[key]
