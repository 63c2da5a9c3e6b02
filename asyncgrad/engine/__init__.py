"""The asyncio autograd engine: one scheduler per event loop, one worker task per device.

``ag.configure(...)`` (also ``ag.autograd.engine.configure``) sets its options, and
``ag.autograd.engine.<option>`` reads one (See asyncgrad/engine/settings.py). How a gradient
goes through the engine: the docstring of asyncgrad/engine/engine.py.
"""

from __future__ import annotations

from typing import Any

from ..backend.blas import state as blas
from . import settings as _settings
from .engine import execute, execute_sync, queue_callback, wait_idle
from .offload import run
from .pools import compute_pool, shutdown
from .scheduler import reset_stats, stats
from .settings import configure

__all__ = [
    "blas",
    "compute_pool",
    "configure",
    "execute",
    "execute_sync",
    "queue_callback",
    "reset_stats",
    "run",
    "shutdown",
    "stats",
    "wait_idle",
]


def __getattr__(name: str) -> Any:
    return _settings.get(name)
