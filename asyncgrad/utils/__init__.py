"""ag.utils: activation checkpointing (the module ``ag.utils.checkpoint``, holding
``checkpoint`` as torch's) and data loading (``ag.utils.data``, imported on first use)."""

from __future__ import annotations

import importlib
from typing import Any

from . import checkpoint

__all__ = ["checkpoint", "data"]

_LAZY = ("data",)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
