"""GraphTask: the state of one backward pass (dependencies, buffers, captures, completion)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Final

from .ready_queue import key_base

if TYPE_CHECKING:
    from ..backend import Device
    from ..graph.node import Node
    from .ready_queue import ReadyQueue


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


class GraphTask:
    __slots__ = (
        "callbacks",
        "captured",
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
        "local_depth",
        "loop",
        "not_ready",
        "outstanding",
        "priority",
        "queue",
        "queues",
    )

    def __init__(
        self, keep_graph: bool, create_graph: bool, priority: int, depth: int, local_depth: int
    ) -> None:
        self.keep_graph = keep_graph
        self.create_graph = create_graph
        self.priority = priority
        self.depth = depth
        self.local_depth = local_depth
        self.key_base = key_base(priority, depth)
        self.dependencies: dict[Node, int] = {}
        self.not_ready: dict[Node, Any] = {}
        self.exec_info: dict[Node, ExecInfo] | None = None
        self.captured: list[Any] = []
        self.outstanding = 0
        self.future: asyncio.Future[None] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        # The queue the graph task started on, and every device queue it has pushed to.
        self.queue: ReadyQueue | None = None
        self.queues: dict[Device, ReadyQueue] = {}
        self.error: BaseException | None = None
        self.error_node: Node | None = None
        self.callbacks: list[Any] = []
        self.done = False
        self.inflight: set[asyncio.Task[Any]] = set()

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

    def _stop(self) -> None:
        self.done = True
        for q in self.queues.values():
            q.purge(self)
        for t in list(self.inflight):
            t.cancel()
        self._free()

    def _free(self) -> None:
        self.not_ready.clear()
        self.dependencies.clear()
        self.callbacks.clear()

    def finish(self) -> None:
        if self.done:
            return
        self.done = True
        self._free()
        fut = self.future
        if fut is not None and not fut.done():
            fut.set_result(None)
