"""ag.utils: data loading (``ag.utils.data``), imported on first use."""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["data"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
