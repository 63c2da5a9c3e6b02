"""Awaiting a backward pass on an event loop that is not asyncio's (trio, through anyio).

NOTE [Other event loops]
The engine's device workers are asyncio tasks, so ``await ag.grad(...)`` runs its graph task on
the running asyncio loop; uvloop's loop is an asyncio loop and needs nothing more. Under trio
(or any loop that anyio drives other than asyncio) no asyncio loop runs in the awaiting thread:
``execute`` sees ``asyncio._get_running_loop() is None`` and hands the call to
``execute_foreign`` here, which
  - runs the graph task with the blocking executor (``_execute_sync``, as ``t.backward()``
    does) on one of anyio's worker threads (``anyio.to_thread.run_sync``), in a copy of the
    caller's context (grad mode and every other context variable flow along, but sniffio's
    "current library" is cleared: the pass is not on trio, and async hooks it runs on helper
    asyncio loops must be taken for asyncio's), and awaits it without blocking the loop.
    Errors raised by nodes reach the caller unchanged, with the same notes naming the node as
    on asyncio;
  - when the awaiting task is cancelled (a ``trio.fail_after``/``anyio.fail_after`` timeout, a
    cancel scope) or interrupted, marks the graph task cancelled (``request_cancel``: See NOTE
    [Cancellation links]), which the blocking executor sees while preparing, between slices
    of its drain loop, or when the node running then returns (an async hook or backward it
    awaits on a helper loop is cancelled at once); waits, shielded and for at most
    STOP_TIMEOUT_S, until the thread has left the graph task, so nothing writes into
    ``.grad`` once the cancellation has reached the caller: each leaf's ``.grad`` is untouched
    or complete (nodes that ran in the slice before the flag was seen may have accumulated);
    then lets the cancellation go on. A pass still waiting for a worker thread never starts.
    A node still running after STOP_TIMEOUT_S (a hook blocked on something that never comes)
    is left to finish on its thread, with a RuntimeWarning: the pass stops at the end of the
    slice in which it returns, and only then may the leaves' ``.grad`` change after the
    cancellation has reached the caller;
  - the cancelled caller learns that the thread has left through ``anyio.from_thread.run_sync``
    with its loop's token; only a cancelled pass pays for it, an uncancelled one costs one
    thread hand-off.
Limitations:
  - Async hooks, async custom Function backwards and async final callbacks run where the
    blocking executor runs them: on the engine's helper asyncio loops (See NOTE [Pool loops]).
    One that awaits asyncgrad (``await ag.grad(...)``), asyncio, or anyio (which finds asyncio
    running there) works; one that awaits trio's own primitives (``trio.sleep``, a trio
    channel or event made in the caller's task) cannot run there: it fails its graph task with
    asyncio's RuntimeError ("Task got bad yield"), the node named as for any node's error.
  - At most as many passes run at once as anyio's default thread limiter allows (40); more
    wait for a thread, cancellably.
  - Inside ``trio.run`` a gradient call is awaitable as inside an asyncio loop (See NOTE [One
    rule for gradient calls] in asyncgrad/autograd/entry.py); ``ag.grad_sync`` runs the pass on
    trio's own thread, blocking it.
  - ``ag.autograd.engine.wait_idle()`` and the per-loop metrics are asyncio's: passes awaited
    from trio count among the blocking callers' (``metrics.BLOCKING``).
anyio and sniffio are imported where a call first needs them (here, ``ag.run`` in offload.py and
the Coalescer's batches under trio in asyncgrad/serving.py), so ``import asyncgrad`` never does.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import warnings
from collections.abc import Callable
from typing import Any, Final

from .._build import adapt_await
from .backward_pass import BackwardPass
from .graph_task import GraphTask, request_cancel

# How long a cancelled caller waits for its graph task's thread to stop (at its next slice or
# node boundary) before it lets the cancellation go on and leaves the thread to finish alone.
STOP_TIMEOUT_S: Final = 10.0


class _Handoff:
    """What the awaiting task and the thread running its graph task share, under ``lock``."""

    __slots__ = ("cancelled", "ended", "gt", "lock", "notify", "running")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.gt: GraphTask | None = None
        self.running = False  # the thread has entered the pass
        self.ended = False  # ... and left it
        self.cancelled = False  # the caller has gone: do not start, or stop
        self.notify: Callable[[], None] | None = None  # set by a caller waiting for `ended`

    def started(self, gt: GraphTask) -> None:
        """Called on the thread once the graph task is built and linked."""
        with self.lock:
            self.gt = gt
            cancelled = self.cancelled
        if cancelled:
            request_cancel([gt])


def _library() -> tuple[str | None, Any]:
    """The async library driving the running task (sniffio's answer, or None), and sniffio."""
    try:
        import sniffio
    except ModuleNotFoundError:
        return None, None
    try:
        return sniffio.current_async_library(), sniffio
    except sniffio.AsyncLibraryNotFoundError:
        return None, sniffio


def require_library() -> tuple[str, Any]:
    """The async library driving the running task, and sniffio; a RuntimeError saying how to
    await a pass when none is (a coroutine driven by hand, say)."""
    lib, sniffio = _library()
    if lib is None:
        raise RuntimeError(
            "no running event loop: await ag.grad(...)/ag.backward(...) inside asyncio.run(), "
            "uvloop, or trio.run() (with anyio installed), or call ag.grad_sync/backward_sync"
        )
    return lib, sniffio


async def execute_foreign(p: BackwardPass) -> list[Any]:
    """``execute`` where no asyncio loop runs: See NOTE [Other event loops]."""
    lib, sniffio = require_library()
    try:
        import anyio.to_thread
    except ModuleNotFoundError as e:
        raise RuntimeError(
            f"awaiting a backward pass under {lib} needs anyio: pip install 'asyncgrad[trio]'"
        ) from e
    from .engine import _execute_sync

    box = _Handoff()
    ctx = contextvars.copy_context()
    # anyio.run sets sniffio's variable for its whole run, and every context copied from the
    # caller's carries it: without this, an async hook on a helper asyncio loop would be taken
    # for trio's by anyio (and any library that asks sniffio).
    ctx.run(sniffio.current_async_library_cvar.set, None)

    def work() -> list[Any]:
        with box.lock:
            if box.cancelled:  # abandoned before this thread started: touch nothing
                raise asyncio.CancelledError("the backward pass was cancelled before it started")
            box.running = True
        try:
            return ctx.run(_execute_sync, p, None, box.started)
        finally:
            with box.lock:
                box.ended = True
                notify = box.notify
            if notify is not None:
                notify()

    try:
        return await adapt_await(anyio.to_thread.run_sync(work, abandon_on_cancel=True))
    except BaseException:
        # Cancelled or interrupted while the thread runs (an error of the pass itself comes
        # after the thread has ended, and then this does nothing).
        await _stop(box)
        raise


async def _stop(box: _Handoff) -> None:
    """Stop the graph task in ``box`` and wait (shielded, bounded) until its thread has left
    it; a no-op if the thread has ended or never started."""
    import anyio
    import anyio.from_thread
    import anyio.lowlevel

    with box.lock:
        box.cancelled = True
        if box.ended:
            return
        gt = box.gt
        wait = box.running
        if wait:
            done = anyio.Event()
            token = anyio.lowlevel.current_token()

            def notify() -> None:
                try:
                    anyio.from_thread.run_sync(done.set, token=token)
                except Exception:
                    pass  # the loop has finished: nobody waits any more

            box.notify = notify
    if gt is not None:
        request_cancel([gt])
    if not wait:
        return
    with anyio.CancelScope(shield=True), anyio.move_on_after(STOP_TIMEOUT_S):
        await adapt_await(done.wait())
    if not done.is_set():
        warnings.warn(
            f"a cancelled backward pass is still running on its thread after {STOP_TIMEOUT_S} s "
            "(a node or hook that does not return); it stops soon after that returns, and may "
            "still accumulate into .grad until then",
            RuntimeWarning,
            stacklevel=2,
        )
