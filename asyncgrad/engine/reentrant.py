"""Engine settings, reentrant depth, and the threads that nested or blocking work moves to."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import itertools
import threading
from collections.abc import Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from .graph_task import GraphTask

DEFAULT_MAX_REENTRANT_DEPTH: Final = 32
DEFAULT_SLICE_S: Final = 0.001
DEFAULT_EXECUTOR_SIZE: Final = 4


class _Config:
    __slots__ = ("executor_size", "max_reentrant_depth", "slice_s")

    def __init__(self) -> None:
        self.max_reentrant_depth = DEFAULT_MAX_REENTRANT_DEPTH
        self.slice_s = DEFAULT_SLICE_S
        self.executor_size = DEFAULT_EXECUTOR_SIZE


config: Final = _Config()

# NOTE [Reentrant depth]
# The graph task whose node is running in this task/thread. A backward started while it is set is
# reentrant: it runs at depth + 1, ahead of shallower work in the ready queues (PyTorch's order),
# and past config.max_reentrant_depth levels *on this thread's stack* (local_depth) it moves to a
# pool thread, where local_depth starts again from zero. Awaited nested backward does not grow the
# stack (each node that awaits runs in its own task) but obeys the same limit, so that any depth
# completes in bounded memory per thread.
current_graph_task: ContextVar[GraphTask | None] = ContextVar(
    "asyncgrad_current_graph_task", default=None
)


class _ThreadPool:
    """Pool for reentrant graph tasks past the depth limit. It never deadlocks: when every pool
    thread is busy (blocked on deeper work, say) a one-off thread takes the job instead."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._busy = 0
        self._names = itertools.count()

    def submit(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
        with self._lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    max_workers=config.executor_size, thread_name_prefix="asyncgrad-pool"
                )
            use_pool = self._busy < config.executor_size
            if use_pool:
                self._busy += 1
                pool = self._pool
        if use_pool:

            def run() -> Any:
                try:
                    return fn(*args)
                finally:
                    with self._lock:
                        self._busy -= 1

            return pool.submit(run)
        fut: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def one_off(fut: concurrent.futures.Future[Any]) -> None:
            if not fut.set_running_or_notify_cancel():
                return
            try:
                fut.set_result(fn(*args))
            except BaseException as e:
                fut.set_exception(e)
                del fut  # e's traceback holds this frame, which must not hold e's future

        threading.Thread(
            target=one_off,
            args=(fut,),
            name=f"asyncgrad-reentrant-{next(self._names)}",
            daemon=True,
        ).start()
        return fut

    def shutdown(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)


class _LoopThread:
    """A daemon thread running an event loop, for awaitables met by a blocking (sync) caller."""

    def __init__(self, n: int) -> None:
        # Made in an empty context: uvloop copies the current context into handles it keeps for
        # its whole life, and the caller's holds its graph task (and so that task's graph).
        self.loop = contextvars.Context().run(_new_loop)
        self.thread = threading.Thread(
            target=self._run, name=f"asyncgrad-pool-loop-{n}", daemon=True
        )
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        if not self.thread.is_alive():
            self.loop.close()


class _LoopPool:
    """Helper event loops on threads. Each blocking run takes a free one (or starts one), so a
    nested blocking run inside a helper loop gets another loop and cannot deadlock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._free: list[_LoopThread] = []
        self._all: list[_LoopThread] = []
        self._names = itertools.count()

    def run(self, make_coro: Callable[[], Any]) -> Any:
        with self._lock:
            lt = self._free.pop() if self._free else None
            if lt is None:
                lt = _LoopThread(next(self._names))
                self._all.append(lt)
        # The coroutine runs in a copy of the caller's context, so it sees the caller's grad mode
        # and graph task (queue_callback, reentrant depth) as an awaited one would.
        ctx = contextvars.copy_context()
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def start() -> None:
            task = lt.loop.create_task(_call(make_coro), context=ctx)
            task.add_done_callback(lambda t: _transfer(t, done))

        try:
            lt.loop.call_soon_threadsafe(start)
            return done.result()
        finally:
            with self._lock:
                self._free.append(lt)
            if done.done():
                # done holds the error, whose traceback holds this frame: drop the reference so
                # that no cycle keeps the failed graph alive (start's callback is done with it).
                del done

    def shutdown(self) -> None:
        with self._lock:
            loops, self._all, self._free = self._all, [], []
        for lt in loops:
            lt.stop()


def _transfer(task: asyncio.Task[Any], fut: concurrent.futures.Future[Any]) -> None:
    if task.cancelled():
        fut.cancel()
    elif task.exception() is not None:
        fut.set_exception(task.exception())  # type: ignore[arg-type]
    else:
        fut.set_result(task.result())


async def _call(make_coro: Callable[[], Any]) -> Any:
    return await make_coro()


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()  # type: ignore[no-any-return]


thread_pool: Final = _ThreadPool()
loop_pool: Final = _LoopPool()


def run_blocking(awaitable_factory: Callable[[], Any]) -> Any:
    """Run ``awaitable_factory()`` to completion from sync code, without touching any loop that
    may be running on this thread (it would be blocked by the caller anyway)."""
    return loop_pool.run(awaitable_factory)


def shutdown() -> None:
    """Stop the engine's helper threads (they restart on demand)."""
    thread_pool.shutdown()
    loop_pool.shutdown()
