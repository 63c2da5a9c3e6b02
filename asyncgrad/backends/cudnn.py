"""``ag.backends.cudnn``: torch's cuDNN flags, with torch's defaults. asyncgrad has no cuDNN, so
``is_available()`` is False and ``version()`` None; the flags read back as set and change
nothing (See NOTE [Backend flags] in asyncgrad/backends/__init__.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = [
    "allow_tf32",
    "benchmark",
    "benchmark_limit",
    "deterministic",
    "enabled",
    "flags",
    "is_acceptable",
    "is_available",
    "version",
]

enabled = True
benchmark = False
benchmark_limit = 10
deterministic = False
allow_tf32 = True


def is_available() -> bool:
    """False: asyncgrad does not use cuDNN."""
    return False


def version() -> int | None:
    return None


def is_acceptable(tensor: object) -> bool:
    return False


@contextmanager
def flags(
    enabled: bool = False,
    benchmark: bool = False,
    benchmark_limit: int = 10,
    deterministic: bool = False,
    allow_tf32: bool = True,
) -> Iterator[None]:
    """Set the flags inside the block, as torch's ``cudnn.flags``, and restore them after."""
    g = globals()
    names = ("enabled", "benchmark", "benchmark_limit", "deterministic", "allow_tf32")
    saved = {n: g[n] for n in names}
    g.update(
        zip(names, (enabled, benchmark, benchmark_limit, deterministic, allow_tf32), strict=True)
    )
    try:
        yield
    finally:
        g.update(saved)
