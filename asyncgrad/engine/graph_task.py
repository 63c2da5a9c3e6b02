"""GraphTask: the state of one backward pass (dependencies, buffers, captures, completion)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Final

from ..graph.anomaly_mode import anomaly_note
from .streams import Streams, release_later
from .watch import Watch, watch_for

if TYPE_CHECKING:
    from ..backend import Device
    from ..graph.node import Node
    from .metrics import Stats
    from .scheduler import Lane, ReadyQueue, Scheduler


class ExecInfo:
    """For ``grad()`` and ``backward(inputs=...)``: whether a node must run, and which of its
    input slots to capture as results (``(input_nr, output_index)`` pairs).

    Every node in a graph task's exec_info should execute (it runs, or captures, or both); the
    many that only run share one instance, ``NEEDED``, so the walk allocates nothing per node.
    """

    __slots__ = ("captures", "needed")

    def __init__(self, needed: bool = False, captures: list[tuple[int, int]] | None = None) -> None:
        self.needed = needed
        self.captures: list[tuple[int, int]] | tuple[()] = () if captures is None else captures


NEEDED: Final = ExecInfo(True)


# NOTE [Cancellation links]
# A backward started while a node of graph task P runs (P is `current_graph_task`) is P's child,
# wherever it runs: inline on P's loop, on a pool loop or pool thread past the depth limit, or on
# the blocking caller's thread. Cancelling or failing P stops every descendant, so no level of a
# nested pass goes on computing (and writing into `.grad`) for a caller that has gone away:
#   - the whole subtree is marked `cancel_requested` at once, under one lock, so a level on a
#     thread that is blocked (waiting for the level below it) does not delay the ones below;
#   - a graph task on an event loop is stopped on that loop (call_soon_threadsafe), and its
#     caller's await ends in CancelledError;
#   - a blocking graph task (no loop) checks its flag between slices of its drain loop;
#   - a coroutine that a blocking graph task runs on a helper loop (an async hook or backward
#     it met) is cancelled on that loop;
#   - a backward started under a parent that is already marked never starts: it raises
#     CancelledError, and so does not run a level after the cancellation.
# A child unlinks itself when it ends, so a finished pass holds no reference to its children.
_links = threading.Lock()


class GraphTask:
    __slots__ = (
        "callbacks",
        "cancel_requested",
        "captured",
        "children",
        "create_graph",
        "dependencies",
        "depth",
        "done",
        "error",
        "error_node",
        "exec_info",
        "future",
        "inflight",
        "keep_graph",
        "key_base",
        "lane",
        "large",
        "local_depth",
        "loop",
        "not_ready",
        "outstanding",
        "parent",
        "priority",
        "queue",
        "queues",
        "remote",
        "sched",
        "service",
        "stats",
        "streams",
        "turn",
        "unmoved",
        "watch",
    )

    def __init__(
        self,
        keep_graph: bool,
        create_graph: bool,
        priority: int,
        depth: int,
        local_depth: int,
        sched: Scheduler,
        turn: int | None = None,
    ) -> None:
        self.keep_graph = keep_graph
        self.create_graph = create_graph
        self.priority = priority
        self.depth = depth
        self.local_depth = local_depth
        # See NOTE [One scheduler]: its turn and key (set by its scheduler), the node time it
        # has had, whether it counts as large, its lane once large, and the node time since its
        # turn last moved, as a lane's head.
        self.sched: Scheduler
        self.turn = 0
        self.key_base = 0
        self.service = 0.0
        self.large = False
        self.lane: Lane | None = None
        self.unmoved = 0.0
        sched.enroll(self, turn)
        self.dependencies: dict[Node, int] = {}
        self.not_ready: dict[Node, Any] = {}
        self.exec_info: dict[Node, ExecInfo] | None = None
        self.captured: list[Any] = []
        self.outstanding = 0
        self.future: asyncio.Future[None] | None = None
        self.loop: asyncio.AbstractEventLoop | None = sched.loop
        # The queue the graph task started on, and every device queue it has pushed to.
        self.queue: ReadyQueue | None = None
        self.queues: dict[Device, ReadyQueue] = {}
        self.error: BaseException | None = None
        self.error_node: Node | None = None
        # The containers below are made on first use: most graph tasks never need them, and a
        # burst of requests keeps thousands of graph tasks alive for the cyclic garbage
        # collector to scan (See NOTE [Fewer objects for the collector] in
        # asyncgrad/ops/_record.py).
        self.callbacks: list[Any] | None = None  # queue_callback's final callbacks
        self.done = False
        self.inflight: set[asyncio.Task[Any]] | None = None  # tasks the engine runs for it
        # See NOTE [Cancellation links]. `remote` holds (loop, task) pairs: coroutines run on
        # another loop on behalf of this (blocking) graph task.
        self.parent: GraphTask | None = None
        self.children: set[GraphTask] | None = None
        self.remote: set[tuple[asyncio.AbstractEventLoop, asyncio.Task[Any]]] | None = None
        self.cancel_requested = False
        # CUDA streams: See NOTE [Streams in the graph] (None in a process without CUDA).
        self.streams: Streams | None = None
        # Its loop's metrics (See NOTE [Engine metrics]); counted as running until it ends.
        self.stats: Stats = sched.stats
        self.stats.running += 1
        # Anomaly mode and profilers, decided once here (See NOTE [Watched graph tasks]).
        self.watch: Watch | None = watch_for()

    def __repr__(self) -> str:
        return (
            f"<GraphTask depth={self.depth} priority={self.priority} "
            f"outstanding={self.outstanding} done={self.done}>"
        )

    # ------------------------------------------------------------------ ending
    def fail(self, exc: BaseException, node: Node | None = None) -> None:
        """Record the first error; this graph task alone stops, others sharing its queue go on.

        Whatever a node raises reaches the caller: an Exception as it is (with a note naming the
        node), KeyboardInterrupt and SystemExit as they are, and any other BaseException (a
        CancelledError from a future a hook awaited, say) as the cause of a RuntimeError, so the
        caller can tell it from its own cancellation (tests/engine/test_faults.py).
        """
        if self.done:
            return
        if self.cancel_requested:
            # An ancestor was cancelled (or failed): whatever this level raised on its way down
            # (CancelledError from the level below, mostly) ends it as cancelled.
            self.cancel_from_link()
            return
        if not isinstance(exc, (Exception, KeyboardInterrupt, SystemExit)):
            where = f" in {node.name()}" if node is not None else ""
            err = RuntimeError(
                f"the backward pass was stopped by {type(exc).__name__}{where}: a node, hook or "
                "callback raised it (or an awaitable it awaited was cancelled)"
            )
            err.__cause__ = exc
            exc = err
        elif node is not None and isinstance(exc, Exception):
            note = f"(raised while computing the backward of {node.name()})"
            if note not in getattr(exc, "__notes__", ()):
                exc.add_note(note)
        if node is not None and self.watch is not None and self.watch.anomaly:
            note = anomaly_note(node)  # See NOTE [Anomaly mode is a context variable]
            if note not in getattr(exc, "__notes__", ()):
                exc.add_note(note)
        self.error = exc
        self.error_node = node
        self._stop()
        fut = self.future
        if fut is not None and not fut.done():
            fut.set_exception(exc)
            # The caller sees the error through the future; do not warn if it was cancelled.
            fut.exception()

    def cancel(self) -> None:
        """The awaiting caller was cancelled: drop queued work and buffers at once."""
        if self.done:
            return
        self._stop()

    def cancel_from_link(self) -> None:
        """An ancestor was cancelled or failed (See NOTE [Cancellation links]); runs on this
        graph task's own loop or thread. Its awaiting caller gets CancelledError."""
        if self.done:
            return
        self._stop()
        fut = self.future
        if fut is not None and not fut.done():
            fut.cancel()

    def _stop(self) -> None:
        self.done = True
        if self.lane is not None:
            self.sched.ended(self)
        self.stats.running -= 1
        if self.error is not None:
            self.stats.failed += 1
        else:
            self.stats.cancelled += 1
        dropped = [q.purge(self) for q in self.queues.values()]
        if self.inflight:
            for t in list(self.inflight):
                t.cancel()
        st = self.streams
        if st is not None and st.used:
            # Kernels queued for this graph task may still read its buffers: free them only
            # once those have run.
            release_later(st, (dropped, list(self.not_ready.values())))
        del dropped
        self._free()
        with _links:
            self.cancel_requested = True
            children = list(self.children) if self.children else None
        if children:
            request_cancel(children)

    def _free(self) -> None:
        self.not_ready.clear()
        self.dependencies.clear()
        self.callbacks = None

    def finish(self) -> None:
        if self.done:
            return
        self.done = True
        if self.lane is not None:
            self.sched.ended(self)
        self.stats.running -= 1
        self.stats.completed += 1
        self._free()
        fut = self.future
        if fut is not None and not fut.done():
            fut.set_result(None)

    # ------------------------------------------------------------------ links
    def link(self, parent: GraphTask | None) -> None:
        """Become a child of ``parent`` (See NOTE [Cancellation links]); raise CancelledError,
        registering nothing, if ``parent`` is already being cancelled."""
        if parent is None:
            return
        with _links:
            stopped = parent.cancel_requested
            if not stopped:
                if parent.children is None:
                    parent.children = set()
                parent.children.add(self)
                self.parent = parent
        if stopped:
            self.cancel()  # it never runs
            raise asyncio.CancelledError(
                "the backward pass that started this one was cancelled or failed"
            )

    def unlink(self) -> None:
        if self.parent is None:  # never linked (a top-level pass), or already unlinked
            return
        with _links:
            parent, self.parent = self.parent, None
            if parent is not None and parent.children is not None:
                parent.children.discard(self)

    def add_remote(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> bool:
        """Track a coroutine this graph task runs on another loop; False (nothing tracked) if
        this graph task is already being cancelled."""
        with _links:
            if self.cancel_requested:
                return False
            if self.remote is None:
                self.remote = set()
            self.remote.add((loop, task))
            return True

    def discard_remote(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> None:
        with _links:
            if self.remote is not None:
                self.remote.discard((loop, task))

    def add_callback(self, callback: Any) -> None:
        """Run ``callback`` once all nodes have run (``queue_callback``), from any thread."""
        cbs = self.callbacks
        if cbs is None:
            with _links:
                cbs = self.callbacks
                if cbs is None:
                    cbs = self.callbacks = []
        cbs.append(callback)

    def own_task(self, task: asyncio.Task[Any]) -> None:
        """Track a task the engine runs for this graph task (on its loop): cancelled with it."""
        tasks = self.inflight
        if tasks is None:
            tasks = self.inflight = set()
        tasks.add(task)
        task.add_done_callback(tasks.discard)


def request_cancel(roots: Iterable[GraphTask]) -> None:
    """Cancel ``roots`` and all their descendants, from any thread (See NOTE [Cancellation
    links]). A subtree already marked was handled by whoever marked it, and is skipped."""
    stop: list[GraphTask] = []
    tasks: list[tuple[asyncio.AbstractEventLoop, asyncio.Task[Any]]] = []
    with _links:
        stack = list(roots)
        while stack:
            gt = stack.pop()
            if gt.cancel_requested:
                continue
            gt.cancel_requested = True
            if gt.loop is not None:
                stop.append(gt)
            if gt.remote:
                tasks.extend(gt.remote)
            if gt.children:
                stack.extend(gt.children)
    # Never run a graph task's stop here, even on its own loop: it runs on its loop's next turn,
    # so a long chain is cancelled without recursion, and never from inside another one's stop.
    for gt in stop:
        assert gt.loop is not None
        _call_soon(gt.loop, gt.cancel_from_link)
    for loop, task in tasks:
        _call_soon(loop, task.cancel)


def _call_soon(loop: asyncio.AbstractEventLoop, fn: Any) -> None:
    try:
        loop.call_soon_threadsafe(fn)
    except RuntimeError:
        pass  # the loop is closed: nothing runs there any more
