"""Device workers: drain a ReadyQueue, pop -> evaluate -> route."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from collections import deque
from collections.abc import Generator
from contextvars import Token
from typing import TYPE_CHECKING, Any, Final, cast

from .._build import adapt_await
from ..backend import cuda, quiet_fp, restore_fp
from ..graph.anomaly_mode import anomaly_mode
from ..graph.grad_mode import _grad_enabled
from ..graph.node import LargeMeta
from ..rules.registry import FunctionNode
from .evaluate import complete, evaluate, finish_blocking, gpu_waits, own_cancellation, run_node
from .input_buffer import InputBuffer
from .pools import compute_pool
from .reentrant import current_graph_task
from .routing import route, route_from_task
from .scheduler import install_waker
from .settings import settings
from .streams import Launch, Streams
from .watch import enter_watch, exit_watch, recorders

if TYPE_CHECKING:
    from ..graph.node import Node
    from .graph_task import GraphTask
    from .scheduler import Direct, ReadyQueue

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


def start_worker(queue: ReadyQueue) -> None:
    assert queue.loop is not None
    queue.worker = queue.loop.create_task(
        run_worker(queue, queue.sched.clock()), name=f"asyncgrad-worker-{queue.device}"
    )


install_waker(start_worker)  # See NOTE [Waking workers]


def run_here(queue: ReadyQueue, gt: GraphTask, node: Node, buf: list[Any]) -> bool:
    """Drain ``gt``'s pass from its start node in the caller, at its await, if the scheduler
    lets it (See NOTE [One scheduler], 5); False, having done nothing, otherwise."""
    sched = queue.sched
    budget, ahead = sched.here_budget(queue, gt, node)
    if budget <= 0.0:
        return False
    queue.push(gt, node, buf)
    started = sched.clock()
    try:
        drain(queue, budget, None, 0.0, gt)
    finally:
        sched.ran_here(queue, sched.clock() - started, ahead)
        if queue.heap and queue.worker is None:
            start_worker(queue)
    return True


async def run_worker(queue: ReadyQueue, started: float) -> None:
    """Drain ``queue`` in the slices its scheduler gives (See NOTE [One scheduler], 5), yielding
    to the loop in between, and end when it is empty (the next push starts a new worker)."""
    heap = queue.heap
    sched = queue.sched
    clock = sched.clock
    ahead: deque[tuple[Any, Any]] | None = deque() if queue.device.type == "cuda" else None
    # Its context (copied from whoever started it) stays the same: See NOTE [Watched graph tasks].
    watched = bool(anomaly_mode() or recorders.get())
    # When it last yielded to the loop, or was started: the loop's other work before its first
    # step counts against its first slice too.
    yielded = started
    queue.answer_s = 0.0  # learnt afresh by each worker: callers change between busy spells
    try:
        while heap:
            budget, aside = sched.begin_slice(queue, yielded)
            started = clock()
            lower = False
            answered = 0
            try:
                lower, answered = drain(
                    queue, budget, watched, 0.0 if aside is not None else queue.answer_s
                )
            finally:
                sched.end_slice(queue, started, aside, lower, answered)
            if aside is not None:
                answered = 0  # callers of lower priorities: not the ones it usually answers
            if ahead is not None:
                # See NOTE [Running ahead of the GPU].
                idx = queue.device.index
                assert idx is not None
                try:
                    for s in queue.launched:
                        ahead.append((cuda.record(s, idx), idx))
                    queue.launched.clear()
                    while len(ahead) > MAX_SLICES_AHEAD:
                        await adapt_await(cuda.wait_until_done([ahead.popleft()]))
                except Exception as e:  # the device failed: so do the passes queued on it
                    queue.launched.clear()
                    ahead.clear()
                    queue.fail_all(e)
            if heap:
                # NOTE [Yield behind timers]
                # sleep(0) would requeue the worker ahead of timers that fell due meanwhile (the
                # loop moves due timers behind already-ready callbacks), so a ticker would wait a
                # second slice. A due-now timer sorts behind every earlier timer instead.
                yielded = clock()
                await yield_to_loop()
                sched.after_yield(queue, yielded, answered)
    finally:
        queue.worker = None
        if heap:  # stopped from outside (the loop is closing): fail what is left
            queue.fail_all(RuntimeError("the asyncgrad engine worker was stopped"))


async def yield_to_loop() -> None:
    """Let the loop run its other ready callbacks and due timers (See NOTE [Yield behind
    timers])."""
    await adapt_await(asyncio.sleep(YIELD_DELAY_S))


def drain(
    queue: ReadyQueue,
    budget: float,
    base_watched: bool | None = None,
    answer_s: float = 0.0,
    only: GraphTask | None = None,
) -> tuple[bool, int]:
    """Evaluate ready nodes until the heap is empty (or, given ``only``, holds none of that
    graph task's first) or ``budget`` seconds have passed, each graph task it completes taking
    ``answer_s`` off the budget. Returns whether it ran nodes of a lower priority than its
    first's, and how many graph tasks it completed (See NOTE [One scheduler], 1 and 5).

    # NOTE [Direct successor]
    # When a successor becomes ready with a key that would sort before everything in the heap
    # anyway, ``route`` hands it back and it runs next without the round trip through the heap,
    # so a chain of nodes costs no heap operations. The ready order (See NOTE [One scheduler]) is
    # unchanged: a successor is only taken directly when it is the minimum. Its key is computed
    # only where it is compared with another (See Direct in scheduler.py): never, in a chain.
    """
    sched = queue.sched
    clock = sched.clock
    charge = sched.charge
    pop = queue.pop
    heap = queue.heap
    started = clock()
    deadline = started + budget
    fp_tok = quiet_fp()  # See NOTE [Silent floating point]
    count = 0
    total = 0  # nodes run, for the metrics (See NOTE [Engine metrics])
    cur: GraphTask | None = None
    running = _RunningFor(base_watched)
    create = keep = slow = False
    direct: Direct | None = None
    gt: GraphTask
    st: Streams | None = None
    launch = Launch() if cuda.loaded else None
    # The stream and device of the last CUDA node readied for the current graph task: the next
    # node there needs nothing more, unless it reads the host or gradients from other streams
    # or saved inputs must be held (See _on_gpu).
    ready_stream: Any = None
    ready_device: Any = None
    fair = queue.loop is not None  # a blocking caller's queue holds one graph task
    # Nodes of a CPU queue on a loop may leave it (See NOTE [Large nodes]).
    offload = fair and queue.device.type == "cpu"
    threshold = settings.offload_threshold
    since = started
    top: int | None = None  # the priority of the first graph task it ran
    lower = False
    answered = 0
    try:
        while True:
            if direct is not None:
                node, buf = direct
                direct = None
            else:
                entry = pop(only)  # None: empty, or (``only``) a caller's own pass is done
                if entry is None:
                    break
                _, _, node, buf, gt = entry
                if gt.done:
                    continue
                if gt is not cur:
                    running.leave()
                    if top is None:
                        top = gt.priority
                    elif gt.priority < top:
                        lower = True
                    if fair:
                        # Charge the one that ran until now (See NOTE [One scheduler]).
                        now = clock()
                        if cur is not None:
                            charge(cur, now - since)
                        since = now
                    running.enter(gt)
                    cur = gt
                    ready_stream = ready_device = None
                    create = gt.create_graph
                    keep = gt.keep_graph
                    st = gt.streams
                    # See NOTE [Watched graph tasks]: nothing per node for unwatched ones.
                    slow = gt.watch is not None or gt.exec_info is not None
            try:
                if st is not None and (
                    node._device is not ready_device  # (a CPU node: never ready_device)
                    or node._stream is not ready_stream
                    or node._copies_to_host
                    or cuda.side_streams
                    or (type(buf) is InputBuffer and buf.cross)
                ):
                    if _on_gpu(queue, gt, st, node, buf, launch):
                        continue  # it waits for the GPU in a task of its own
                    dev = node._device
                    if dev is not None and dev.type == "cuda":
                        assert launch is not None
                        if launch.last is node._stream:
                            ready_stream, ready_device = node._stream, dev
                special = node._hooks is not None or node._special
                if (
                    offload
                    and (special or type(node._input_meta) is LargeMeta)
                    and node._hooks is None
                    and (work := type(node)._work) is not None
                    and work(node, buf) > threshold
                ):
                    _spawn_off_loop(queue, gt, node, buf)  # See NOTE [Large nodes]
                    continue
                if special and (node._hooks is not None or node._async_apply):
                    gen = evaluate(gt, node, buf)
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
                    out = run_node(gt, node, buf)
                else:
                    # The hot path: run_node's plainest case, inline (See NOTE [Evaluating a
                    # node]). A table op's node is called without a method lookup (See NOTE
                    # [Table nodes are called directly]).
                    if isinstance(node, FunctionNode):
                        out = FunctionNode.apply(node, buf, None, create)
                        if not keep:
                            FunctionNode.release_variables(node)
                    else:
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
                deadline -= answer_s  # See NOTE [One scheduler], 5
                if fair and heap and sched.yields_after(queue, gt):
                    total += count + 1
                    count = 0
                    break
            count += 1
            if count == 16:
                total += 16
                count = 0
                now = clock()
                if fair:
                    charge(gt, now - since)  # a direct successor's key moves with gt's
                    since = now
                if now > deadline:
                    break
    finally:
        end = clock()
        queue.stats.add_slice(queue.label, total + count, end - started)
        if direct is not None:
            assert cur is not None
            queue.put_back(direct, cur)
        if fair and cur is not None:
            charge(cur, end - since)
        if launch is not None:
            launch.leave()
        running.leave()
        restore_fp(fp_tok)
    return lower, answered


class _RunningFor:
    """The context the nodes of the graph task a worker runs see: its grad mode, it as the
    current graph task, and its anomaly mode and profilers (See NOTE [Watched graph tasks]),
    set when the worker switches to it and reset when it switches away."""

    __slots__ = ("base_watched", "gt_tok", "mode_tok", "watch_toks")

    def __init__(self, base_watched: bool | None) -> None:
        # Whether this context has anomaly mode or profilers of its own, which a graph task's
        # replace while its nodes run.
        if base_watched is None:
            base_watched = bool(anomaly_mode() or recorders.get())
        self.base_watched = base_watched
        self.mode_tok: Token[bool] | None = None
        self.gt_tok: Token[GraphTask | None] | None = None
        self.watch_toks: Any = None

    def enter(self, gt: GraphTask) -> None:
        self.mode_tok = _grad_enabled.set(gt.create_graph)
        self.gt_tok = current_graph_task.set(gt)
        w = gt.watch
        if w is not None or self.base_watched:  # nothing for unwatched ones in a plain context
            self.watch_toks = enter_watch(w)

    def leave(self) -> None:
        if self.mode_tok is not None:
            _grad_enabled.reset(self.mode_tok)
            tok: Any = self.gt_tok  # (a Token; no cast(), a call on every switch)
            current_graph_task.reset(tok)
            self.mode_tok = None
        if self.watch_toks is not None:
            exit_watch(self.watch_toks)
            self.watch_toks = None


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
# everything of a blocking caller, which has no loop to keep free. The hand-off is not free (a
# fraction of a millisecond: benchmarks/bench_offload.py, numbers in benchmarks/RESULTS.md), so
# the default threshold, 2**25 multiply-adds, is about 1 ms of single-threaded BLAS work: a
# node shorter than that holds the loop no longer than one worker slice does anyway, and a
# longer one pays a hand-off that is small against its own time. An estimate of 0 (a
# node under `LARGE_ELEMENTS` elements) stays on the loop whatever the threshold.
def _spawn_off_loop(queue: ReadyQueue, gt: GraphTask, node: Node, buf: list[Any]) -> None:
    assert queue.loop is not None
    # The worker's context: grad mode and the current graph task are set for gt.
    ctx = contextvars.copy_context()
    key = queue.sched.node_job_key(gt)
    # See NOTE [Answers on the loop] in pools.py.
    fut = compute_pool.get().run_keyed(key, queue.loop, ctx.run, _run_off_loop, gt, node, buf)
    gen = _off_loop(gt, fut)
    _spawn(queue, gt, node, gen, gen.send(None))


def _run_off_loop(gt: GraphTask, node: Node, buf: list[Any]) -> tuple[Any, float]:
    """On a compute thread: run the node as the worker would (See NOTE [Large nodes])."""
    if gt.done:  # cancelled or failed while it waited for a thread
        return None, 0.0
    clock = gt.sched.clock
    t0 = clock()
    fp_tok = quiet_fp()
    try:
        out = run_node(gt, node, buf, off_loop=True)
    finally:
        restore_fp(fp_tok)
    return out, clock() - t0


def _off_loop(gt: GraphTask, fut: Any) -> Generator[Any, Any, Any]:
    out, seconds = yield fut
    gt.stats.add_off_loop(seconds)
    gt.sched.charge(gt, seconds)
    return out


def on_drained(gt: GraphTask) -> None:
    """All nodes of ``gt`` have run: run its final callbacks, wait for its GPU work, then
    complete it."""
    if gt.loop is None:
        return  # a blocking caller completes it after draining (engine.execute_sync)
    if gt.callbacks:
        _own_task(gt, gt.loop.create_task(complete(gt)))
        return
    st = gt.streams
    if st is None or not st.used:  # no GPU work
        gt.finish()
        return
    # With nothing left to wait for on the GPU it ends here, without a task.
    try:
        waits = gpu_waits(gt)
    except Exception as e:  # a device failed (See NOTE [Sticky errors] in sim.py)
        gt.fail(e)
        return
    if waits:
        _own_task(gt, gt.loop.create_task(complete(gt, waits)))
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
                val = await adapt_await(aw)
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
            ended = False
            try:
                aw = gen.send(val)
            except StopIteration as stop:
                out = stop.value
                ended = True
            finally:
                if launch is not None:
                    launch.leave()
            if ended:  # not a break inside the try: compiled coroutines have none
                break
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
