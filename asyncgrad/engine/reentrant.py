"""Engine settings, reentrant depth, and the threads that nested or blocking work moves to."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import itertools
import sys
import threading
from collections.abc import Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from types import TracebackType

    from .graph_task import GraphTask

DEFAULT_MAX_REENTRANT_DEPTH: Final = 32
DEFAULT_SLICE_S: Final = 0.001
DEFAULT_EXECUTOR_SIZE: Final = 4
# See NOTE [Fair order].
DEFAULT_QUANTUM_S: Final = 0.002
# See NOTE [Large nodes] (multiply-adds); measured in benchmarks/bench_offload.py.
DEFAULT_OFFLOAD_THRESHOLD: Final = float(1 << 25)
DEFAULT_LARGE_SHARE: Final = 0.25
# See NOTE [Lower priorities' share] in asyncgrad/engine/worker.py.
DEFAULT_LOWER_SHARE: Final = 0.1
# How long stopping a helper loop waits for the tasks still on it before cancelling them.
LOOP_STOP_TIMEOUT_S: Final = 5.0


class _Config:
    __slots__ = (
        "executor_size",
        "large_share",
        "lower_share",
        "max_reentrant_depth",
        "max_running",
        "offload_threshold",
        "quantum_s",
        "slice_s",
    )

    def __init__(self) -> None:
        self.max_reentrant_depth = DEFAULT_MAX_REENTRANT_DEPTH
        self.slice_s = DEFAULT_SLICE_S
        self.executor_size = DEFAULT_EXECUTOR_SIZE
        self.quantum_s = DEFAULT_QUANTUM_S
        self.large_share = DEFAULT_LARGE_SHARE
        self.lower_share = DEFAULT_LOWER_SHARE
        self.max_running: int | None = None  # See NOTE [Admission]
        self.offload_threshold = DEFAULT_OFFLOAD_THRESHOLD  # See NOTE [Large nodes]


config: Final = _Config()

# NOTE [Reentrant depth]
# The graph task whose node is running in this task/thread. A backward started while it is set is
# reentrant: it runs at depth + 1, ahead of shallower work in the ready queues (PyTorch's order),
# and is that graph task's child (See NOTE [Cancellation links]). local_depth counts the levels
# nested since the last move; past config.max_reentrant_depth a level moves, and local_depth
# starts again from zero:
#   - An awaited level (``await ag.grad`` in an async backward or hook) never grows a thread's
#     stack: each node that awaits runs in its own task. It moves to one of a few persistent pool
#     event loops (See NOTE [Pool loops]) and is awaited there, blocking no thread, so a chain of
#     any depth runs on a fixed set of threads and loops.
#   - A blocking level (``grad_sync``/``t.backward()`` called by a sync backward) sits on its
#     caller's stack, and that stack cannot be suspended: it moves to a pool thread (or a one-off
#     thread when all are busy, so nothing can deadlock), which is blocked until the level
#     returns. Only such nesting costs a thread per max_reentrant_depth levels; one-off threads
#     end with their level.
current_graph_task: ContextVar[GraphTask | None] = ContextVar(
    "asyncgrad_current_graph_task", default=None
)


# ----------------------------------------------------------------------------- jobs in flight
# Levels handed to the pool (threads and loops), so that wait_idle can wait for them to end.
_jobs_lock = threading.Lock()
_jobs: set[concurrent.futures.Future[Any]] = set()


def _track(fut: concurrent.futures.Future[Any]) -> None:
    with _jobs_lock:
        _jobs.add(fut)
    fut.add_done_callback(_untrack)


def _untrack(fut: concurrent.futures.Future[Any]) -> None:
    with _jobs_lock:
        _jobs.discard(fut)


def jobs_in_flight() -> list[concurrent.futures.Future[Any]]:
    """Levels running on (or queued for) the pool's threads and loops."""
    with _jobs_lock:
        return list(_jobs)


# ----------------------------------------------------------------------------- pool threads
class _ThreadPool:
    """Pool for blocking reentrant graph tasks past the depth limit. It never deadlocks: when
    every pool thread is busy (blocked on deeper work, say) a one-off thread takes the job
    instead. A job runs in a copy of the submitter's context (grad mode, current graph task)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._size = 0
        self._busy = 0
        self._names = itertools.count()

    def submit(self, fn: Callable[..., Any], *args: Any) -> concurrent.futures.Future[Any]:
        ctx = contextvars.copy_context()
        with self._lock:
            if self._pool is None:
                self._size = config.executor_size
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    max_workers=self._size, thread_name_prefix="asyncgrad-pool"
                )
            # Never more jobs than the pool has threads (executor_size may have grown since it
            # was made): a job queued behind busy threads could wait for its own caller.
            use_pool = self._busy < min(config.executor_size, self._size)
            if use_pool:
                self._busy += 1
                pool = self._pool
        if use_pool:

            def run() -> Any:
                try:
                    return ctx.run(fn, *args)
                finally:
                    with self._lock:
                        self._busy -= 1

            fut = pool.submit(run)
            _track(fut)
            return fut
        fut = concurrent.futures.Future()

        def one_off(fut: concurrent.futures.Future[Any]) -> None:
            if not fut.set_running_or_notify_cancel():
                return
            try:
                fut.set_result(ctx.run(fn, *args))
            except BaseException as e:
                fut.set_exception(e)
                del fut  # e's traceback holds this frame, which must not hold e's future

        _track(fut)
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


# ----------------------------------------------------------------------------- pool loops
# NOTE [Pool loops]
# Event loops on threads of their own, for work that must not run on the loop (or thread) that
# meets it: awaited levels past the depth limit (See NOTE [Reentrant depth]), and awaitables met
# by a blocking caller (an async hook or backward in ``t.backward()``: run_blocking).
#   - At most config.executor_size persistent loops, started on demand and shared: many levels
#     and many blocking callers run on one loop at once, as tasks.
#   - A loop whose thread is inside a blocking call (execute_sync or run_blocking, entered from
#     a node or hook running on that loop) is *blocked*: it runs nothing until that call returns,
#     so no new work is handed to it. Work handed to it earlier waits behind the call, but the
#     call never waits for that work: everything it waits for starts after it marked its loop,
#     and so goes to other loops. Hence no cycle of loops waiting for each other.
#   - When every pool loop is blocked, an awaited level stays on the loop it is on (awaiting
#     does not grow a stack), and a blocking caller gets a transient loop that is closed as soon
#     as its call returns: only nesting that blocks a thread at every level (sync over async over
#     sync ...) holds more than the fixed set, and only while it runs.
_tls = threading.local()


class _LoopThread:
    """A daemon thread running an event loop."""

    def __init__(self, name: str) -> None:
        # Made in an empty context: uvloop copies the current context into handles it keeps for
        # its whole life, and the caller's holds its graph task (and so that task's graph).
        self.loop = contextvars.Context().run(_new_loop)
        # Blocking calls in progress on this thread (See NOTE [Pool loops]); changed by this
        # thread only, read by any.
        self.blocked = 0
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        _tls.loop_thread = self
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def stop(self) -> None:
        """Let the tasks still on the loop end (cancelling those that do not in time), stop it,
        join its thread and close it, releasing its file descriptors."""
        try:
            self.loop.call_soon_threadsafe(self._start_finishing)
        except RuntimeError:
            return  # already closed
        self.thread.join(timeout=2 * LOOP_STOP_TIMEOUT_S)
        if not self.thread.is_alive():
            self.loop.close()

    def _start_finishing(self) -> None:
        self.loop.create_task(self._finish())

    async def _finish(self) -> None:
        others = asyncio.all_tasks() - {asyncio.current_task()}
        if others:
            _, late = await asyncio.wait(others, timeout=LOOP_STOP_TIMEOUT_S)
            for t in late:
                t.cancel()
            if late:
                await asyncio.wait(late, timeout=LOOP_STOP_TIMEOUT_S)
        self.loop.stop()


class _Blocking:
    """Marks the calling thread's pool loop (if it runs one) blocked while in the block."""

    __slots__ = ("_lt",)

    def __enter__(self) -> None:
        lt: _LoopThread | None = getattr(_tls, "loop_thread", None)
        self._lt = lt
        if lt is not None:
            lt.blocked += 1

    def __exit__(
        self,
        et: type[BaseException] | None,
        e: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._lt is not None:
            self._lt.blocked -= 1


def blocking() -> _Blocking:
    """``with blocking():`` around a call that blocks its thread until deeper work is done."""
    return _Blocking()


class _LoopPool:
    """The pool loops of NOTE [Pool loops]."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._all: list[_LoopThread] = []  # the persistent loops
        self._next = 0
        self._names = itertools.count()
        self._transient_names = itertools.count()

    def loops(self) -> list[_LoopThread]:
        with self._lock:
            return list(self._all)

    def pick(self, running: asyncio.AbstractEventLoop | None) -> _LoopThread | None:
        """A pool loop that can take work now, from code running on ``running`` (None: no
        loop): another unblocked loop, in turn; else ``running`` itself if it is an unblocked
        pool loop; else a new one if there are fewer than executor_size; else None."""
        with self._lock:
            loops = self._all
            n = len(loops)
            own = None
            for i in range(n):
                lt = loops[(self._next + i) % n]
                if lt.blocked:
                    continue
                if lt.loop is running:
                    own = lt
                    continue
                self._next = (self._next + i + 1) % n
                return lt
            if own is not None:
                return own
            if n < config.executor_size:
                lt = _LoopThread(f"asyncgrad-pool-loop-{next(self._names)}")
                loops.append(lt)
                return lt
        return None

    def spawn(
        self, loop: asyncio.AbstractEventLoop, make_coro: Callable[[], Any], ctx: Any
    ) -> concurrent.futures.Future[Any]:
        """Run ``make_coro()`` as a task on ``loop`` in context ``ctx``; its result comes back
        through the returned future (tracked for wait_idle). Cancelling the future before the
        task starts means it never starts."""
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()

        def start() -> None:
            if not done.set_running_or_notify_cancel():
                return
            task = loop.create_task(_call(make_coro), context=ctx)
            task.add_done_callback(lambda t: _transfer(t, done))

        loop.call_soon_threadsafe(start)
        _track(done)  # only once it is sure to end (a closed loop raises above)
        return done

    def run(self, make_coro: Callable[[], Any]) -> Any:
        """Run ``make_coro()`` on a pool loop (or a transient one) and block until it ends.

        The coroutine runs in a copy of the caller's context, so it sees the caller's grad mode
        and graph task (queue_callback, reentrant depth) as an awaited one would; cancelling
        that graph task cancels it (See NOTE [Cancellation links])."""
        with blocking():
            lt = self.pick(asyncio._get_running_loop())
            transient = lt is None
            if lt is None:
                lt = _LoopThread(f"asyncgrad-loop-{next(self._transient_names)}")
            loop = lt.loop
            gt = current_graph_task.get()
            ctx = contextvars.copy_context()
            sniffio = sys.modules.get("sniffio")
            if sniffio is not None:
                # The coroutine runs on an asyncio loop: a caller inside trio (anyio.run sets
                # sniffio's variable for its whole run) must not make anyio in it take trio's
                # path (See NOTE [Other event loops] in foreign.py).
                ctx.run(sniffio.current_async_library_cvar.set, None)
            done: concurrent.futures.Future[Any] = concurrent.futures.Future()

            def start() -> None:
                task = loop.create_task(_call(make_coro), context=ctx)
                if gt is not None:
                    if gt.add_remote(loop, task):
                        task.add_done_callback(lambda t: gt.discard_remote(loop, t))
                    else:
                        task.cancel()
                task.add_done_callback(lambda t: _transfer(t, done))

            try:
                loop.call_soon_threadsafe(start)
                return done.result()
            finally:
                if transient:
                    lt.stop()
                if done.done():
                    # done holds the error, whose traceback holds this frame: drop the
                    # reference so that no cycle keeps the failed graph alive.
                    del done

    def shutdown(self) -> None:
        with self._lock:
            loops, self._all = self._all, []
        for lt in loops:
            lt.stop()


def _transfer(task: asyncio.Task[Any], fut: concurrent.futures.Future[Any]) -> None:
    if task.cancelled():
        if not fut.cancel():  # a running future cannot be cancelled: it gets the error instead
            fut.set_exception(asyncio.CancelledError())
    elif (exc := task.exception()) is not None:
        fut.set_exception(exc)
    else:
        fut.set_result(task.result())


async def _call(make_coro: Callable[[], Any]) -> Any:
    return await make_coro()


def _new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    return loop


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
