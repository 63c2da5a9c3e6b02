"""``ag.backends.mkldnn``: asyncgrad does not use oneDNN (MKL-DNN): ``is_available()`` is False;
``enabled`` and ``deterministic`` read back as set (See NOTE [Backend flags] in
asyncgrad/backends/__init__.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["deterministic", "enabled", "flags", "is_available"]

enabled = True
deterministic = False


def is_available() -> bool:
    return False


@contextmanager
def flags(enabled: bool = False, deterministic: bool = False) -> Iterator[None]:
    g = globals()
    saved = (g["enabled"], g["deterministic"])
    g["enabled"], g["deterministic"] = enabled, deterministic
    try:
        yield
    finally:
        g["enabled"], g["deterministic"] = saved
