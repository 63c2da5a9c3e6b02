"""The engine's threads and helper loops: every way it runs work off the event loop it serves.

NOTE [Threads of the engine]
Three kinds of helpers, because three kinds of work must leave the loop (or thread) that meets it,
and each would deadlock or stall in another's:
  - compute threads (``TurnPool``, ``configure(compute_threads=...)``, one per core by default)
    run leaf work that never waits for the engine: ``ag.run`` (a forward, say) and large nodes
    (See NOTE [Large nodes] in worker.py). A fixed number, taking jobs in the scheduler's order
    (See NOTE [Turns on compute threads]), so a burst cannot start more threads than cores.
  - reentrant threads (``thread_pool``) run a blocking backward nested past the depth limit
    (See NOTE [Reentrant depth]). Such a level blocks its thread until deeper levels end, which
    may need a thread of their own: a fixed pool could fill with waiting levels, so when every
    pool thread is busy a one-off thread takes the job instead.
  - pool loops (``loop_pool``, See NOTE [Pool loops]) run coroutines that must not run on the loop
    that meets them: awaited levels past the depth limit, and the async hooks a blocking caller
    meets. A coroutine needs a loop, not a thread.
Under trio (no asyncio loop) ``ag.run`` and awaited passes use anyio's worker threads instead,
trio's own way to wait for a thread (See NOTE [Other event loops] in foreign.py).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import heapq
import itertools
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Final, TypeVar

from .._build import adapt_await, mypyc_attr
from ..backend import blas
from .reentrant import current_graph_task
from .settings import settings

if TYPE_CHECKING:
    from types import TracebackType

T = TypeVar("T")

# How long stopping a helper loop waits for the tasks still on it before cancelling them.
LOOP_STOP_TIMEOUT_S: Final = 5.0
# What a spent future variable is rebound to, so that it no longer holds an error.
_SPENT: Final[concurrent.futures.Future[Any]] = concurrent.futures.Future()

# NOTE [Turns on compute threads]
# Compute threads take their jobs by the scheduler's keys (priority, then the turn of the flow
# they serve: See NOTE [One scheduler]), not in submission order: a large node of a graph task
# goes ahead of the forwards of requests that came after it, so a burst of requests that each
# run a forward with ``ag.run`` and then a backward does not finish all late together. A large
# node carries its graph task's arrival turn, not its place among large ones in the ready
# queues (that place moves while it runs, and waiting ones sort last there).


@mypyc_attr(allow_interpreted_subclasses=True)  # tests subclass it (NOTE [Compiled modules])
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
        """The Executor interface: ``fn`` runs after every keyed job queued before it."""
        return self.submit_keyed(UNKEYED, fn, *args, **kwargs)

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
            heapq.heappush(self._heap, (key, next(_job_order), fut, loop, job))
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


# Jobs submitted through the Executor interface (tests, tools) go after every keyed one.
UNKEYED: Final = 1 << 200

# A job: the function, its positional arguments, and its keyword arguments (None: none).
Job = tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any] | None]


# NOTE [Answers on the loop]
# A job for a coroutine (``ag.run``, a large node) carries the asyncio future its caller awaits
# and that future's loop, and the compute thread hands the outcome to the loop itself with one
# ``call_soon_threadsafe``: no concurrent.futures.Future in between (with its lock, condition
# and waiter lists) and no ``asyncio.wrap_future`` chaining the two (three closures and their
# cells). Under a burst every pending job's objects are alive at once for the cyclic collector
# to scan, so fewer per job is faster (benchmarks/RESULTS.md). A job whose future was cancelled
# before a thread took it (the caller timed out, say) never runs; a running one finishes and its
# outcome is dropped. A StopIteration from the function reaches the caller as the cause of a
# RuntimeError, since an asyncio future cannot hold one; and a loop that has closed meanwhile
# gets nothing.
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
            err = RuntimeError(f"{callable_name(args[0] if inner else fn)} raised StopIteration")
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


_job_order = itertools.count()


class _ComputePool:
    """The compute threads: one TurnPool of ``settings.compute_threads`` threads, replaced by a
    new one at the next job after ``configure(compute_threads=...)`` changed the number (the old
    one finishes its queued jobs and ends)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pool: TurnPool | None = None
        self._made_for = 0  # the setting the pool was made for

    @property
    def size(self) -> int:
        return settings.compute_threads

    def get(self) -> TurnPool:
        pool = self._pool
        if pool is None or self._made_for != settings.compute_threads:
            with self._lock:
                pool = self._pool
                n = settings.compute_threads
                if pool is None or self._made_for != n:
                    _set_blas_threads(n)
                    old, pool = pool, TurnPool(n)
                    self._pool, self._made_for = pool, n
                    if old is not None:
                        old.shutdown(wait=False)  # its queued jobs finish; new ones come here
        return pool

    def shutdown(self) -> None:
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True)


compute_pool = _ComputePool()


def _set_blas_threads(n: int) -> None:
    """BLAS's threads per call for ``n`` compute threads (See NOTE [BLAS threads of the compute
    threads] in asyncgrad/backend/blas.py)."""
    want = settings.blas_threads
    if want is None:
        blas.leave("left alone: blas_threads=None")
    elif want != "auto":
        blas.limit_threads(int(want))
    elif n < 2:
        blas.leave("left alone: one compute thread")
    elif (variable := blas.chosen_by_environment()) is not None:
        blas.leave(f"left alone: {variable} is set")
    else:
        blas.limit_threads(1)


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
                self._size = settings.executor_size
                self._pool = concurrent.futures.ThreadPoolExecutor(
                    max_workers=self._size, thread_name_prefix="asyncgrad-pool"
                )
            # Never more jobs than the pool has threads (executor_size may have grown since it
            # was made): a job queued behind busy threads could wait for its own caller.
            use_pool = self._busy < min(settings.executor_size, self._size)
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
#   - At most executor_size persistent loops, started on demand and shared: many levels
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
            _, late = await adapt_await(asyncio.wait(others, timeout=LOOP_STOP_TIMEOUT_S))
            for t in late:
                t.cancel()
            if late:
                await adapt_await(asyncio.wait(late, timeout=LOOP_STOP_TIMEOUT_S))
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
            if n < settings.executor_size:
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
            except BaseException:
                if done.done():
                    # done holds the error, whose traceback holds this frame: drop the
                    # reference so that no cycle keeps the failed graph alive (rebinding, not
                    # del: start's closure shares the variable, which compiled code cannot
                    # delete).
                    done = _SPENT
                raise
            finally:
                if transient:
                    lt.stop()

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
    return await adapt_await(make_coro())


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
    """Stop the engine's helper and compute threads and its pool loops (they restart on
    demand)."""
    thread_pool.shutdown()
    loop_pool.shutdown()
    compute_pool.shutdown()


def callable_name(fn: Any) -> str:
    return getattr(fn, "__qualname__", None) or type(fn).__qualname__
