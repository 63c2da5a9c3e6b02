"""The scheduler: who runs next. One per event loop, owning its device queues, their heap entries,
admission, the flows of its requests, its stats and its clock.

NOTE [One scheduler]
Each event loop has one Scheduler (blocking callers share one more, without a loop); it alone
builds heap entries, sets and moves their keys, and decides how long the engine holds the loop.
A device worker (worker.py) asks it for the next node (``ReadyQueue.pop``), hands it the nodes
made ready (``push``, ``offer``) and tells it the node time each graph task had (``charge``).
The policy, by precedence:
  1. Priority, then reentrant depth. A node of a higher-priority graph task runs first; at equal
     priority a deeper reentrant level runs first (a nested backward must end before the node
     awaiting it can: PyTorch's order). Lower priorities keep LOWER_SHARE of a device's node time
     under a steady stream of higher-priority work: each slice that ran only its first priority
     leaves LOWER_SHARE / (1 - LOWER_SHARE) of its time owed, and once a whole slice is owed the
     next slice runs only lower-priority nodes.
  2. Turns. Within a priority and depth, graph tasks run in turn order, earliest first. A turn
     is when a flow began; a flow is one request's consecutive engine calls: the calls of one
     asyncio task (``ag.run``, then awaited passes), each made within FLOW_MAX_GAP_S of the last
     one's return, until they have had QUANTUM_S of node time; then its next call starts a new
     flow, behind everything that came meanwhile. Another task (each HTTP request, each
     ``create_task``) is a flow of its own. So a request's forward and gradients run back to
     back, requests in the order they came, and nobody holds others back for over a quantum.
  3. Large graph tasks. One that has had QUANTUM_S of node time is large and joins its lane
     (per priority and depth). The lane runs its oldest member on a virtual turn, which starts
     at the clock and moves 1 / LARGE_SHARE seconds per second of its node time; the others
     wait behind every turn (PARKED). So newer requests pass a large pass while it is ahead of
     LARGE_SHARE of its device, never more, and a burst of large passes ends one after another,
     as if run in turn. While a lane is busy, calls start new flows (a kept turn, set against
     the clock before, would pass the lane every time).
  4. Within a graph task, the newest node first (the largest sequence number: a node's outputs
     feed older nodes, and AccumulateGrad is newest, so gradients land early). Ties keep push
     order. A successor whose key sorts first runs next without a trip through the heap (See
     NOTE [Direct successor] in worker.py).
  5. Slices. The engine holds the loop for at most ``slice_s`` per iteration of the loop: a
     worker's slice is what the loop's other work since it last yielded left of ``slice_s``
     (at least MIN_SLICE_SHARE of it), less, per graph task it completes, the time that task's
     caller is expected to take on the loop before the worker's next turn (a running mean). An
     awaited pass whose first node would run next anyway runs in its caller, at the await, with
     no task hop, within what is left of the iteration's slice, and ahead of queued work of
     its priority only within the first AHEAD_SHARE of it (the worker, which serves the queue,
     keeps the rest); its time ahead counts towards what lower priorities are owed. When a
     graph task completes and a large one of its priority is next, the worker yields, so the
     answered caller can send its next request before the large one goes on.
  6. Admission. At most ``configure(max_running=N)`` top-level graph tasks run at once per loop
     (default: no cap), so a burst cannot fill memory with the input buffers of thousands of
     passes in flight; the rest wait, before they are even prepared, by priority then arrival
     (``stats()`` counts them as ``waiting``; one cancelled while waiting never starts, and
     counts as cancelled). A nested pass is never held back: its parent holds a place and
     waits for it, so holding it back could deadlock. Compute threads take their jobs by the
     same keys (See NOTE [Turns on compute threads] in pools.py): a large node in its graph
     task's turn and priority, ``ag.run`` in its flow's (the priority of the flow's last pass;
     0 for a new one).
Every time the policy reads comes from ``Scheduler.clock`` (``time.perf_counter`` unless a test
gives another), so tests drive time directly. Tests: tests/engine/test_fairness.py,
test_in_caller.py, test_admission.py; the measurements behind each rule:
benchmarks/engine_design.md.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import weakref
from collections.abc import Callable
from contextvars import ContextVar
from heapq import heappop, heappush
from time import perf_counter
from typing import TYPE_CHECKING, Any, Final

from .._build import adapt_await
from .metrics import BLOCKING as BLOCKING_STATS
from .metrics import Stats
from .settings import settings

if TYPE_CHECKING:
    from ..backend import Device
    from ..graph.node import Node
    from .graph_task import GraphTask

# The policy's parameters (See NOTE [One scheduler]); a Scheduler copies them, so a test can
# set its own on one loop's scheduler.
QUANTUM_S: Final = 0.002
LARGE_SHARE: Final = 0.25
LOWER_SHARE: Final = 0.1
MIN_SLICE_SHARE: Final = 0.25
AHEAD_SHARE: Final = 0.25
FLOW_MAX_GAP_S: Final = 0.5
# How much node time a lane's head runs between moves of its turn, at least, and per entry in
# its queues: a move re-keys every entry of the head's queues (a scan and a heapify), so a wide
# graph with thousands of ready nodes moves less often rather than spend its time re-keying.
REKEY_S: Final = 0.0002
REKEY_PER_ENTRY_S: Final = 1e-5

# ----------------------------------------------------------------------------- keys
# A heap entry is (key, tie, node, input_buffer, graph_task), smallest first, with
#   key = (-priority, -depth, turn, -sequence_nr)
# packed into one int, sequence numbers in the low 64 bits. The counter `tie` breaks equal keys
# in push order, never by comparing nodes.
SEQ_BITS: Final = 64
TURN_BITS: Final = 48
DEPTH_BITS: Final = 16
DEPTH_MAX: Final = (1 << DEPTH_BITS) - 1
TURN_MAX: Final = (1 << TURN_BITS) - 1
# The turns of the large graph tasks waiting behind their lane's head: after every other turn,
# and among themselves in arrival order.
PARKED: Final = 1 << 47
_T0: Final = perf_counter()


def key_base(priority: int, depth: int, turn: int) -> int:
    """The key of a graph task's nodes, less their sequence number."""
    d = DEPTH_MAX - min(depth, DEPTH_MAX)
    t = turn if turn < TURN_MAX else TURN_MAX
    return (((((-priority) << DEPTH_BITS) + d) << TURN_BITS) + t) << SEQ_BITS


def turn_of(key: int) -> int:
    """The turn a key holds."""
    return (key >> SEQ_BITS) & TURN_MAX


_tie = itertools.count()
next_tie = _tie.__next__

Entry = tuple[int, int, "Node", list[Any], "GraphTask"]
# A ready node that runs next without a trip through the heap: (node, input buffer). Its key
# is not kept: it is ``gt.key_base - node._sequence_nr`` for the graph task gt the worker runs,
# computed only where it is compared (a key is a large integer, and a chain's direct successors
# are never compared), and it moves with gt's (See NOTE [Direct successor] in worker.py).
Direct = tuple["Node", list[Any]]


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


# ----------------------------------------------------------------------------- flows
class Flow:
    """A request's flow (See NOTE [One scheduler], 2): its turn, the node time its calls have
    had, when its last call returned (in the scheduler's microseconds), the task making them,
    and the priority of its last backward pass (its ``ag.run`` calls compete at that priority).
    Updated in place after each call (a ContextVar.set per call would cost more); ended by
    dropping the task."""

    __slots__ = ("priority", "returned", "service", "task", "turn")

    def __init__(self, turn: int, returned: int, service: float, task: Any, priority: int) -> None:
        self.turn = turn
        self.returned = returned
        self.service = service
        self.task = task
        self.priority = priority


flow_var: ContextVar[Flow | None] = ContextVar("asyncgrad_flow", default=None)


# ----------------------------------------------------------------------------- device queues
class ReadyQueue:
    """One device's ready nodes on one event loop (or on a blocking caller's thread).

    With a loop, a worker task drains it: started by the first push and ending when the heap is
    empty. Without one (``loop is None``) the caller drains it.
    """

    __slots__ = (
        "answer_s",
        "device",
        "heap",
        "label",
        "launched",
        "loop",
        "owed",
        "sched",
        "since",
        "stats",
        "tasks",
        "worker",
    )

    def __init__(self, sched: Scheduler, device: Device) -> None:
        self.sched = sched
        self.device = device
        self.loop = sched.loop
        self.stats = sched.stats  # See NOTE [Engine metrics]
        self.label = str(device)
        self.heap: list[Entry] = []
        self.worker: asyncio.Task[None] | None = None
        # Tasks finishing nodes that await (async hooks or backward) and final callbacks.
        self.tasks: set[asyncio.Task[Any]] = set()
        # The CUDA streams launched on since the worker last looked (See NOTE [Running ahead of
        # the GPU] in worker.py).
        self.launched: set[Any] = set()
        # When the engine first ran nodes of this queue in the loop's current iteration (0.0:
        # not yet), node time owed to lower priorities, and the expected time on the loop of a
        # caller the worker answers (See NOTE [One scheduler], 1 and 5).
        self.since = 0.0
        self.owed = 0.0
        self.answer_s = 0.0

    def push(self, gt: GraphTask, node: Node, buf: list[Any]) -> None:
        """Queue a ready node of ``gt``."""
        heappush(self.heap, (gt.key_base - node._sequence_nr, next_tie(), node, buf, gt))
        gt.outstanding += 1

    def offer(
        self, gt: GraphTask, node: Node, buf: list[Any], direct: Direct | None
    ) -> Direct | None:
        """A node of ``gt``, the graph task this queue is running, became ready: returns the
        node to run next without a trip through the heap (``direct`` or this one, whichever
        sorts first, if it sorts before everything queued), queueing the other. A node's key is
        ``gt.key_base - node._sequence_nr``; routing.route inlines the first case (no
        ``direct`` yet), a chain's, to save a call per node."""
        gt.outstanding += 1
        base = gt.key_base
        key = base - node._sequence_nr
        heap = self.heap
        if direct is None:
            if not heap or key < heap[0][0]:
                return (node, buf)
        else:
            dnode, dbuf = direct
            dkey = base - dnode._sequence_nr
            if key < dkey:
                heappush(heap, (dkey, next_tie(), dnode, dbuf, gt))
                return (node, buf)
        heappush(heap, (key, next_tie(), node, buf, gt))
        return direct

    def put_back(self, direct: Direct, gt: GraphTask) -> None:
        """Queue a direct successor of ``gt`` that will not run next after all."""
        node, buf = direct
        heappush(self.heap, (gt.key_base - node._sequence_nr, next_tie(), node, buf, gt))

    def pop(self, only: GraphTask | None) -> Entry | None:
        """The next entry; None when the heap is empty, or when ``only`` is given and the next
        entry is not that graph task's (a caller runs its own pass alone)."""
        heap = self.heap
        if not heap or (only is not None and heap[0][4] is not only):
            return None
        return heappop(heap)

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

    def fail_all(self, exc: BaseException) -> None:
        """Fail every graph task with nodes queued here (a broken device, a stopped worker)."""
        heap = self.heap
        for gt in {e[4] for e in heap}:
            gt.fail(exc)
        heap.clear()

    def _rekey(self, gt: GraphTask, delta: int) -> None:
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


class Lane:
    """The large graph tasks of one loop, priority and depth, oldest first; ``tasks[0]`` runs on
    the virtual turn ``vturn``, the rest wait (See NOTE [One scheduler], 3)."""

    __slots__ = ("tasks", "vturn")

    def __init__(self) -> None:
        self.tasks: list[GraphTask] = []
        self.vturn = 0


# ----------------------------------------------------------------------------- admission
_arrivals: Final = itertools.count()


# ----------------------------------------------------------------------------- the scheduler
class Scheduler:
    """Who runs next on one event loop (``loop is None``: blocking callers). See NOTE [One
    scheduler]."""

    __slots__ = (
        "__weakref__",
        "clock",
        "lanes",
        "large_share",
        "loop",
        "lower_share",
        "observer",
        "origin",
        "quantum_s",
        "queues",
        "running",
        "stats",
        "waiters",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop | None, stats: Stats | None = None) -> None:
        self.loop = loop
        self.clock: Callable[[], float] = perf_counter
        self.origin = _T0  # turns are microseconds of the clock since origin
        self.stats = Stats() if stats is None else stats
        self.queues: dict[Device, ReadyQueue] = {}
        self.lanes: dict[tuple[int, int], Lane] = {}
        self.running = 0  # admitted top-level graph tasks (See NOTE [One scheduler], 6)
        self.waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self.quantum_s = QUANTUM_S
        self.large_share = LARGE_SHARE
        self.lower_share = LOWER_SHARE
        # Told of every stretch of nodes it let run, for tests and tools: ("slice", seconds,
        # callers answered) for a worker's slice, ("here", seconds, whether it passed queued
        # work) for a pass run in its caller.
        self.observer: Callable[[str, float, int], None] | None = None

    def use_clock(self, clock: Callable[[], float]) -> None:
        """Read time from ``clock`` (seconds, never going back) from now on; turns go on from
        where they are."""
        self.origin = clock() - (self.clock() - self.origin)
        self.clock = clock

    def now_us(self) -> int:
        """The clock for turns: microseconds since the origin."""
        return int((self.clock() - self.origin) * 1e6)

    # ------------------------------------------------------------------ queues
    def queue(self, device: Device) -> ReadyQueue:
        """This loop's queue of ``device`` (made on first use); a blocking caller's own."""
        if self.loop is None:
            return ReadyQueue(self, device)
        q = self.queues.get(device)
        if q is None:
            q = self.queues[device] = ReadyQueue(self, device)
        return q

    def queue_of(self, gt: GraphTask, device: Device | None) -> ReadyQueue:
        """The queue that runs ``gt``'s nodes of ``device``: the loop's device queue, or for a
        blocking caller (no loop) its one queue."""
        q = gt.queues.get(device) if device is not None else gt.queue
        if q is None:
            assert gt.queue is not None
            q = gt.queue if gt.loop is None or device is None else self.queue(device)
            if device is not None:
                gt.queues[device] = q
        return q

    def start_queue(self, gt: GraphTask, device: Device) -> ReadyQueue:
        """The queue ``gt`` starts on."""
        q = self.queue(device)
        gt.queue = q
        gt.queues[device] = q
        return q

    # ------------------------------------------------------------------ graph tasks
    def enroll(self, gt: GraphTask, turn: int | None) -> None:
        """Give a new graph task its turn (its flow's, or now) and its key."""
        gt.sched = self
        gt.turn = self.now_us() if turn is None else turn
        gt.key_base = key_base(gt.priority, gt.depth, gt.turn)

    def charge(self, gt: GraphTask, seconds: float) -> None:
        """Add ``seconds`` of node time to ``gt``: past its quantum it joins its lane, and as the
        lane's head its turn moves with its node time (See NOTE [One scheduler], 3). A direct
        successor's key moves with gt's (See Direct)."""
        gt.service += seconds
        if gt.done or gt.loop is None:  # ended: it leaves (or never joins) its lane
            return
        if gt.large:
            lane = gt.lane
            if lane is None or lane.tasks[0] is not gt:
                return
            gt.unmoved += seconds
            if gt.unmoved < REKEY_S:
                return
            self._move_head(gt)
        elif gt.service >= self.quantum_s:
            self._join_lane(gt)

    def _stride(self) -> float:
        """How much a large graph task's turn moves per second of its node time: 1 / share, and
        0 (it keeps its turn) at a share of 1."""
        share = self.large_share
        return 0.0 if share >= 1.0 else 1.0 / share

    def _retime(self, gt: GraphTask, turn: int) -> None:
        """Give ``gt`` the turn ``turn``: new keys for its queued nodes (a direct successor's
        key moves with them, See Direct)."""
        new = key_base(gt.priority, gt.depth, turn)
        delta = new - gt.key_base
        if delta:
            gt.key_base = new
            for q in gt.queues.values():
                q._rekey(gt, delta)

    def _join_lane(self, gt: GraphTask) -> None:
        lane = self.lanes.get((gt.priority, gt.depth))
        if lane is None:
            lane = self.lanes[(gt.priority, gt.depth)] = Lane()
        gt.large = True
        gt.lane = lane
        tasks = lane.tasks
        i = len(tasks)
        while i > 0 and tasks[i - 1].turn > gt.turn:  # arrival order
            i -= 1
        tasks.insert(i, gt)
        if i > 0:
            self._retime(gt, PARKED + gt.turn)
            return
        # The head. Its virtual turn starts from the clock, not from its build time: one that
        # waited long (in preparation, say) must not hold every newer request back while it
        # catches up. A newer head that started meanwhile waits behind it.
        if len(tasks) > 1:
            self._retime(tasks[1], PARKED + tasks[1].turn)
        lane.vturn = max(lane.vturn, self.now_us()) + int(gt.service * self._stride() * 1e6)
        gt.unmoved = 0.0
        self._retime(gt, lane.vturn)

    def _move_head(self, gt: GraphTask) -> None:
        lane = gt.lane
        assert lane is not None
        queued = 0
        for q in gt.queues.values():
            queued += len(q.heap)
        if gt.unmoved < queued * REKEY_PER_ENTRY_S:
            return
        lane.vturn += int(gt.unmoved * self._stride() * 1e6)
        gt.unmoved = 0.0
        self._retime(gt, lane.vturn)

    def ended(self, gt: GraphTask) -> None:
        """``gt`` ended: out of its lane; the next in the lane becomes the head, from the lane's
        virtual turn."""
        lane = gt.lane
        if lane is None:
            return
        gt.lane = None
        tasks = lane.tasks
        head = tasks[0] is gt
        tasks.remove(gt)
        if head and tasks:
            nxt = tasks[0]
            nxt.unmoved = 0.0
            lane.vturn = max(lane.vturn, self.now_us())
            self._retime(nxt, lane.vturn)

    def _lane_busy(self, priority: int, depth: int) -> bool:
        lane = self.lanes.get((priority, depth))
        return lane is not None and bool(lane.tasks)

    # ------------------------------------------------------------------ flows
    def flow(self, priority: int | None = None, depth: int = 0) -> Flow | None:
        """The flow the running task's next top-level call continues, if its last call returned
        within FLOW_MAX_GAP_S and (for a pass of ``priority``) no lane of it is busy (See NOTE
        [One scheduler], 2, 3)."""
        f = flow_var.get()
        if (
            f is None
            or f.task is not asyncio.current_task()
            or self.now_us() - f.returned > FLOW_MAX_GAP_S * 1e6
            or (priority is not None and self._lane_busy(priority, depth))
        ):
            return None
        return f

    def returned(
        self, f: Flow | None, turn: int, service: float, priority: int | None = None
    ) -> None:
        """A top-level call of the running task (continuing flow ``f``, None: starting one)
        returned with ``turn``, its flow's calls having had ``service`` seconds of node time in
        all (a backward pass: at ``priority``): the next call continues it, unless that is a
        quantum or more."""
        if service >= self.quantum_s:
            if f is not None:
                f.task = None
        elif f is None:
            task = asyncio.current_task()
            flow_var.set(Flow(turn, self.now_us(), service, task, priority or 0))
        else:
            f.turn = turn
            f.returned = self.now_us()
            f.service = service
            if priority is not None:
                f.priority = priority

    def job_key(self, f: Flow | None) -> tuple[int, int]:
        """The turn and the compute-thread key of an ``ag.run`` call of flow ``f`` (None: a new
        one, at priority 0): its flow's turn and priority."""
        if f is None:
            turn = self.now_us()
            return turn, key_base(0, 0, turn)
        return f.turn, key_base(f.priority, 0, f.turn)

    @staticmethod
    def node_job_key(gt: GraphTask) -> int:
        """A large node's compute-thread key: its graph task's arrival turn, not its place in a
        lane (See NOTE [Turns on compute threads] in pools.py)."""
        return key_base(gt.priority, gt.depth, gt.turn)

    # ------------------------------------------------------------------ slices
    def iteration_start(self, queue: ReadyQueue) -> float:
        """When the engine first ran nodes of ``queue`` in this loop iteration: now, if it has
        not yet (the mark is cleared at the next iteration)."""
        since = queue.since
        if not since:
            assert self.loop is not None
            since = queue.since = self.clock()
            self.loop.call_soon(_next_iteration, queue)
        return since

    def begin_slice(self, queue: ReadyQueue, yielded: float) -> tuple[float, list[Entry] | None]:
        """A worker's next slice, its loop having last yielded at ``yielded``: how long it may
        run, and, when this slice pays lower priorities what they are owed, the entries set
        aside meanwhile (the queue then holds only lower-priority nodes; ``end_slice`` puts
        them back)."""
        full = settings.slice_s
        budget = max(full - (self.clock() - yielded), full * MIN_SLICE_SHARE)
        self.iteration_start(queue)  # callers later in this iteration share what is left of it
        aside = None
        if queue.owed >= full:
            heap = queue.heap
            top = heap[0][4].priority  # the smallest key has the highest priority
            lower = [e for e in heap if e[4].priority < top]
            if lower:
                aside = [e for e in heap if e[4].priority == top]
                heapq.heapify(lower)
                heap[:] = lower
        return budget, aside

    def end_slice(
        self,
        queue: ReadyQueue,
        started: float,
        aside: list[Entry] | None,
        ran_lower: bool,
        answered: int,
    ) -> None:
        """A worker's slice begun at ``started`` ended, having answered ``answered`` callers;
        ``ran_lower``: it reached nodes of a lower priority than its first's."""
        elapsed = self.clock() - started
        if self.observer is not None:
            self.observer("slice", elapsed, answered)
        if aside is not None:
            queue.heap.extend(aside)
            heapq.heapify(queue.heap)
            # Paid as far as this slice went (a short one, when callers took the rest).
            queue.owed = max(0.0, queue.owed - elapsed)
            return
        share = self.lower_share
        if ran_lower or share == 0.0 or queue.owed >= settings.slice_s:
            queue.owed = 0.0  # lower priorities ran, or none waited
        else:
            queue.owed += elapsed * share / (1.0 - share)

    def after_yield(self, queue: ReadyQueue, yielded: float, answered: int) -> None:
        """The worker is back from yielding at ``yielded``, having answered ``answered``
        callers in its last slice: update what a caller is expected to take on the loop."""
        if answered:
            per = (self.clock() - yielded) / answered
            queue.answer_s = min(0.5 * (queue.answer_s + per), settings.slice_s)

    def yields_after(self, queue: ReadyQueue, gt: GraphTask) -> bool:
        """``gt`` completed in a worker's slice: whether the worker yields now, so that its
        caller may send its next request before a large graph task of its priority goes on."""
        heap = queue.heap
        return bool(heap) and heap[0][4].large and heap[0][4].priority == gt.priority

    def here_budget(self, queue: ReadyQueue, gt: GraphTask, node: Node) -> tuple[float, bool]:
        """How long the caller of ``gt`` may drain its pass itself, from its start ``node``
        (0.0: not at all; it goes through the worker), and whether it passes queued work."""
        if queue.device.type != "cpu":
            return 0.0, False  # a CUDA queue's worker also paces the GPU
        heap = queue.heap
        ahead = bool(heap)
        if ahead:
            first = heap[0]
            if (
                first[4].priority != gt.priority  # the worker keeps each priority its share
                or gt.key_base - node._sequence_nr >= first[0]
                or queue.owed >= settings.slice_s
            ):
                return 0.0, False
        left = settings.slice_s - (self.clock() - self.iteration_start(queue))
        if ahead:
            left -= settings.slice_s * (1.0 - AHEAD_SHARE)
        return (left if left > 0.0 else 0.0), ahead

    def ran_here(self, queue: ReadyQueue, seconds: float, ahead: bool) -> None:
        """A caller ran its pass for ``seconds``, ahead of queued work if ``ahead``."""
        if self.observer is not None:
            self.observer("here", seconds, ahead)
        share = self.lower_share
        if ahead and share:
            queue.owed += seconds * share / (1.0 - share)

    # ------------------------------------------------------------------ admission
    def try_enter(self) -> bool:
        """Take a place among the graph tasks running on this loop if one is free and nobody
        waits for one; False (nothing changed) otherwise, when the caller awaits ``enter``. The
        caller must call ``leave`` once its graph task has ended."""
        cap = settings.max_running
        if cap is None or (self.running < cap and not self.waiters):
            self.running += 1
            return True
        return False

    async def enter(self, priority: int) -> None:
        """Take a place, waiting for one if the cap is reached (See NOTE [One scheduler], 6)."""
        if self.try_enter():
            return
        assert self.loop is not None
        fut: asyncio.Future[None] = self.loop.create_future()
        heappush(self.waiters, (-priority, next(_arrivals), fut))
        st = self.stats
        st.waiting += 1
        try:
            await adapt_await(fut)  # `leave` counts this caller as running when it wakes it
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self.leave()  # admitted just as it was cancelled: pass the place on
            st.cancelled += 1  # a graph task that never started
            raise
        finally:
            st.waiting -= 1

    def leave(self) -> None:
        """An admitted graph task has ended: admit the next waiters that fit."""
        self.running -= 1
        waiters = self.waiters
        cap = settings.max_running
        while waiters and (cap is None or self.running < cap):
            fut = heappop(waiters)[2]
            if fut.done():  # its caller was cancelled while waiting
                continue
            self.running += 1
            fut.set_result(None)


def _next_iteration(queue: ReadyQueue) -> None:
    queue.since = 0.0


# ----------------------------------------------------------------------------- per loop
_per_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Scheduler] = (
    weakref.WeakKeyDictionary()
)
# Blocking callers' (no loop): each builds its own queue (``Scheduler.queue``).
BLOCKING: Final = Scheduler(None, BLOCKING_STATS)


def of(loop: asyncio.AbstractEventLoop | None) -> Scheduler:
    """The scheduler of ``loop`` (made on first use; None: blocking callers')."""
    if loop is None:
        return BLOCKING
    s = _per_loop.get(loop)
    if s is None:
        s = _per_loop[loop] = Scheduler(loop)
    return s


def stats(loop: asyncio.AbstractEventLoop | None = None) -> dict[str, Any]:
    """The engine's metrics on ``loop`` (default: the running loop; with none running, those of
    blocking callers) as a dict: ``graph_tasks`` (running, waiting, completed, failed, cancelled),
    ``nodes`` and ``time_in_nodes_s`` per device, and ``longest_stall_s``, the longest time the
    engine held the loop at once. See NOTE [Engine metrics]."""
    if loop is None:
        loop = _running_loop()
    return of(loop).stats.snapshot()


def reset_stats(loop: asyncio.AbstractEventLoop | None = None) -> None:
    """Start the counters of ``loop`` (default: the running one, else blocking callers') afresh;
    graph tasks still running stay counted as running."""
    if loop is None:
        loop = _running_loop()
    of(loop).stats.reset()


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


# ----------------------------------------------------------------------------- waking workers
# NOTE [Waking workers]
# The scheduler decides where a ready node goes; worker.py owns how a queue is drained. A push
# that finds a loop's queue without a worker wakes it through `_wake`, which worker.py installs
# when it is imported (asyncgrad.engine imports it before any graph task can run), so the
# imports inside the engine point one way.
_wake: Callable[[ReadyQueue], None]


def install_waker(wake: Callable[[ReadyQueue], None]) -> None:
    global _wake
    _wake = wake


def push(gt: GraphTask, node: Node, buf: list[Any]) -> None:
    """Queue a ready node on its device's queue, starting that queue's worker if needed."""
    q = gt.sched.queue_of(gt, node._device)
    q.push(gt, node, buf)
    if q.worker is None and q.loop is not None:
        _wake(q)


def wake_idle(gt: GraphTask) -> None:
    """Start the workers of ``gt``'s queues that have work but none."""
    for q in gt.queues.values():
        if q.heap and q.worker is None and q.loop is not None:
            _wake(q)
