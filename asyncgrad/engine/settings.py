"""The engine's settings: one object, ``settings``, and ``configure``, the one way to change it.

Every part of the engine reads its options here, when it needs them (a pool sized from
``compute_threads`` sees a new value at its next job), so ``configure`` changes nothing else.
The scheduling policy itself has no knobs (See NOTE [One scheduler] in scheduler.py): its
parameters are fixed, and ``configure`` names them when asked for one of the options it
replaced.
"""

from __future__ import annotations

import os
from typing import Any, Final

DEFAULT_MAX_REENTRANT_DEPTH: Final = 32
DEFAULT_SLICE_S: Final = 0.001
DEFAULT_EXECUTOR_SIZE: Final = 4
DEFAULT_COMPUTE_THREADS: Final = max(1, os.cpu_count() or 1)
# See NOTE [Large nodes] in worker.py (multiply-adds); measured in benchmarks/bench_offload.py.
DEFAULT_OFFLOAD_THRESHOLD: Final = float(1 << 25)


# The options' names, which ``ag.autograd.engine.<name>`` reads.
OPTIONS: Final = frozenset(
    {
        "blas_threads",
        "compute_threads",
        "executor_size",
        "max_reentrant_depth",
        "max_running",
        "offload_threshold",
        "slice_s",
    }
)


class Settings:
    """The engine's options (read them here; change them with ``configure``)."""

    __slots__ = tuple(sorted(OPTIONS))

    def __init__(self) -> None:
        self.max_reentrant_depth = DEFAULT_MAX_REENTRANT_DEPTH  # See NOTE [Reentrant depth]
        self.slice_s = DEFAULT_SLICE_S  # See NOTE [One scheduler]
        self.executor_size = DEFAULT_EXECUTOR_SIZE  # See NOTE [Threads of the engine]
        self.compute_threads = DEFAULT_COMPUTE_THREADS  # See NOTE [Threads of the engine]
        self.max_running: int | None = None  # See NOTE [One scheduler], 6 in scheduler.py
        self.offload_threshold = DEFAULT_OFFLOAD_THRESHOLD  # See NOTE [Large nodes]
        # See NOTE [BLAS threads of the compute threads] in asyncgrad/backend/blas.py.
        self.blas_threads: int | str | None = "auto"


settings: Final = Settings()

# Options that configure() took before the scheduler had one policy, and what replaced them.
REMOVED: Final = {
    "quantum_s": (
        "a graph task counts as large after the scheduler's fixed quantum of node time "
        "(asyncgrad.engine.scheduler.QUANTUM_S)"
    ),
    "large_share": (
        "a large graph task keeps the scheduler's fixed share of its device "
        "(asyncgrad.engine.scheduler.LARGE_SHARE)"
    ),
    "lower_share": (
        "lower priorities keep the scheduler's fixed share of a device "
        "(asyncgrad.engine.scheduler.LOWER_SHARE); order passes with priority="
    ),
}


class _Unset:
    pass


_UNSET: Final = _Unset()


def configure(
    *,
    max_reentrant_depth: int | None = None,
    slice_s: float | None = None,
    executor_size: int | None = None,
    compute_threads: int | None = None,
    max_running: int | _Unset | None = _UNSET,
    offload_threshold: float | None = None,
    blas_threads: int | str | _Unset | None = _UNSET,
    **removed: Any,
) -> None:
    """Set engine options; ``None`` leaves one unchanged. A bad value changes nothing.

    Args:
        max_reentrant_depth: nested backward levels run on one thread's stack before the next
            level moves to the thread pool (default 32; See NOTE [Reentrant depth]).
        slice_s: how long a turn of the event loop lasts at most while the engine has nodes to
            run on it (default 0.001 s): the engine runs nodes for what the loop's other work
            left of it, and at least a quarter of it, then yields (See NOTE [One scheduler]).
        executor_size: threads in the pool for reentrant work past the depth limit, and the
            most pool event loops that run awaited levels past it (default 4; extra one-off
            threads are started when all are busy, so nothing can deadlock).
        compute_threads: threads that run ``ag.run`` calls and large nodes off the loop
            (default: one per core; See NOTE [Threads of the engine]). One fewer than the
            cores keeps a core for the loop: lower loop lag, less throughput.
        max_running: the most top-level graph tasks that run at once on each event loop; the
            rest wait in priority order (See NOTE [One scheduler], 6). ``None``: no cap (the
            default).
        offload_threshold: the estimated work (multiply-adds) above which a CPU node of an
            awaited pass (a matmul, an elementwise op over a large array, any node) runs on a
            compute thread instead of the loop (default 2**25, about 1 ms; See NOTE [Large
            nodes] and NOTE [Work estimates]). ``float("inf")`` keeps every node on the loop.
        blas_threads: the threads each BLAS call uses once the engine runs more than one
            compute thread (set when the compute threads start, process-wide): ``"auto"``
            (the default) one, unless ``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS`` or
            ``MKL_NUM_THREADS`` is set; an int, that many; ``None``, BLAS is left alone
            (See NOTE [BLAS threads of the compute threads] in asyncgrad/backend/blas.py).

    Example:
        >>> import asyncgrad as ag
        >>> ag.configure(max_running=64)
        >>> ag.autograd.engine.max_running
        64
        >>> ag.configure(max_running=None)
    """
    # Every argument is checked before any setting changes, so a bad one changes nothing.
    for name in removed:
        if name in REMOVED:
            raise TypeError(f"configure({name}=...) was removed: {REMOVED[name]}")
        raise TypeError(f"configure() got an unexpected keyword argument {name!r}")
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
    if offload_threshold is not None and not offload_threshold >= 0:
        raise ValueError(f"offload_threshold must be >= 0, got {offload_threshold!r}")
    if not isinstance(blas_threads, _Unset) and not (
        blas_threads is None
        or blas_threads == "auto"
        or (
            isinstance(blas_threads, int)
            and not isinstance(blas_threads, bool)
            and blas_threads >= 1
        )
    ):
        raise ValueError(f"blas_threads must be 'auto', None or an int >= 1, got {blas_threads!r}")

    s = settings
    if max_reentrant_depth is not None:
        s.max_reentrant_depth = max_reentrant_depth
    if slice_s is not None:
        s.slice_s = float(slice_s)
    if executor_size is not None:
        s.executor_size = executor_size
    if compute_threads is not None:
        s.compute_threads = compute_threads
    if not isinstance(max_running, _Unset):
        s.max_running = max_running
    if offload_threshold is not None:
        s.offload_threshold = float(offload_threshold)
    if not isinstance(blas_threads, _Unset):
        s.blas_threads = blas_threads


def get(name: str) -> Any:
    """The current value of the option ``name`` (``ag.autograd.engine.<name>``)."""
    if name in OPTIONS:
        return getattr(settings, name)
    if name in REMOVED:
        raise AttributeError(f"the engine option {name!r} was removed: {REMOVED[name]}")
    raise AttributeError(f"module 'asyncgrad.engine' has no attribute {name!r}")
