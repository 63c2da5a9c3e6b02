"""Per event loop, one ReadyQueue and one worker per device; ``route``, the one routing point.

NOTE [Routing]
A node's gradients go along its edges into the input buffers of the nodes they point at; a node
whose dependency count reaches its last gradient is ready, and goes to the queue of *its* device
(the device of the gradients it receives, ``Node._device``). On a loop that is the device's
worker queue; for a blocking caller it is the caller's own queue, which it drains itself.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable
from heapq import heappush
from typing import TYPE_CHECKING, Any

from . import ready_queue
from .input_buffer import InputBuffer, add
from .ready_queue import ReadyQueue
from .streams import arrive

if TYPE_CHECKING:
    from ..backend import Device
    from ..graph.node import Node
    from .graph_task import GraphTask

# One ReadyQueue per device per event loop. See NOTE [Ready order].
_queues: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Device, ReadyQueue]] = (
    weakref.WeakKeyDictionary()
)


def queue_for(loop: asyncio.AbstractEventLoop, device: Device) -> ReadyQueue:
    """The ready queue of ``device`` on ``loop`` (made on first use)."""
    per_loop = _queues.get(loop)
    if per_loop is None:
        per_loop = _queues[loop] = {}
    q = per_loop.get(device)
    if q is None:
        q = per_loop[device] = ReadyQueue(device, loop)
    return q


def queues_of(loop: asyncio.AbstractEventLoop) -> list[ReadyQueue]:
    return list(_queues.get(loop, {}).values())


def graph_queue(gt: GraphTask, device: Device | None) -> ReadyQueue:
    """The queue that runs ``gt``'s nodes of ``device``: the loop's device queue, or for a
    blocking caller (no loop) its one queue."""
    q = gt.queues.get(device) if device is not None else gt.queue
    if q is None:
        assert gt.queue is not None
        if gt.loop is None or device is None:
            q = gt.queue
        else:
            q = queue_for(gt.loop, device)
        if device is not None:
            gt.queues[device] = q
    return q


# NOTE [Waking workers]
# devices decides where a ready node goes; worker.py owns how a queue is drained. A push that
# finds a loop's queue without a worker wakes it through `_wake`, which worker.py installs when
# it is imported (asyncgrad.engine imports it before any graph task can run), so this module
# needs no import of worker and the imports inside the engine point one way.
_wake: Callable[[ReadyQueue], None]


def install_waker(wake: Callable[[ReadyQueue], None]) -> None:
    global _wake
    _wake = wake


def push(gt: GraphTask, node: Node, buf: list[Any]) -> None:
    """Queue a ready node on its device's queue, starting that queue's worker if needed."""
    q = graph_queue(gt, node._device)
    q.push(gt, node, buf)
    if q.worker is None and q.loop is not None:
        _wake(q)


def wake_idle(q: ReadyQueue) -> None:
    """Start the worker of a loop's queue that has work but none (See NOTE [Waking workers])."""
    if q.heap and q.worker is None and q.loop is not None:
        _wake(q)


def route(
    gt: GraphTask, node: Node, out: Any, queue: ReadyQueue
) -> tuple[int, Node, list[Any]] | None:
    """Hand each gradient in ``out`` to the node its edge points at; queue the nodes that are
    ready.

    Returns the ready node to run next on ``queue`` without a round trip through its heap, if
    there is one whose key sorts before everything in the heap (See NOTE [Direct successor]).
    """
    deps = gt.dependencies
    not_ready = gt.not_ready
    exec_info = gt.exec_info
    create = gt.create_graph
    key_base = gt.key_base
    heap = queue.heap
    device = queue.device
    st = gt.streams
    on = None
    direct: tuple[int, Node, list[Any]] | None = None
    i = -1
    for e in node._next_edges:
        i += 1
        if e is None:
            continue
        nxt = e[0]
        if exec_info is not None and nxt not in exec_info:
            continue
        if st is not None:
            # See NOTE [Streams in the graph]; no gradient needs no ordering.
            on = None if out[i] is None else arrive(node, nxt)
        d = deps[nxt]
        if d != 1:
            deps[nxt] = d - 1
            nbuf = not_ready.get(nxt)
            if nbuf is None:
                nbuf = not_ready[nxt] = InputBuffer(len(nxt._input_meta))
            add(nbuf, e[1], out[i], create, on)
            continue
        # Ready (its count stays at 1: no more gradients can arrive).
        nbuf = not_ready.pop(nxt, None) if not_ready else None
        if nbuf is None:
            if len(nxt._input_meta) == 1 and on is None:
                nbuf = [out[i]]
            else:
                nbuf = InputBuffer(len(nxt._input_meta))
                add(nbuf, e[1], out[i], create, on)
        else:
            add(nbuf, e[1], out[i], create, on)
        ndev = nxt._device
        if ndev is not device and ndev is not None and gt.loop is not None:
            push(gt, nxt, nbuf)  # another device's worker runs it
            continue
        gt.outstanding += 1
        key = key_base - nxt._sequence_nr
        if direct is None:
            if not heap or key < heap[0][0]:
                direct = (key, nxt, nbuf)
                continue
        elif key < direct[0]:
            heappush(heap, (direct[0], ready_queue.next_tie(), direct[1], direct[2], gt))
            direct = (key, nxt, nbuf)
            continue
        heappush(heap, (key, ready_queue.next_tie(), nxt, nbuf, gt))
    return direct


def route_from_task(gt: GraphTask, node: Node, out: Any) -> None:
    """``route`` for a node that finished outside its device's worker (in its own task, after
    an await): everything goes through the heap, and the worker is started if it is idle."""
    q = graph_queue(gt, node._device)
    direct = route(gt, node, out, q)
    if direct is not None:
        heappush(q.heap, (direct[0], ready_queue.next_tie(), direct[1], direct[2], gt))
    for dq in gt.queues.values():
        wake_idle(dq)
