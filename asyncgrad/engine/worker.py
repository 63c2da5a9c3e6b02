"""Device workers: drain a ReadyQueue, pop -> evaluate -> route."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from collections import deque
from collections.abc import Generator
from contextvars import Token
from heapq import heapify, heappop, heappush
from time import perf_counter, perf_counter_ns
from typing import TYPE_CHECKING, Any, Final, cast

from ..backend import cuda, quiet_fp, restore_fp
from ..graph.anomaly_mode import anomaly_mode
from ..graph.grad_mode import _grad_enabled
from ..graph.node import LargeMeta
from . import ready_queue
from .devices import install_waker, route, route_from_task
from .evaluate import complete, evaluate, evaluate_plain, finish_blocking, own_cancellation
from .input_buffer import InputBuffer
from .offload import compute_pool
from .reentrant import config, current_graph_task
from .streams import Launch, Streams
from .watch import Watch, enter_watch, evaluate_watched, exit_watch, recorders, run_watched

if TYPE_CHECKING:
    from ..graph.node import Node
    from ..rules import FunctionNode
    from .graph_task import GraphTask
    from .ready_queue import ReadyQueue

# See NOTE [Yield behind timers]; tiny enough to add no measurable delay.
YIELD_DELAY_S: Final = 1e-6

# NOTE [Running ahead of the GPU]
# A CUDA worker only launches kernels; left alone it would queue a whole backward pass (or many)
# while the GPU works through the first nodes, holding their buffers, and once CUDA's launch
# queue is full a launch blocks the thread, and with it the loop. So after each slice it records
# an event on the streams it launched on, and before draining another slice it waits (without
# blocking the loop) until the GPU has reached the event of the slice MAX_SLICES_AHEAD back.
# A device error found there (See NOTE [Waiting for the GPU]) fails the passes queued on the
# device with it: their kernels cannot run on a broken device.
MAX_SLICES_AHEAD: Final = 2


# NOTE [Slices share the loop's turn]
# `slice_s` bounds a whole turn of the event loop, not only the worker's part of it:
#   - a slice runs for what the loop's other work since the worker last yielded left of
#     `slice_s`, and at least MIN_SLICE_SHARE of it, so the backward goes on however busy the
#     rest of the loop is;
#   - each graph task it completes takes from what is left the time its caller is expected to
#     spend on the loop before the worker's next turn (its next forward, say): a running mean of
#     the loop's time between the worker's turns per caller answered.
# Before, a slice ran a whole `slice_s` and the callers it answered then ran theirs, so a timer
# waited for both. Measured under benchmarks/server_load.py (64 clients of small gradients, a
# 2-core VM, medians of 5 interleaved rounds): the ticker's lag p99 went from 2.7 to 1.5 ms on
# asyncio and from 2.8 to 0.7 ms on uvloop; gradients per second fell 13% on asyncio (more,
# shorter turns) and stayed level on uvloop. A larger `slice_s` trades lag for throughput.
MIN_SLICE_SHARE: Final = 0.25


# NOTE [Lower priorities' share]
# A graph task of higher priority runs first (See NOTE [Ready order]), but a steady stream of
# high-priority requests must not starve lower-priority work on the same device (a trainer at
# priority 0 behind a server's requests at 1). The worker therefore counts, for every slice that
# ran only the priority it began with, `lower_share / (1 - lower_share)` of its node time as
# owed to lower priorities (``queue.owed``; callers that run their own passes ahead of queued
# work count theirs too, See NOTE [Passes in their callers]). Once a full slice is owed, its
# next slice runs only the ready nodes of priorities below the highest queued (drain_lower),
# and the debt goes down by the time that slice ran (a short slice, when callers took most of
# the loop's turn, pays part of it, and the next turn pays more). A slice that
# reached lower-priority work by itself (the higher work ran out) clears it too, so lower
# priorities keep at least `lower_share` of the device's node time, and more whenever the
# higher ones leave more. `configure(lower_share=0)` makes priority strict.
def start_worker(queue: ReadyQueue) -> None:
    assert queue.loop is not None
    queue.worker = queue.loop.create_task(
        run_worker(queue, perf_counter()), name=f"asyncgrad-worker-{queue.device}"
    )


install_waker(start_worker)  # See NOTE [Waking workers]


# NOTE [Passes in their callers]
# An awaited pass that would run next anyway (its device queue is idle, or its turn puts its
# first node ahead of everything queued, which is of its own priority: a request alone, or the
# next gradient of a request already being served, See NOTE [A request keeps its turn] in
# ready_queue.py; across priorities the worker keeps each its share) is drained by its
# caller right where it awaits, instead of going through the worker task and waiting a loop
# iteration for it and another for the answer: it then costs no task and no loop iteration, and
# ``await ag.grad(...)`` completes without yielding, as awaiting a finished future does. The
# caller runs its own graph task's nodes only, never what was queued before, so the ready order
# stays what the worker would follow (See NOTE [Ready order]). What bounds the loop's stalls
# stays: one slice per loop iteration, counted from the first node the engine ran in it
# (``queue.since``, cleared by a callback in the next iteration), covers the worker's nodes, the
# callers' and whatever those callers did in between. A caller runs only what is left of it and
# hands the rest of its pass to the worker, which it starts if needed; once the slice is used up,
# callers queue for the worker as before. (Without that shared bound, an earlier version let
# every caller run a slice of its own in each iteration: loop lag p99 went from 2.6 to 46 ms under
# benchmarks/server_load.py.) Node time run this way ahead of queued work counts towards what
# lower priorities are owed (See NOTE [Lower priorities' share]), and once a slice is owed,
# callers queue so that the worker pays it. Only CPU queues: a CUDA queue's worker also paces the
# GPU (See NOTE [Running ahead of the GPU]).
# A caller that passes queued work may use only the first AHEAD_SHARE of the slice: the worker,
# which serves the queue and counts the time of the callers it answers (See NOTE [Slices share
# the loop's turn]), keeps the rest. When callers ahead of the queue could fill the whole slice,
# the worker still took its MIN_SLICE_SHARE after them and loop iterations stayed above the
# slice; under benchmarks/server_load.py (64 clients of 20-gradient requests) the ticker's lag
# p99 was 3.2-3.7 ms, and 1.5-1.8 ms with this bound, gradients per second within the noise.
AHEAD_SHARE: Final = 0.25


def run_here(queue: ReadyQueue, gt: GraphTask, node: Node, buf: list[Any]) -> bool:
    """Drain ``gt``'s pass from its start node in the caller, within what is left of this loop
    iteration's slice; False, having done nothing, when something queued comes first, or no
    slice is left (See NOTE [Passes in their callers])."""
    if queue.device.type != "cpu":
        return False
    heap = queue.heap
    ahead = bool(heap)  # of queued work, which it passes by its turn
    if ahead:
        first = heap[0]
        if (
            first[4].priority != gt.priority  # the worker's own share-keeping decides then
            or gt.key_base - node._sequence_nr >= first[0]
            or queue.owed >= config.slice_s
        ):
            return False
    left = slice_left(queue)
    if ahead:
        left -= config.slice_s * (1.0 - AHEAD_SHARE)
    if left <= 0.0:
        return False
    queue.push(gt, node, buf)
    started = perf_counter()
    try:
        drain(queue, left, None, 0.0, gt)
    finally:
        share = config.lower_share
        if ahead and share:
            queue.owed += (perf_counter() - started) * share / (1.0 - share)
        if heap and queue.worker is None:
            start_worker(queue)
    return True


def slice_left(queue: ReadyQueue) -> float:
    """Seconds left of this loop iteration's slice (See NOTE [Passes in their callers])."""
    return config.slice_s - (perf_counter() - iteration_start(queue))


def iteration_start(queue: ReadyQueue) -> float:
    """When the engine first ran nodes of ``queue`` in this loop iteration: now, if it has not
    yet (the mark is cleared at the next iteration)."""
    since = queue.since
    if not since:
        assert queue.loop is not None
        since = queue.since = perf_counter()
        queue.loop.call_soon(_next_iteration, queue)
    return since


def _next_iteration(queue: ReadyQueue) -> None:
    queue.since = 0.0


async def run_worker(queue: ReadyQueue, started: float) -> None:
    """Drain ``queue`` in slices (See NOTE [Slices share the loop's turn]), yielding to the loop
    in between, and end when it is empty (the next push starts a new worker)."""
    heap = queue.heap
    ahead: deque[tuple[Any, Any]] | None = deque() if queue.device.type == "cuda" else None
    # Its context (copied from whoever started it) stays the same: See NOTE [Watched graph tasks].
    watched = bool(anomaly_mode() or recorders.get())
    # When it last yielded to the loop, or was started (See NOTE [Slices share the loop's
    # turn]): the loop's other work before its first step counts against its first slice too.
    yielded = started
    answer_s = 0.0
    answered = 0
    try:
        while heap:
            full = config.slice_s
            budget = max(full - (perf_counter() - yielded), full * MIN_SLICE_SHARE)
            iteration_start(queue)  # callers later in this iteration share what is left of it
            share = config.lower_share
            started = perf_counter()
            if queue.owed >= full and drain_lower(queue, budget, watched):
                # Paid as far as this slice went (a short one, when callers took the rest).
                queue.owed = max(0.0, queue.owed - (perf_counter() - started))
                answered = 0
            else:
                lower, answered = drain(queue, budget, watched, answer_s)
                if lower or share == 0.0 or queue.owed >= full:
                    queue.owed = 0.0  # lower priorities ran, or none waited
                else:
                    queue.owed += (perf_counter() - started) * share / (1.0 - share)
            if ahead is not None:
                # See NOTE [Running ahead of the GPU].
                idx = queue.device.index
                assert idx is not None
                try:
                    for s in queue.launched:
                        ahead.append((cuda.record(s, idx), idx))
                    queue.launched.clear()
                    while len(ahead) > MAX_SLICES_AHEAD:
                        await cuda.wait_until_done([ahead.popleft()])
                except Exception as e:  # the device failed: so do the passes queued on it
                    queue.launched.clear()
                    ahead.clear()
                    for gt in {entry[4] for entry in heap}:
                        gt.fail(e)
                    heap.clear()
            if heap:
                # NOTE [Yield behind timers]
                # sleep(0) would requeue the worker ahead of timers that fell due meanwhile (the
                # loop moves due timers behind already-ready callbacks), so a ticker would wait a
                # second slice. A due-now timer sorts behind every earlier timer instead.
                yielded = perf_counter()
                await yield_to_loop()
                if answered:
                    per = (perf_counter() - yielded) / answered
                    answer_s = min(0.5 * (answer_s + per), full)
    finally:
        queue.worker = None
        if heap:  # stopped from outside (the loop is closing): fail what is left
            for gt in {e[4] for e in heap}:
                gt.fail(RuntimeError("the asyncgrad engine worker was stopped"))
            heap.clear()


async def yield_to_loop() -> None:
    """Let the loop run its other ready callbacks and due timers (See NOTE [Yield behind
    timers])."""
    await asyncio.sleep(YIELD_DELAY_S)


def drain(
    queue: ReadyQueue,
    budget: float,
    base_watched: bool | None = None,
    answer_s: float = 0.0,
    only: GraphTask | None = None,
) -> tuple[bool, int]:
    """Evaluate ready nodes until the heap is empty (or, given ``only``, holds none of that
    graph task's first) or ``budget`` seconds have passed, each graph task it completes taking
    ``answer_s`` off the budget. Returns whether it ran nodes of
    a lower priority than its first's (See NOTE [Lower priorities' share]), and how many graph
    tasks it completed (See NOTE [Slices share the loop's turn]).

    # NOTE [Direct successor]
    # When a successor becomes ready with a key that would sort before everything in the heap
    # anyway, ``route`` hands it back and it runs next without the round trip through the heap,
    # so a chain of nodes costs no heap operations. The ready order (See NOTE [Ready order]) is
    # unchanged: a successor is only taken directly when it is the minimum.
    """
    heap = queue.heap
    started = perf_counter()
    deadline = started + budget
    fp_tok = quiet_fp()  # See NOTE [Silent floating point]
    count = 0
    total = 0  # nodes run, for the metrics (See NOTE [Engine metrics])
    cur: GraphTask | None = None
    mode_tok = gt_tok = watch_toks = None
    create = keep = slow = False
    w: Watch | None = None
    # Whether this context has anomaly mode or profilers of its own, which a graph task's
    # replace while its nodes run (See NOTE [Watched graph tasks]).
    if base_watched is None:
        base_watched = bool(anomaly_mode() or recorders.get())
    direct: tuple[int, Node, list[Any]] | None = None
    gt: GraphTask
    st: Streams | None = None
    launch = Launch() if cuda.loaded else None
    fair = queue.loop is not None  # a blocking caller's queue holds one graph task
    # Nodes of a CPU queue on a loop may leave it (See NOTE [Large nodes]).
    offload = fair and queue.device.type == "cpu"
    threshold = config.offload_threshold
    since = started
    top: int | None = None  # the priority of the first graph task it ran
    lower = False
    answered = 0
    try:
        while True:
            if direct is not None:
                _, node, buf = direct
                direct = None
            elif heap:
                if only is not None and heap[0][4] is not only:
                    break  # a caller runs its own pass alone (See NOTE [Passes in their callers])
                _, _, node, buf, gt = heappop(heap)
                if gt.done:
                    continue
                if gt is not cur:
                    if mode_tok is not None:
                        _grad_enabled.reset(mode_tok)
                        current_graph_task.reset(cast("Token[GraphTask | None]", gt_tok))
                    if watch_toks is not None:
                        exit_watch(watch_toks)
                        watch_toks = None
                    if top is None:
                        top = gt.priority
                    elif gt.priority < top:
                        lower = True
                    if fair:
                        # See NOTE [Fair order]: charge the one that ran until now.
                        now = perf_counter()
                        if cur is not None:
                            charge(cur, now - since)
                        since = now
                    mode_tok = _grad_enabled.set(gt.create_graph)
                    gt_tok = current_graph_task.set(gt)
                    cur = gt
                    create = gt.create_graph
                    keep = gt.keep_graph
                    st = gt.streams
                    # See NOTE [Watched graph tasks]: nothing per node for unwatched ones.
                    w = gt.watch
                    slow = w is not None or gt.exec_info is not None
                    if w is not None or base_watched:
                        watch_toks = enter_watch(w)
            else:
                break
            try:
                if st is not None and _on_gpu(queue, gt, st, node, buf, launch):
                    continue  # it waits for the GPU in a task of its own
                special = node._hooks is not None or node._special
                if (
                    offload
                    and (special or type(node._input_meta) is LargeMeta)
                    and node._hooks is None
                    and (work := node._work) is not None
                    and work(node, buf) > threshold
                ):
                    _spawn_off_loop(queue, gt, node, buf)  # See NOTE [Large nodes]
                    continue
                if special and (node._hooks is not None or node._async_apply):
                    gen = (
                        evaluate(gt, node, buf) if w is None else evaluate_watched(gt, w, node, buf)
                    )
                    try:
                        aw = gen.send(None)
                    except StopIteration as stop:
                        out = stop.value
                    else:
                        # The node awaits something (an async hook or backward): finish it in
                        # its own task, or block on a helper loop if nobody is serving a loop.
                        if queue.loop is not None:
                            _spawn(queue, gt, node, gen, aw)
                            continue
                        out = finish_blocking(gen, aw)
                elif slow:  # under exec_info, or watched
                    out = (
                        evaluate_plain(gt, node, buf)
                        if w is None
                        else run_watched(gt, w, node, buf)
                    )
                else:
                    # The hot path: a plain node in a plain backward.
                    out = node.apply(buf, None, create)
                    if not keep:
                        node.release_variables()
                if out is not None:
                    direct = route(gt, node, out, queue)
                # Drop our reference now: AccumulateGrad steals an array that nobody else
                # holds instead of copying it (see AccumulateGrad.apply).
                del out, buf
            except BaseException as e:
                # Whatever a node raises fails its graph task alone; see GraphTask.fail.
                gt.fail(e, node)
                direct = None
                continue
            gt.outstanding -= 1
            if gt.outstanding == 0:
                on_drained(gt)
                answered += 1
                deadline -= answer_s  # See NOTE [Slices share the loop's turn]
                if fair and heap and heap[0][4].large and heap[0][4].priority == gt.priority:
                    # Its caller may go on to a next request (See NOTE [Fair order]): let it
                    # run before the rest of this slice goes to a large graph task of the same
                    # priority. (Lower-priority work keeps the rest of the slice, so a steady
                    # stream of higher-priority requests leaves it some time.)
                    total += count + 1
                    count = 0
                    break
            count += 1
            if count == 16:
                total += 16
                count = 0
                now = perf_counter()
                if fair:
                    delta = charge(gt, now - since)  # See NOTE [Fair order]
                    since = now
                    if delta and direct is not None:  # the direct successor is gt's too
                        direct = (direct[0] + delta, direct[1], direct[2])
                if now > deadline:
                    break
    finally:
        end = perf_counter()
        queue.stats.add_slice(queue.label, total + count, end - started)
        if direct is not None:
            assert cur is not None
            heappush(heap, (direct[0], ready_queue.next_tie(), direct[1], direct[2], cur))
        if fair and cur is not None:
            charge(cur, end - since)  # See NOTE [Fair order]
        if launch is not None:
            launch.leave()
        if mode_tok is not None:
            _grad_enabled.reset(mode_tok)
            current_graph_task.reset(cast("Token[GraphTask | None]", gt_tok))
        if watch_toks is not None:
            exit_watch(watch_toks)
        restore_fp(fp_tok)
    return lower, answered


def drain_lower(queue: ReadyQueue, budget: float, base_watched: bool) -> bool:
    """A slice for the ready nodes of priorities below the highest queued (See NOTE [Lower
    priorities' share]); False, having run nothing, when there are none. The others wait aside
    meanwhile: the nodes it runs can only make their own graph tasks' nodes ready."""
    heap = queue.heap
    top = heap[0][4].priority  # the smallest key has the highest priority (See NOTE [Ready order])
    lower = [e for e in heap if e[4].priority < top]
    if not lower:
        return False
    aside = [e for e in heap if e[4].priority == top]
    heapify(lower)
    heap[:] = lower
    try:
        drain(queue, budget, base_watched)
    finally:
        heap.extend(aside)
        heapify(heap)
    return True


def charge(gt: GraphTask, seconds: float) -> int:
    """Add ``seconds`` of node time to ``gt``: once it has had its quantum it joins its lane of
    large graph tasks, and as the lane's head its turn moves later with its node time (See NOTE
    [Fair order]). Returns the change of its keys (0 when they stay)."""
    gt.service += seconds
    if gt.done:  # ended: it leaves (or never joins) its lane
        return 0
    if gt.large:
        lane = gt.lane
        if lane is None or lane.tasks[0] is not gt:
            return 0
        gt.unmoved += seconds
        if gt.unmoved < ready_queue.REKEY_S:
            return 0
        return ready_queue.move_head(gt, _stride())
    if gt.service < config.quantum_s or gt.loop is None:
        return 0
    return ready_queue.join_lane(gt, _stride())


def _stride() -> float:
    """How much a large graph task's turn moves per second of its node time: 1 / large_share,
    and 0 (it keeps its turn) at a share of 1."""
    share = config.large_share
    return 0.0 if share >= 1.0 else 1.0 / share


def _on_gpu(
    queue: ReadyQueue, gt: GraphTask, st: Streams, node: Node, buf: list[Any], launch: Any
) -> bool:
    """Ready a node of a graph task that uses CUDA: a CUDA node runs on its forward's stream
    (See NOTE [Streams in the graph]). Returns True when it was handed to a task of its own
    instead (See NOTE [Host reads wait off the loop])."""
    dev = node._device
    if dev is None or dev.type != "cuda":
        return False
    if node._copies_to_host and queue.loop is not None:
        if cast("FunctionNode", node)._params["device"].type == "cpu":
            _spawn_after_gpu(queue, gt, node, buf)
            return True
    launch.enter(st, node)
    queue.launched.add(node._stream)
    if type(buf) is InputBuffer and buf.cross:
        # Gradients made on other streams stay allocated until this node's kernels have read
        # them (See NOTE [Deferred frees] in asyncgrad/backend/cuda.py).
        launch.hold(node, list(buf))
    if cuda.side_streams and not gt.keep_graph:
        launch.hold_saved(node)  # and so do saved inputs, which may come from another stream
    return False


# NOTE [Large nodes]
# A CPU node whose work is large (a matmul of big operands, an elementwise op over a big array:
# `Node._work` estimates its multiply-adds, See NOTE [Work estimates] in graph/node.py) would
# hold the loop for its whole duration. Above `configure(offload_threshold=...)` multiply-adds,
# the worker hands such a node to a compute thread (See NOTE [Work off the loop] in
# offload.py) in a task of its own and goes on with the other ready nodes: the loop keeps
# serving, and independent branches and other graph tasks run on the other cores meanwhile
# (NumPy releases the GIL in its loops and in BLAS). The node runs in the worker's context
# (grad mode, current graph task); its gradients are routed back on the loop. The worker asks
# for the estimate only where the node's gradient has a large shape (a `LargeMeta`) or its
# class is `_special`, so a small plain node costs an awaited pass one type check more and a
# blocking one nothing. Nodes with hooks stay on the loop (hooks are user code), and so does
# everything of a blocking caller, which has no loop to keep free. The hand-off is not free:
# measured on a 2-core VM (benchmarks/bench_offload.py), it adds 0.15-0.6 ms to an awaited
# pass. So the default threshold, 2**25 multiply-adds, is about 1 ms of single-threaded BLAS
# work: a node shorter than that holds the loop no longer than one worker slice does anyway,
# and a longer one pays a hand-off that is small against its own time. An estimate of 0 (a
# node under `LARGE_ELEMENTS` elements) stays on the loop whatever the threshold.
def _spawn_off_loop(queue: ReadyQueue, gt: GraphTask, node: Node, buf: list[Any]) -> None:
    assert queue.loop is not None
    # The worker's context: grad mode and the current graph task are set for gt.
    ctx = contextvars.copy_context()
    # In the graph task's arrival turn among the compute threads' jobs (See NOTE [Turns on
    # compute threads] in offload.py), not its place in the lane of large ones: compute threads
    # serve requests first come, first served.
    key = ready_queue.key_base(gt.priority, gt.depth, gt.turn)
    # See NOTE [Answers on the loop] in offload.py.
    fut = compute_pool.get().run_keyed(key, queue.loop, ctx.run, _run_off_loop, gt, node, buf)
    gen = _off_loop(gt, fut)
    _spawn(queue, gt, node, gen, gen.send(None))


def _run_off_loop(gt: GraphTask, node: Node, buf: list[Any]) -> tuple[Any, float]:
    """On a compute thread: run the node as the worker would (See NOTE [Large nodes])."""
    if gt.done:  # cancelled or failed while it waited for a thread
        return None, 0.0
    t0 = perf_counter()
    w = gt.watch
    t0_ns = 0 if w is None else perf_counter_ns()
    fp_tok = quiet_fp()
    try:
        if gt.exec_info is not None:
            out = evaluate_plain(gt, node, buf)
        else:
            out = node.apply(buf, None, gt.create_graph)
            if not gt.keep_graph:
                node.release_variables()
        if w is not None:  # See NOTE [Watched graph tasks]
            w.done(gt, node, out, t0_ns, off_loop=True)
    finally:
        restore_fp(fp_tok)
    return out, perf_counter() - t0


def _off_loop(gt: GraphTask, fut: Any) -> Generator[Any, Any, Any]:
    out, seconds = yield fut
    gt.stats.add_off_loop(seconds)
    charge(gt, seconds)  # See NOTE [Fair order]
    return out


def on_drained(gt: GraphTask) -> None:
    """All nodes of ``gt`` have run: run its final callbacks, wait for its GPU work, then
    complete it."""
    if gt.loop is None:
        return  # a blocking caller completes it after draining (engine.execute_sync)
    if gt.callbacks or (gt.streams is not None and gt.streams.used):
        _own_task(gt, gt.loop.create_task(complete(gt)))
    else:
        gt.finish()


def _own_task(gt: GraphTask, task: asyncio.Task[Any]) -> None:
    """Account for a task the engine started for ``gt``: cancelled with it, awaited by
    ``wait_idle``."""
    gt.own_task(task)
    q = gt.queue
    if q is not None:
        q.tasks.add(task)
        task.add_done_callback(q.tasks.discard)


def _spawn(queue: ReadyQueue, gt: GraphTask, node: Node, gen: Any, aw: Any) -> None:
    assert queue.loop is not None
    task = queue.loop.create_task(_resume(gt, node, gen, aw))
    # A task cancelled before its first step never runs its body: close what it would have
    # awaited, so a hook's coroutine is not reported as never awaited.
    task.add_done_callback(lambda _: _close_unstarted(aw, gen))
    _own_task(gt, task)


# NOTE [Host reads wait off the loop]
# Copying a gradient from a CUDA device to the host (the backward of ``x.cuda()`` for a CPU
# ``x``) waits until the GPU has computed it. A worker on a loop must not wait there: such a node
# first waits in a task of its own, without blocking the loop, for an event recorded on its
# stream (See NOTE [Waiting for the GPU]), and only then runs, when the copy finds the data
# ready. A blocking caller (no loop) copies at once, waiting as torch does.
def _spawn_after_gpu(queue: ReadyQueue, gt: GraphTask, node: Node, buf: list[Any]) -> None:
    gen = _after_gpu(gt, node, buf)
    _spawn(queue, gt, node, gen, gen.send(None))


def _after_gpu(gt: GraphTask, node: Node, buf: list[Any]) -> Generator[Any, Any, Any]:
    dev = node._device
    assert dev is not None
    assert dev.index is not None
    ev = cuda.record(node._stream, dev.index)
    yield cuda.wait_until_done([(ev, dev.index)])
    w = gt.watch
    if w is not None:
        return (yield from evaluate_watched(gt, w, node, buf))
    return (yield from evaluate(gt, node, buf))


def _close_unstarted(aw: Any, gen: Generator[Any, Any, Any]) -> None:
    if inspect.iscoroutine(aw) and inspect.getcoroutinestate(aw) == inspect.CORO_CREATED:
        aw.close()
        gen.close()


def _launch_for(gt: GraphTask, node: Node) -> Launch | None:
    """The node's stream made current, for a node that resumes after an await (See NOTE
    [Streams in the graph])."""
    st = gt.streams
    dev = node._device
    if st is None or dev is None or dev.type != "cuda":
        return None
    launch = Launch()
    launch.enter(st, node)
    if cuda.side_streams and not gt.keep_graph:
        launch.hold_saved(node)  # its backward may run now (See NOTE [Deferred frees])
    return launch


async def _resume(gt: GraphTask, node: Node, gen: Generator[Any, Any, Any], aw: Any) -> None:
    """Finish evaluating a node that awaits, then route its gradients."""
    try:
        while True:
            try:
                val = await aw
            except BaseException as e:
                if own_cancellation(e):
                    raise
                # The awaited thing failed (or was cancelled by someone else): the node sees
                # the error where it awaited, and may handle it.
                try:
                    aw = gen.throw(e)
                except StopIteration as stop:
                    out = stop.value
                    break
                continue
            launch = _launch_for(gt, node)
            try:
                aw = gen.send(val)
            except StopIteration as stop:
                out = stop.value
                break
            finally:
                if launch is not None:
                    launch.leave()
    except BaseException as e:
        gen.close()
        if own_cancellation(e):
            raise
        gt.fail(e, node)
        return
    if gt.done:
        return
    try:
        if out is not None:
            tok = _grad_enabled.set(gt.create_graph)
            launch = _launch_for(gt, node)
            try:
                route_from_task(gt, node, out)
            finally:
                _grad_enabled.reset(tok)
                if launch is not None:
                    launch.leave()
    except BaseException as e:
        gt.fail(e, node)
        return
    gt.stats.add_slice(str(node._device or "cpu"), 1, 0.0)  # its time ran in several steps
    gt.outstanding -= 1
    if gt.outstanding == 0:
        on_drained(gt)
