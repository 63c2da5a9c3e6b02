"""``ag.backends.opt_einsum``: whether the opt_einsum package is installed, and torch's
``enabled``/``strategy`` flags, which read back as set (asyncgrad's einsum contracts as NumPy's
does, See NOTE [Backend flags] in asyncgrad/backends/__init__.py)."""

from __future__ import annotations

import importlib.util
from typing import Any

__all__ = ["enabled", "get_opt_einsum", "is_available", "strategy"]


def is_available() -> bool:
    return importlib.util.find_spec("opt_einsum") is not None


def get_opt_einsum() -> Any:
    """The opt_einsum module where it is installed, else None."""
    return importlib.import_module("opt_einsum") if is_available() else None


enabled = is_available()
strategy: str | None = "auto" if enabled else None
