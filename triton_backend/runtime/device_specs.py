"""The device table (``tiling.policy.devices``) as the cost model and the benchmarks know it,
plus ``detect_device``: which of its GPUs is visible.

The datasheet numbers live with the tiling policy, which needs them too (SMs, L2) and must
not import the backend; their public names are re-exported here.

>>> device_spec("h100").sm_count, sorted(DEVICES)[0]
(132, 'a100-40gb')
"""
from __future__ import annotations

from tiling.policy.devices import DEVICES, DeviceSpec, device_spec

__all__ = ["DEVICES", "DeviceSpec", "detect_device", "device_spec"]

_MIB = 1024 * 1024


def detect_device(torch_module=None) -> DeviceSpec | None:
    """The spec of the visible CUDA GPU, matched by its name, or None without one (or unknown).

    Takes ``torch`` as an argument so that importing this module never imports torch.
    """
    if torch_module is None:
        return None
    try:
        if not torch_module.cuda.is_available():
            return None
        props = torch_module.cuda.get_device_properties(0)
    except Exception:  # noqa: BLE001 - a broken driver means "no usable GPU"
        return None
    name = props.name.upper()
    if "H200" in name:
        return DEVICES["h200"]
    if "H100" in name:
        return DEVICES["h100"]
    if "A100" in name:
        return DEVICES["a100-80gb"] if props.total_memory > 60 * 1024 * _MIB else DEVICES["a100-40gb"]
    return None
