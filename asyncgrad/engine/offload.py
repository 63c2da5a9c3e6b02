"""Heavy work off the event loop: the engine's compute threads, ``ag.run`` and large nodes.

NOTE [Work off the loop]
NumPy releases the GIL inside large kernels (BLAS, most ufunc loops over big arrays), so a
thread running one leaves the loop free to serve, and a second core free to run another
thread. The engine keeps one pool of compute threads (``configure(compute_threads=...)``, by
default one per core) for two things:
  - ``await ag.run(fn, *args)``: a model's forward, or any array work, on a compute thread, in
    a copy of the caller's context (grad modes, the current graph task and every other context
    variable flow along, which torch's thread-local state does not). Cancelling the awaiting
    coroutine abandons the result: work not started yet never starts; a function already
    running finishes on its thread (Python cannot stop it) and its result is dropped.
  - a CPU node whose arrays are large (See NOTE [Large nodes] in worker.py) runs on a compute
    thread while the device worker goes on with other ready nodes.
Under trio (no asyncio loop), ``ag.run`` goes through anyio's thread offload instead.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import inspect
import os
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

DEFAULT_COMPUTE_THREADS = max(1, os.cpu_count() or 1)


class _ComputePool:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self.size = DEFAULT_COMPUTE_THREADS

    def get(self) -> concurrent.futures.ThreadPoolExecutor:
        pool = self._pool
        if pool is None:
            with self._lock:
                pool = self._pool
                if pool is None:
                    pool = self._pool = concurrent.futures.ThreadPoolExecutor(
                        max_workers=self.size, thread_name_prefix="asyncgrad-compute"
                    )
        return pool

    def resize(self, size: int) -> None:
        with self._lock:
            self.size = size
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)  # its running jobs finish; new ones go to the new pool

    def shutdown(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)


compute_pool = _ComputePool()


async def run(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """Run ``fn(*args, **kwargs)`` on one of the engine's compute threads and return its result,
    without blocking the event loop meanwhile.

    Use it for a model's forward pass or any other large array work in an async server: NumPy
    releases the GIL in large kernels, so the loop keeps serving (and another core keeps
    computing) while ``fn`` runs. ``fn`` runs in a copy of the caller's context, so grad modes
    (``no_grad``, ``enable_grad``, ...) apply inside it as they do here. Small work is faster
    inline: a hand-off costs about 0.2 ms on a 2-core VM (as ``asyncio.to_thread`` does). See
    NOTE [Work off the loop].

    Cancelling the awaiting coroutine (a timeout, a client gone) abandons the result; a ``fn``
    already running finishes on its thread.

    Example:
        >>> import asyncio, asyncgrad as ag
        >>> model = ag.nn.Linear(4, 2)
        >>> async def forward(x):
        ...     return await ag.run(model, x)
        >>> asyncio.run(forward(ag.ones(3, 4))).shape
        (3, 2)
    """
    if not callable(fn):
        raise TypeError(f"ag.run(fn, ...) needs a callable, got {type(fn).__name__}")
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - an async __call__ counts too
    ):
        raise TypeError(
            f"ag.run runs a plain function on a thread, but {_name(fn)} is a coroutine "
            "function: await it directly instead"
        )
    ctx = contextvars.copy_context()
    call = functools.partial(ctx.run, fn, *args, **kwargs)
    loop = asyncio._get_running_loop()
    if loop is None:
        # Not on an asyncio loop: trio, or another loop anyio knows.
        import anyio.to_thread

        return await anyio.to_thread.run_sync(call, abandon_on_cancel=True)
    return await loop.run_in_executor(compute_pool.get(), call)


def _name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__qualname__
