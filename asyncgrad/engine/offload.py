"""``ag.run``: a model's forward, or any heavy array work, on the engine's compute threads.

NOTE [Work off the loop]
NumPy releases the GIL inside large kernels (BLAS, most ufunc loops over big arrays), so a
thread running one leaves the loop free to serve, and a second core free to run another
thread. The engine's compute threads (See NOTE [Threads of the engine] in pools.py) run two
things:
  - ``await ag.run(fn, *args)``: a model's forward, or any array work, in a copy of the
    caller's context (grad modes, the current graph task and every other context variable flow
    along, which torch's thread-local state does not), in its caller's flow's turn (See NOTE
    [One scheduler]). Cancelling the awaiting coroutine abandons the result: work not started
    yet never starts; a function already running finishes on its thread (Python cannot stop
    it) and its result is dropped.
  - a CPU node whose work is large (See NOTE [Large nodes] in worker.py), while the device
    worker goes on with other ready nodes.
Under trio (no asyncio loop), ``ag.run`` goes through anyio's thread offload instead.

NOTE [A core for the loop]
Compute threads that keep every core busy also take the event loop's core: the loop thread is
then runnable but waits for the OS to preempt one of them, so the loop lags by the OS's time
slices, not by anything the engine runs (neither the GIL nor a lower OS priority for compute
threads changes that much). So the default keeps every core computing, for throughput; a
server on few cores whose loop latency matters more keeps one for the loop with
``configure(compute_threads=os.cpu_count() - 1)``. benchmarks/server_smoothgrad.py measures
both over HTTP (numbers in benchmarks/RESULTS.md).
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from .._build import adapt_await
from . import scheduler
from .pools import callable_name, compute_pool

T = TypeVar("T")


async def run(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """Run ``fn(*args, **kwargs)`` on one of the engine's compute threads and return its result,
    without blocking the event loop meanwhile.

    Use it for a model's forward pass or any other large array work in an async server: NumPy
    releases the GIL in large kernels, so the loop keeps serving (and another core keeps
    computing) while ``fn`` runs. ``fn`` runs in a copy of the caller's context, so grad modes
    (``no_grad``, ``enable_grad``, ...) apply inside it as they do here. Small work is faster
    inline: a hand-off costs about 0.1 ms on a 2-core VM (a little less than
    ``asyncio.to_thread``). See NOTE [Work off the loop].

    Cancelling the awaiting coroutine (a timeout, a client gone) abandons the result; a ``fn``
    already running finishes on its thread.

    Example:
        >>> import asyncio, asyncgrad as ag
        >>> model = ag.nn.Linear(4, 2)
        >>> async def forward(x):
        ...     return await ag.run(model, x)
        >>> asyncio.run(forward(ag.ones(3, 4))).shape
        asyncgrad.Size([3, 2])
    """
    if not callable(fn):
        raise TypeError(f"ag.run(fn, ...) needs a callable, got {type(fn).__name__}")
    if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - an async __call__ counts too
    ):
        raise TypeError(
            f"ag.run runs a plain function on a thread, but {callable_name(fn)} is a coroutine "
            "function: await it directly instead"
        )
    loop = asyncio._get_running_loop()
    ctx = contextvars.copy_context()
    if kwargs:
        fn = functools.partial(fn, **kwargs)
    if loop is None:
        # Not on an asyncio loop: trio, or another loop anyio knows.
        import anyio.to_thread

        return await adapt_await(
            anyio.to_thread.run_sync(ctx.run, fn, *args, abandon_on_cancel=True)
        )
    # A call continues its caller's flow (See NOTE [One scheduler], 2); trio's tasks are not
    # asyncio's, so there each call is a flow of its own.
    sched = scheduler.of(loop)
    flow = sched.flow()
    turn, key = sched.job_key(flow)
    # See NOTE [Answers on the loop] in pools.py.
    result: T = await adapt_await(compute_pool.get().run_keyed(key, loop, ctx.run, fn, *args))
    sched.returned(flow, turn, 0.0 if flow is None else flow.service)
    return result
