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

NOTE [A core for the loop]
Compute threads that keep every core busy also take the event loop's core: the loop thread is
then runnable but waits for the OS to preempt one of them, so the loop lags by the OS's time
slices, not by anything the engine runs. Measured on a 2-core VM (SmoothGrad load in one
process: 200 requests at once, each ``ag.run`` of an MLP 64-1024-1024-1024-10 forward on 32
samples, then ``ag.grad``; the loop thread's run-queue time from /proc): with two compute
threads the loop thread waited for a core 41% of the run, the engine's slices (1 ms of work)
took 5.6 ms at p99 and a 1 ms ticker lagged 9.0 ms at p99; with one, 0%, 0.6 ms and 1.1 ms,
and throughput fell from 244 to 169 requests/s. The GIL is not the cause (a switch interval
from 0.2 to 5 ms changed nothing), and a lower OS priority for compute threads (nice 19) left
the loop waiting 14% of the run. So the default keeps every core computing; a server on few
cores whose loop latency matters more than its throughput keeps one for the loop with
``configure(compute_threads=os.cpu_count() - 1)``. benchmarks/server_smoothgrad.py measures
both over HTTP.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import functools
import heapq
import inspect
import itertools
import os
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, TypeVar

from .ready_queue import keep_turn, key_base, now_us, request_of_caller
from .reentrant import config

T = TypeVar("T")

# NOTE [Turns on compute threads]
# Compute threads take their jobs by priority, then by the turn of the request they serve (its
# arrival), not in submission order: a large node of a graph task goes ahead of the forward
# passes of requests that came after it, so a burst of requests that each run a forward with
# ``ag.run`` and then a backward does not finish all late together. (The turn is the graph
# task's own, not its place among large ones in the ready queues, See NOTE [Fair order]: that
# place moves while it runs, and waiting ones sort last there.) A request's calls share its
# turn, its forward's and its backward's alike: See NOTE [A request keeps its turn] in
# ready_queue.py.

DEFAULT_COMPUTE_THREADS = max(1, os.cpu_count() or 1)


class TurnPool(concurrent.futures.Executor):
    """Compute threads that take jobs smallest key first (See NOTE [Turns on compute threads]),
    not in submission order."""

    def __init__(self, size: int, name: str = "asyncgrad-compute") -> None:
        self._size = size
        self._name = name
        self._cond = threading.Condition()
        self._heap: list[tuple[int, int, Any, asyncio.AbstractEventLoop | None, Job]] = []
        self._threads: list[threading.Thread] = []
        self._closed = False

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        return self.submit_keyed(key_base(0, 0, now_us()), fn, *args, **kwargs)

    def submit_keyed(
        self, key: int, fn: Callable[..., T], /, *args: Any, **kwargs: Any
    ) -> Future[T]:
        """Run ``fn(*args, **kwargs)`` in the turn of ``key``; a concurrent.futures.Future."""
        fut: Future[T] = Future()
        self._enqueue(key, fut, None, (fn, args, kwargs or None))
        return fut

    def run_keyed(
        self, key: int, loop: asyncio.AbstractEventLoop, fn: Callable[..., T], /, *args: Any
    ) -> asyncio.Future[T]:
        """Run ``fn(*args)`` in the turn of ``key``; an asyncio future of ``loop``, which must be
        the running loop (See NOTE [Answers on the loop])."""
        fut: asyncio.Future[T] = loop.create_future()
        self._enqueue(key, fut, loop, (fn, args, None))
        return fut

    def _enqueue(
        self, key: int, fut: Any, loop: asyncio.AbstractEventLoop | None, job: Job
    ) -> None:
        with self._cond:
            if self._closed:
                raise RuntimeError("cannot schedule new work after the compute pool shut down")
            heapq.heappush(self._heap, (key, next(_jobs), fut, loop, job))
            if len(self._threads) < self._size:
                t = threading.Thread(
                    target=self._work, name=f"{self._name}_{len(self._threads)}", daemon=True
                )
                self._threads.append(t)
                t.start()
            else:
                self._cond.notify()

    def _work(self) -> None:
        cond = self._cond
        while True:
            with cond:
                while not self._heap and not self._closed:
                    cond.wait()
                if not self._heap:
                    return  # closed and drained
                _, _, fut, loop, (fn, args, kwargs) = heapq.heappop(self._heap)
            if loop is not None:
                _answer(loop, fut, fn, args)
                del fut, loop, fn, args  # nothing of the job stays alive with this thread
                continue
            if not fut.set_running_or_notify_cancel():
                continue  # cancelled while it waited
            try:
                result = fn(*args) if kwargs is None else fn(*args, **kwargs)
            except BaseException as exc:
                fut.set_exception(exc)
                del fut, exc  # the error's traceback holds this frame
            else:
                fut.set_result(result)
                del fut, result

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._cond:
            self._closed = True
            if cancel_futures:
                for _, _, fut, loop, _ in self._heap:
                    if loop is None:
                        fut.cancel()
                    else:
                        _call_on(loop, fut.cancel)
                self._heap.clear()
            self._cond.notify_all()
            threads = list(self._threads)
        if wait:
            for t in threads:
                t.join()


# A job: the function, its positional arguments, and its keyword arguments (None: none).
Job = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any] | None]


# NOTE [Answers on the loop]
# A job for a coroutine (``ag.run``, a large node) carries the asyncio future its caller awaits
# and that future's loop, and the compute thread hands the outcome to the loop itself with one
# ``call_soon_threadsafe``: no concurrent.futures.Future in between (with its lock, condition
# and waiter lists) and no ``asyncio.wrap_future`` chaining the two (three closures and their
# cells). Under a burst every pending job's objects are alive at once for the cyclic collector
# to scan: a pending ``ag.run`` (its task included) kept 37 of them, and keeps 12 this way; and
# 3,000 gathered ``ag.run`` calls of a trivial function cost 26-31 µs each instead of 57-66
# (2-core VM). A job whose future was cancelled before a thread took it (the caller timed out,
# say) never runs; a running one finishes and its outcome is dropped. A StopIteration from the
# function reaches the caller as the cause of a RuntimeError, since an asyncio future cannot
# hold one; and a loop that has closed meanwhile gets nothing.
def _answer(loop: asyncio.AbstractEventLoop, fut: asyncio.Future[Any], fn: Any, args: Any) -> None:
    """On a compute thread: run a coroutine's job and hand its outcome to ``loop``."""
    if fut.cancelled():  # a plain read: at worst the job runs and its outcome is dropped
        return
    try:
        result = fn(*args)
    except BaseException as exc:  # the caller gets whatever it raised
        if isinstance(exc, StopIteration):
            # Name the caller's function, not the context it ran in (``ctx.run(fn, ...)``).
            inner = type(getattr(fn, "__self__", None)) is contextvars.Context and args
            err = RuntimeError(f"{_name(args[0] if inner else fn)} raised StopIteration")
            err.__cause__ = exc
            exc = err
        _call_on(loop, _set_exception, fut, exc)
        del exc  # its traceback holds this frame
    else:
        _call_on(loop, _set_result, fut, result)


def _call_on(loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any) -> None:
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:  # the loop has closed: nobody awaits the answer any more
        pass


def _set_result(fut: asyncio.Future[Any], result: Any) -> None:
    if not fut.done():
        fut.set_result(result)


def _set_exception(fut: asyncio.Future[Any], exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)


_jobs = itertools.count()


class _ComputePool:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: TurnPool | None = None
        self.size = DEFAULT_COMPUTE_THREADS

    def get(self) -> TurnPool:
        pool = self._pool
        if pool is None:
            with self._lock:
                pool = self._pool
                if pool is None:
                    pool = self._pool = TurnPool(self.size)
        return pool

    def resize(self, size: int) -> None:
        with self._lock:
            self.size = size
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)  # its queued jobs finish; new ones go to the new pool

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
            f"ag.run runs a plain function on a thread, but {_name(fn)} is a coroutine "
            "function: await it directly instead"
        )
    loop = asyncio._get_running_loop()
    # A call of a request that made one before takes its turn (See NOTE [A request keeps its
    # turn]); trio's tasks are not asyncio's, so there each call has its own.
    req = None if loop is None else request_of_caller()
    turn = now_us() if req is None else req.turn
    ctx = contextvars.copy_context()
    if kwargs:
        fn = functools.partial(fn, **kwargs)
    if loop is None:
        # Not on an asyncio loop: trio, or another loop anyio knows.
        import anyio.to_thread

        return await anyio.to_thread.run_sync(ctx.run, fn, *args, abandon_on_cancel=True)
    # See NOTE [Answers on the loop].
    result: T = await compute_pool.get().run_keyed(key_base(0, 0, turn), loop, ctx.run, fn, *args)
    keep_turn(req, turn, 0.0 if req is None else req.service, config.quantum_s)
    return result


def _name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__qualname__
