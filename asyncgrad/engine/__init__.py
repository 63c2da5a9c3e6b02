"""The asyncio autograd engine: one worker task per device per event loop.

``ag.autograd.engine.configure(...)`` tunes it; ``max_reentrant_depth``, ``slice_s`` and
``executor_size`` read the current settings.
"""

from __future__ import annotations

from typing import Any

from .engine import execute, execute_sync, queue_callback, wait_idle
from .metrics import reset_stats, stats
from .offload import compute_pool, run
from .reentrant import config
from .reentrant import shutdown as _shutdown_reentrant

__all__ = [
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


class _Unset:
    pass


_UNSET = _Unset()


def configure(
    *,
    max_reentrant_depth: int | None = None,
    slice_s: float | None = None,
    executor_size: int | None = None,
    compute_threads: int | None = None,
    max_running: int | _Unset | None = _UNSET,
    quantum_s: float | None = None,
    large_share: float | None = None,
    lower_share: float | None = None,
    offload_threshold: float | None = None,
) -> None:
    """Set engine options; ``None`` leaves one unchanged.

    Args:
        max_reentrant_depth: nested backward levels run on one thread's stack before the next
            level moves to the thread pool (default 32).
        slice_s: how long a turn of the event loop lasts at most while a device worker has
            nodes to run: the worker runs nodes for what the loop's other work of its last turn
            left of it, and at least a quarter of it, then yields (default 0.001 s; See NOTE
            [Slices share the loop's turn]).
        executor_size: threads in the pool for reentrant work past the depth limit, and the
            most pool event loops that run awaited levels past it (default 4; extra one-off
            threads are started when all are busy, so nothing can deadlock).
        compute_threads: threads that run ``ag.run`` calls and large nodes off the loop
            (default: one per core; See NOTE [Work off the loop]). One fewer than the cores
            keeps a core for the loop: lower loop lag, less throughput (See NOTE [A core for
            the loop]).
        max_running: the most top-level graph tasks that run at once on each event loop; the
            rest wait in priority order (See NOTE [Admission]). ``None``: no cap (the default).
        quantum_s: node time after which a graph task counts as large and later arrivals may
            pass it, and after which a request's next call takes a new turn (default 0.002 s;
            See NOTE [Fair order] and NOTE [A request keeps its turn]).
        large_share: the least share of its device's time a large graph task keeps while
            newer requests keep arriving, in (0, 1] (default 0.25; See NOTE [Fair order]). 1
            keeps its turn: every graph task built after it waits for it.
        lower_share: the least share of a device's time that graph tasks of lower priority
            keep while higher-priority work keeps it busy, in [0, 1) (default 0.1; See NOTE
            [Lower priorities' share]). 0: strict priority, lower priorities get only what
            higher ones leave.
        offload_threshold: the estimated multiply-adds from which a CPU node (a matmul, say)
            runs on a compute thread instead of the loop (default 2**25, about 1 ms; See
            NOTE [Large nodes]). ``float("inf")`` keeps every node on the loop.
    """
    # Every argument is checked before any setting changes, so a bad one changes nothing.
    if max_reentrant_depth is not None and (
        not isinstance(max_reentrant_depth, int) or max_reentrant_depth < 0
    ):
        raise ValueError(f"max_reentrant_depth must be an int >= 0, got {max_reentrant_depth!r}")
    if slice_s is not None and not slice_s > 0:
        raise ValueError(f"slice_s must be > 0, got {slice_s!r}")
    if executor_size is not None and (not isinstance(executor_size, int) or executor_size < 1):
        raise ValueError(f"executor_size must be an int >= 1, got {executor_size!r}")
    if compute_threads is not None and (
        not isinstance(compute_threads, int) or compute_threads < 1
    ):
        raise ValueError(f"compute_threads must be an int >= 1, got {compute_threads!r}")
    if not isinstance(max_running, _Unset) and (
        max_running is not None and (not isinstance(max_running, int) or max_running < 1)
    ):
        raise ValueError(f"max_running must be None or an int >= 1, got {max_running!r}")
    if quantum_s is not None and not quantum_s > 0:
        raise ValueError(f"quantum_s must be > 0, got {quantum_s!r}")
    if large_share is not None and not 0 < large_share <= 1:
        raise ValueError(f"large_share must be in (0, 1], got {large_share!r}")
    if lower_share is not None and not 0 <= lower_share < 1:
        raise ValueError(f"lower_share must be in [0, 1), got {lower_share!r}")
    if offload_threshold is not None and not offload_threshold >= 0:
        raise ValueError(f"offload_threshold must be >= 0, got {offload_threshold!r}")

    if max_reentrant_depth is not None:
        config.max_reentrant_depth = max_reentrant_depth
    if slice_s is not None:
        config.slice_s = float(slice_s)
    if executor_size is not None:
        config.executor_size = executor_size
    if compute_threads is not None:
        compute_pool.resize(compute_threads)
    if not isinstance(max_running, _Unset):
        config.max_running = max_running
    if quantum_s is not None:
        config.quantum_s = float(quantum_s)
    if large_share is not None:
        config.large_share = float(large_share)
    if lower_share is not None:
        config.lower_share = float(lower_share)
    if offload_threshold is not None:
        config.offload_threshold = float(offload_threshold)


def shutdown() -> None:
    """Stop the engine's helper and compute threads (they restart on demand)."""
    _shutdown_reentrant()
    compute_pool.shutdown()


def __getattr__(name: str) -> Any:
    if name in (
        "max_reentrant_depth",
        "slice_s",
        "executor_size",
        "max_running",
        "quantum_s",
        "large_share",
        "lower_share",
        "offload_threshold",
    ):
        return getattr(config, name)
    if name == "compute_threads":
        return compute_pool.size
    raise AttributeError(f"module 'asyncgrad.engine' has no attribute {name!r}")
