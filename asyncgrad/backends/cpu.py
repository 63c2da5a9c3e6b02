"""``ag.backends.cpu``: the CPU capability torch reports. NumPy picks its own SIMD kernels at run
time, so asyncgrad reports torch's baseline, "DEFAULT"."""

from __future__ import annotations

__all__ = ["get_cpu_capability"]


def get_cpu_capability() -> str:
    return "DEFAULT"
