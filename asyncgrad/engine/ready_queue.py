"""ReadyQueue: one device's heap of nodes whose gradients are all in."""

from __future__ import annotations

import asyncio
import heapq
import itertools
import weakref
from contextvars import ContextVar
from heapq import heappush
from time import perf_counter
from typing import TYPE_CHECKING, Any, Final

from . import metrics

if TYPE_CHECKING:
    from ..backend import Device
    from ..graph.node import Node
    from .graph_task import GraphTask

# NOTE [Ready order]
# Heap entries are (key, tie, node, input_buffer, graph_task), smallest first, with
#   key = (-priority, -reentrant_depth, turn, -sequence_nr)
# packed into one int (sequence numbers in the low 64 bits, below them nothing: see key_base),
# so a higher graph-task priority runs first, then deeper reentrant work (a nested backward must
# finish before the node waiting on it can), then the graph task whose turn comes first (See NOTE
# [Fair order]), and within a graph task the newest node (largest sequence_nr: a node's outputs
# feed older nodes, and AccumulateGrad has the largest so gradients land early). The counter
# `tie` breaks equal keys in push order, never by comparing nodes.
#
# NOTE [Fair order]
# Graph tasks of equal priority and depth take turns by arrival, with small ones first:
#   - a graph task's turn is the time it was built (in microseconds);
#   - once it has run `quantum_s` of node time it counts as large and joins its loop's lane of
#     large graph tasks (one lane per priority and depth), in arrival order;
#   - the lane's head runs on a virtual turn: from the time it became the head (or the lane's
#     virtual turn, if later), moved later by its node time times 1 / `large_share` (re-keyed
#     every REKEY_S of node time). The others in the lane wait behind everything of their
#     priority and depth, oldest first, until the head ends. (Starting from the time it became
#     the head, not from its build time, keeps a graph task that waited long, in preparation
#     say, from holding every newer request back while it catches up.)
#   - when a graph task ends and a large one of the same priority is next, the worker yields to
#     the loop at once, so the caller that was answered can send its next request first.
# So small graph tasks (under a quantum: most requests) run in arrival order, each to the end,
# and pass a large one at the next slice while it is ahead of its share; large ones run one at
# a time in arrival order, so a burst of them finishes as if run in turn rather than all late
# together; and a large one keeps at least `large_share` of its device's time under any stream
# of new requests (its virtual turn runs ahead of the clock, letting newer requests pass, only
# while it has had more than that), so it is never starved. Timings and tests:
# tests/engine/test_fairness.py (driven by the engine's counters, not by sleeps).

# NOTE [A request keeps its turn]
# A request often makes several engine calls one after another: a forward with ``ag.run`` and
# then its backward, or several gradients in a row. If each call took a turn of its own (its
# arrival), every later call of a request would wait behind everything that arrived meanwhile:
# under a burst all requests interleave and all finish late, as if each request were as many
# requests as it has calls. So a request keeps its turn:
#   - when ``ag.run`` or an awaited top-level pass returns, it leaves in its caller's context
#     (``request_turn``) its turn, the node time the request's passes have had so far, and the
#     task that awaited it;
#   - the next top-level call of that same task takes that turn, if it comes within
#     REQUEST_TURN_MAX_AGE_S of the return (measured from the return, not from the turn: under a
#     burst a call may wait long for its first node, or for a compute thread);
#   - once the request's passes have had ``quantum_s`` of node time in all, its next call takes a
#     new turn, behind everything that came meanwhile, as a large graph task lets newer ones pass
#     (See NOTE [Fair order]): a caller that computes gradients in an endless loop holds nobody
#     back for more than a quantum of node time at a time.
# Another task (one started with ``create_task`` or ``gather``, each HTTP request of a server)
# never takes it: it is a request of its own. A pass whose turn puts it ahead of everything
# queued runs right in its caller (See NOTE [Passes in their callers] in worker.py), so a
# request's gradients run back to back, with no trip through the worker in between.
# While a large graph task of the same priority runs, a request's calls take turns of their own,
# as new arrivals: the lane's virtual turn, which keeps the large one its share, is set against
# the clock (See NOTE [Fair order]), so a request that kept an old turn would pass it every time,
# then take a new one far behind it at its next quantum (on the engine's fake clock, eight
# clients of one-gradient requests beside an 8,000-node backward then waited up to 23 ms, 1.7 ms
# otherwise: tests/engine/test_fairness.py).
REQUEST_TURN_MAX_AGE_S: Final = 0.5


class RequestTurn:
    """A request's turn, the node time its passes have had, when its last engine call returned
    (in now_us()), and the task that made it; the task updates it in place after each call (a
    ContextVar.set per call would cost more), and ends it by dropping the task."""

    __slots__ = ("returned", "service", "task", "turn")

    def __init__(self, turn: int, returned: int, service: float, task: Any) -> None:
        self.turn = turn
        self.returned = returned
        self.service = service
        self.task = task


request_turn: ContextVar[RequestTurn | None] = ContextVar("asyncgrad_request_turn", default=None)


def request_of_caller() -> RequestTurn | None:
    """The request of the running task, whose turn its next top-level engine call takes, if
    its last call returned within REQUEST_TURN_MAX_AGE_S (See NOTE [A request keeps its
    turn])."""
    r = request_turn.get()
    if (
        r is None
        or r.task is not asyncio.current_task()
        or now_us() - r.returned > REQUEST_TURN_MAX_AGE_S * 1e6
    ):
        return None
    return r


def keep_turn(r: RequestTurn | None, turn: int, service: float, quantum: float) -> None:
    """A top-level engine call of the running task (of request ``r``, None: a new one) returned
    with ``turn``, its request's passes having had ``service`` seconds of node time in all: the
    next call keeps that turn, unless that is ``quantum`` or more (See NOTE [A request keeps
    its turn])."""
    if service >= quantum:
        if r is not None:
            r.task = None
    elif r is None:
        request_turn.set(RequestTurn(turn, now_us(), service, asyncio.current_task()))
    else:
        r.turn = turn
        r.returned = now_us()
        r.service = service


SEQ_BITS: Final = 64
TURN_BITS: Final = 48
DEPTH_BITS: Final = 16
DEPTH_MAX: Final = (1 << DEPTH_BITS) - 1
TURN_MAX: Final = (1 << TURN_BITS) - 1
_T0: Final = perf_counter()


def now_us() -> int:
    """The engine's clock for turns: microseconds since the engine was imported."""
    return int((perf_counter() - _T0) * 1e6)


def key_base(priority: int, depth: int, turn: int) -> int:
    """The key of a graph task's nodes, less their sequence number (See NOTE [Ready order])."""
    d = DEPTH_MAX - min(depth, DEPTH_MAX)
    t = min(turn, TURN_MAX)
    return (((((-priority) << DEPTH_BITS) + d) << TURN_BITS) + t) << SEQ_BITS


_tie = itertools.count()
next_tie = _tie.__next__

Entry = tuple[int, int, "Node", list[Any], "GraphTask"]


def shuffle_ties(seed: int | None) -> None:
    """Test-only: break ties between equal keys in a seeded random order instead of push order.

    Gradients must not depend on the order of ready nodes with equal keys; tests run the same
    graphs under several seeds (tests/engine/test_oracle.py). ``None`` restores push order.
    """
    global next_tie
    if seed is None:
        next_tie = itertools.count().__next__
        return
    import random

    rng = random.Random(seed)
    next_tie = lambda: rng.getrandbits(62)  # noqa: E731


class ReadyQueue:
    """One device's ready nodes on one event loop (or on a blocking caller's thread).

    With a loop, a worker task drains it: started by the first push and ending when the heap is
    empty (see devices.start_worker). Without one (``loop is None``) the caller drains it.
    """

    __slots__ = (
        "device",
        "heap",
        "label",
        "launched",
        "loop",
        "owed",
        "since",
        "stats",
        "tasks",
        "worker",
    )

    def __init__(self, device: Device, loop: asyncio.AbstractEventLoop | None) -> None:
        self.device = device
        self.loop = loop
        self.stats = metrics.of(loop)  # See NOTE [Engine metrics]
        self.label = str(device)
        self.heap: list[Entry] = []
        self.worker: asyncio.Task[None] | None = None
        # Tasks finishing nodes that await (async hooks or backward) and final callbacks.
        self.tasks: set[asyncio.Task[Any]] = set()
        # The CUDA streams launched on since the worker last looked (See NOTE [Running ahead of
        # the GPU]).
        self.launched: set[Any] = set()
        # When the engine first ran nodes of this queue in the loop's current iteration (0.0:
        # not yet); See NOTE [Passes in their callers] in worker.py.
        self.since = 0.0
        # Node time owed to lower priorities (See NOTE [Lower priorities' share] in worker.py).
        self.owed = 0.0

    def push(self, gt: GraphTask, node: Node, buf: list[Any]) -> None:
        heappush(self.heap, (gt.key_base - node._sequence_nr, next_tie(), node, buf, gt))
        gt.outstanding += 1

    def purge(self, gt: GraphTask) -> list[Entry]:
        """Drop every entry of ``gt`` (failed or cancelled); returns them (whose buffers are
        freed when the caller drops them)."""
        heap = self.heap
        keep = [e for e in heap if e[4] is not gt]
        if len(keep) == len(heap):
            return []
        dropped = [e for e in heap if e[4] is gt]
        heap[:] = keep
        heapq.heapify(heap)
        return dropped

    def rekey(self, gt: GraphTask, delta: int) -> None:
        """Add ``delta`` to the keys of ``gt``'s entries (See NOTE [Fair order])."""
        heap = self.heap
        changed = 0
        for i, e in enumerate(heap):
            if e[4] is gt:
                heap[i] = (e[0] + delta, e[1], e[2], e[3], gt)
                changed += 1
        if changed and changed < len(heap):  # moving every entry alike keeps the heap's order
            heapq.heapify(heap)

    def __len__(self) -> int:
        return len(self.heap)


# See NOTE [Fair order]: how much node time the lane's head runs between moves of its turn, at
# least, and per entry in its queues: a move re-keys every entry of the queues (a scan and a
# heapify, about 0.1-0.2 us an entry), so a wide graph with thousands of ready nodes moves less
# often rather than spend its time re-keying (measured: 3,000 ready nodes, re-keyed every
# 0.2 ms, made its backward 3-5x slower).
REKEY_S: Final = 0.0002
REKEY_PER_ENTRY_S: Final = 1e-5
# The turns of the large graph tasks waiting behind their lane's head: after every other turn,
# and among themselves in arrival order (when the head waits for something off the queue, such
# as a node on a compute thread, they run, oldest first).
PARKED: Final = 1 << 47


class Lane:
    """The large graph tasks of one loop, priority and depth, oldest first; ``tasks[0]`` runs on
    the virtual turn ``vturn``, the rest wait (See NOTE [Fair order])."""

    __slots__ = ("tasks", "vturn")

    def __init__(self) -> None:
        self.tasks: list[GraphTask] = []
        self.vturn = 0


_lanes: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[int, int], Lane]] = (
    weakref.WeakKeyDictionary()
)


def retime(gt: GraphTask, turn: int) -> int:
    """Give ``gt`` the turn ``turn``: new keys for its queued nodes; returns the change."""
    new = key_base(gt.priority, gt.depth, turn)
    delta = new - gt.key_base
    if delta:
        gt.key_base = new
        for q in gt.queues.values():
            q.rekey(gt, delta)
    return delta


def join_lane(gt: GraphTask, stride: float) -> int:
    """``gt`` has had its quantum: it joins its lane in arrival order, as the head (its turn
    moved by ``stride`` times its node time so far) or behind it. Returns the change of its
    keys."""
    assert gt.loop is not None
    per_loop = _lanes.get(gt.loop)
    if per_loop is None:
        per_loop = _lanes[gt.loop] = {}
    lane = per_loop.get((gt.priority, gt.depth))
    if lane is None:
        lane = per_loop[(gt.priority, gt.depth)] = Lane()
    gt.large = True
    gt.lane = lane
    tasks = lane.tasks
    i = len(tasks)
    while i > 0 and tasks[i - 1].turn > gt.turn:  # arrival order
        i -= 1
    tasks.insert(i, gt)
    if i > 0:
        return retime(gt, PARKED + gt.turn)
    # The head: a newer head that started while gt was still being prepared waits behind it.
    if len(tasks) > 1:
        retime(tasks[1], PARKED + tasks[1].turn)
    lane.vturn = max(lane.vturn, now_us()) + int(gt.service * stride * 1e6)
    gt.unmoved = 0.0
    return retime(gt, lane.vturn)


def move_head(gt: GraphTask, stride: float) -> int:
    """The lane's head ``gt`` has run ``gt.unmoved`` seconds since its turn last moved: move it
    later by ``stride`` times that, once that is worth re-keying its queues. Returns the change
    of its keys."""
    lane = gt.lane
    assert lane is not None
    queued = 0
    for q in gt.queues.values():
        queued += len(q.heap)
    if gt.unmoved < queued * REKEY_PER_ENTRY_S:
        return 0
    lane.vturn += int(gt.unmoved * stride * 1e6)
    gt.unmoved = 0.0
    return retime(gt, lane.vturn)


def lane_busy(loop: asyncio.AbstractEventLoop, priority: int, depth: int) -> bool:
    """Whether a large graph task of ``priority`` and ``depth`` runs on ``loop`` (See NOTE [A
    request keeps its turn])."""
    per_loop = _lanes.get(loop)
    if not per_loop:
        return False
    lane = per_loop.get((priority, depth))
    return lane is not None and bool(lane.tasks)


def leave_lane(gt: GraphTask) -> None:
    """``gt`` ended: out of its lane; the next in the lane becomes the head, from the lane's
    virtual turn."""
    lane = gt.lane
    assert lane is not None
    gt.lane = None
    tasks = lane.tasks
    head = tasks[0] is gt
    tasks.remove(gt)
    if head and tasks:
        nxt = tasks[0]
        nxt.unmoved = 0.0
        lane.vturn = max(lane.vturn, now_us())
        retime(nxt, lane.vturn)
