"""``ag.cpu``: torch's ``torch.cpu`` device module (``ag.get_device_module("cpu")``): the CPU is
always available, one device, and its work is done when a call returns."""

from __future__ import annotations

from typing import Any

__all__ = ["current_device", "device_count", "is_available", "set_device", "synchronize"]


def is_available() -> bool:
    return True


def device_count() -> int:
    return 1


def current_device() -> str:
    return "cpu"


def set_device(device: Any) -> None:
    """Accepted for torch's API: there is one CPU device."""


def synchronize(device: Any = None) -> None:
    """Nothing to wait for: CPU kernels finish before they return."""
