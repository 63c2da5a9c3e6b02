"""Routing: a finished node's gradients go into the input buffers of the nodes its edges point
at; the nodes that become ready go to the scheduler.

NOTE [Routing]
A node's gradients go along its edges into the input buffers of the nodes they point at; a node
whose dependency count reaches its last gradient is ready, and goes to the queue of *its* device
(the device of the gradients it receives, ``Node._device``). On a loop that is the device's
worker queue; for a blocking caller it is the caller's own queue, which it drains itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .input_buffer import InputBuffer, add
from .scheduler import push, wake_idle
from .streams import arrive

if TYPE_CHECKING:
    from ..graph.node import Node
    from .graph_task import GraphTask
    from .scheduler import Direct, ReadyQueue


def route(gt: GraphTask, node: Node, out: Any, queue: ReadyQueue) -> Direct | None:
    """Hand each gradient in ``out`` to the node its edge points at; queue the nodes that are
    ready.

    Returns the ready node to run next on ``queue`` without a round trip through its heap, if
    there is one whose key sorts before everything in the heap (See NOTE [Direct successor]).
    """
    deps = gt.dependencies
    not_ready = gt.not_ready
    exec_info = gt.exec_info
    create = gt.create_graph
    device = queue.device
    heap = queue.heap
    key_base = gt.key_base
    st = gt.streams
    on = None
    direct: Direct | None = None
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
            nd = nxt._device
            if out[i] is None or (
                nd is node._device
                and (nd is None or nd.type != "cuda" or nxt._stream is node._stream)
            ):
                on = None  # the stream that is current will do
            else:
                on = arrive(node, nxt)
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
        if direct is None:
            # The chain's case, inline (a call per node would cost a few percent of a chain's
            # backward): the first ready node runs next if its key sorts first (the key of a
            # node: See ReadyQueue.offer, which takes every other case).
            if not heap or key_base - nxt._sequence_nr < heap[0][0]:
                gt.outstanding += 1
                direct = (nxt, nbuf)
                continue
        direct = queue.offer(gt, nxt, nbuf, direct)
    return direct


def route_from_task(gt: GraphTask, node: Node, out: Any) -> None:
    """``route`` for a node that finished outside its device's worker (in its own task, after
    an await): everything goes through the heap, and the worker is started if it is idle."""
    q = gt.sched.queue_of(gt, node._device)
    direct = route(gt, node, out, q)
    if direct is not None:
        q.put_back(direct, gt)
    wake_idle(gt)
