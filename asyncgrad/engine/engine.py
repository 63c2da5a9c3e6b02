"""Engine.execute: how a gradient goes through the engine, file by file.

1. ``ag.grad`` / ``backward`` (autograd/api.py) make the pass one value (backward_pass.py:
   BackwardPass, NOTE [One pass, one value]) and call ``execute`` (awaited, on the running
   loop) or ``execute_sync`` (blocking, on the calling thread) here with it; under trio,
   foreign.py runs the blocking form on a worker thread.
2. Admission (scheduler.py): a top-level pass takes a place among the ``max_running`` of its
   loop, or waits for one; a pass nested in a running one (reentrant.py: ``current_graph_task``,
   its depth) never waits, and past the depth limit moves to a pool loop or thread (pools.py).
3. ``build`` makes the GraphTask (graph_task.py: dependencies, input buffers, captures,
   cancellation links, completion), which its loop's Scheduler enrolls: its turn is its
   caller's flow's, or now. ``_prepare`` walks the graph from the roots, counting dependencies
   (and, for ``grad``/``inputs=``, which nodes must run: exec_info), yielding to the loop every
   few hundred nodes.
4. The start node goes to the queue of its device (scheduler.py, ReadyQueue). The caller drains
   it right there if the scheduler lets it (``run_here``), else the device's worker does.
5. A worker (worker.py) takes slices the scheduler sizes; in each it pops the ready node with the
   smallest key, evaluates it (evaluate.py: hooks, capture, ``apply``, release; the hot path
   inline), and routes its gradients (routing.py) into the input buffers of the nodes its
   edges point at (input_buffer.py: the one place gradients are summed). A node whose last
   gradient arrived is ready: it goes to its device's queue, or runs next directly when its
   key sorts first. Each graph task's node time is charged to the scheduler, which moves a
   large one's key (See NOTE [One scheduler]).
6. A node that awaits (an async hook or backward) finishes in a task of its own; a large CPU node
   runs on a compute thread (pools.py), a CUDA node on its forward's stream (streams.py), and
   its gradients are routed back on the loop.
7. When a graph task's last node has run, its final callbacks run and its GPU work is awaited;
   it completes, and the awaiting caller gets its gradients. The caller's flow keeps its turn
   for its next call. Errors fail that graph task alone; cancelling the caller stops it and its
   descendants (graph_task.py, NOTE [Cancellation links]).
8. Every step counts in its loop's stats (metrics.py, prometheus.py); ``configure``
   (settings.py) holds the few options.
Why a given node runs next: NOTE [One scheduler] in scheduler.py.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
from collections.abc import Callable, Generator, Sequence
from typing import Any, Final

from .._build import adapt_await
from ..backend import CPU
from ..graph.graph_root import GraphRoot
from ..graph.node import Edge, Node
from . import scheduler, streams
from .backward_pass import BackwardPass
from .evaluate import run_callbacks_blocking
from .graph_task import NEEDED, ExecInfo, GraphTask, request_cancel
from .pools import blocking, jobs_in_flight, loop_pool, thread_pool
from .reentrant import current_graph_task
from .scheduler import Scheduler, push
from .settings import settings
from .worker import drain, run_here, yield_to_loop


def _spent() -> Generator[None, None, Start | None]:
    return None
    yield  # a generator function


# A finished preparation: what a spent one's variable is rebound to.
_SPENT: Final = _spent()
next(_SPENT, None)
# What a variable that held a pass is rebound to once its GraphTask is built (See NOTE [One
# pass, one value]).
_NO_PASS: Final = BackwardPass((), (), None, False, False, False, 0)


def _depths(parent: GraphTask | None) -> tuple[int, int]:
    if parent is None:
        return 0, 0
    return parent.depth + 1, parent.local_depth + 1


# ----------------------------------------------------------------------------- preparation
def _prepare(
    gt: GraphTask, p: BackwardPass
) -> Generator[None, None, tuple[Node, list[Any]] | None]:
    """Find the start node, exec_info and dependency counts. A generator that yields every few
    thousand nodes so that an async caller can let the loop run meanwhile."""
    roots, root_grads, outputs = p.roots, p.root_grads, p.outputs
    accumulate = p.accumulate
    p = _NO_PASS  # the roots and their gradients stay only as long as this walk needs them
    if len(roots) == 1:
        root, nr = roots[0]
        buf: list[Any] = [None] * len(root._input_meta)
        buf[nr] = root_grads[0]
    else:
        root = GraphRoot(list(roots), list(root_grads))
        buf = []
    if outputs is not None:
        gt.captured = [None] * len(outputs)
        info, deps = yield from _init_exec_info(root, outputs, accumulate)
        gt.exec_info = info
        if root not in info:
            return None  # no output is reachable from the roots
        gt.dependencies = deps
    else:
        gt.dependencies = yield from _compute_dependencies(root)
    return root, buf


# NOTE [Preparation yields]
# Both walks below are generators that yield after every VISITS_PER_YIELD node visits, going
# down or coming back up, so an awaiting caller lets the loop run at least every slice even on a
# 200,000-node chain, and a timeout around ``await ag.grad(...)`` fires on time. They allocate no
# container per node (parallel stacks of nodes and edge positions, one shared ExecInfo for the
# nodes that only run), so a large graph does not set off the cyclic collector inside the await.
VISITS_PER_YIELD: Final = 256
# A small graph is prepared in one go (its first slice is a whole `slice_s`); a large one goes
# on a quarter slice per loop turn, beside the device workers' slices rather than doubling them
# (benchmarks/engine_design.md).
PREP_SLICE_SHARE: Final = 0.25


def _compute_dependencies(root: Node) -> Generator[None, None, dict[Node, int]]:
    """How many edges lead into each node reachable from ``root`` (for ``grad()`` the exec_info
    walk counts them: See NOTE [Dependencies from the exec_info walk])."""
    deps: dict[Node, int] = {}
    stack = [root]
    count = 0
    while stack:
        fn = stack.pop()
        for e in fn._next_edges:
            if e is None:
                continue
            nxt = e[0]
            if nxt in deps:
                deps[nxt] += 1
            else:
                deps[nxt] = 1
                stack.append(nxt)
        count += 1
        if count == VISITS_PER_YIELD:
            count = 0
            yield
    return deps


# The mark that a node's children have all been walked (See _init_exec_info).
_EXIT: Final = object()


def _init_exec_info(
    root: Node, outputs: Sequence[Edge], accumulate: bool
) -> Generator[None, None, tuple[dict[Node, ExecInfo], dict[Node, int]]]:
    """The nodes that must run for ``outputs`` to receive their gradients: those from which
    some output is reachable; and the dependency counts among them. Nodes whose topological
    number is below every output's cannot reach one and are never expanded (PyTorch's pruning).

    # NOTE [Dependencies from the exec_info walk]
    # A depth-first walk: a node is entered once (pushed back with the mark _EXIT above it, and
    # its unvisited children above that), and left once all its children have been left. Then
    # whether each child is in exec_info is settled, so leaving a node decides whether it must
    # run (some child is in exec_info) and counts the dependencies it gives (one per edge into
    # exec_info): a node's count is the number of edges into it from nodes that run, with no
    # second walk. A child without edges (a leaf's accumulator) is never entered: it is in
    # exec_info only if it is an output.
    """
    info: dict[Node, ExecInfo] = {}
    min_topo = outputs[0][0]._topological_nr
    for i, (node, nr) in enumerate(outputs):
        if node._topological_nr < min_topo:
            min_topo = node._topological_nr
        ei = info.get(node)
        if ei is None:
            ei = info[node] = ExecInfo(False, [])
        if accumulate:
            ei.needed = True
        else:
            captures = ei.captures
            assert isinstance(captures, list)  # outputs get their own list, never NEEDED's ()
            captures.append((nr, i))
    deps: dict[Node, int] = {}
    visited: set[Node] = set()
    stack: list[Any] = [root]
    count = 0
    while stack:
        top = stack.pop()  # a Node, or _EXIT (not a Node: See NOTE [Compiled modules])
        if top is _EXIT:
            node = stack.pop()
            needed = False
            for e in node._next_edges:
                if e is not None and e[0] in info:
                    child = e[0]
                    deps[child] = deps.get(child, 0) + 1
                    needed = True
            if needed:
                ei = info.get(node)
                if ei is None:
                    info[node] = NEEDED
                elif not ei.needed:
                    ei.needed = True
        elif top not in visited:
            node = top
            visited.add(node)
            stack.append(node)
            stack.append(_EXIT)
            for e in node._next_edges:
                if e is not None:
                    child = e[0]
                    if (
                        child._next_edges
                        and child not in visited
                        and child._topological_nr >= min_topo
                    ):
                        stack.append(child)
        count += 1
        if count == VISITS_PER_YIELD:
            count = 0
            yield
    return info, deps


# ----------------------------------------------------------------------------- execution
Start = tuple[Node, list[Any]]


def build(
    p: BackwardPass, depth: tuple[int, int], sched: Scheduler, turn: int | None = None
) -> tuple[GraphTask, Generator[None, None, Start | None]]:
    """The one builder of a GraphTask: the task of pass ``p`` (scheduled by ``sched``, in
    ``turn`` if given), and the preparation (a generator that yields every few hundred nodes, so
    an awaiting caller can let the loop run) whose value is the start node and its input buffer,
    or None when no output is reachable."""
    gt = GraphTask(p.keep_graph, p.create_graph, p.priority, depth[0], depth[1], sched, turn)
    gt.streams = streams.begin(p.roots)
    return gt, _prepare(gt, p)


async def execute(p: BackwardPass) -> list[Any]:
    """Run backward pass ``p`` on the running loop; returns the captured gradients (for its
    outputs)."""
    loop = asyncio._get_running_loop()
    if loop is None:  # trio, say: See NOTE [Other event loops] in foreign.py
        from .foreign import execute_foreign

        return await execute_foreign(p)
    parent = current_graph_task.get()
    depth = _depths(parent)
    if depth[1] > settings.max_reentrant_depth:
        # See NOTE [Reentrant depth]: this level moves to a pool loop, if one can take it, and
        # its depth on a stack starts again from zero either way.
        depth = (depth[0], 0)
        target = loop_pool.pick(loop)
        if target is not None and target.loop is not loop:
            return await _execute_on(target.loop, parent, p, depth)
    sched = scheduler.of(loop)
    priority = p.priority
    # A nested pass is never held back (See NOTE [One scheduler], 6) and has its parent's turn
    # order.
    top = parent is None
    if top and not sched.try_enter():  # no coroutine when there is room
        await sched.enter(priority)
    try:
        # A top-level pass continues its caller's flow (See NOTE [One scheduler], 2).
        flow = sched.flow(priority, depth[0]) if top else None
        gt, prep = build(p, depth, sched, None if flow is None else flow.turn)
        gt.link(parent)
        run = _run(gt, prep)
        # The preparation holds what it needs until it has run: nothing here keeps the pass
        # or the spent generator alive while it is awaited (See NOTE [One pass, one value]).
        # Rebound, not deleted: compiled coroutines cannot delete their locals.
        p = _NO_PASS
        prep = _SPENT
        try:
            captured = await run
            if top:
                service = gt.service if flow is None else flow.service + gt.service
                sched.returned(flow, gt.turn, service, priority)
            return captured
        finally:
            gt.unlink()
    finally:
        if top:
            sched.leave()


async def _execute_on(
    loop: asyncio.AbstractEventLoop,
    parent: GraphTask | None,
    p: BackwardPass,
    depth: tuple[int, int],
) -> list[Any]:
    """Run pass ``p``'s graph task on another (pool) loop and await it there, blocking no
    thread; it runs in a copy of this context (grad mode; ``parent`` as current graph task)."""
    gt, prep = build(p, depth, scheduler.of(loop))
    p = _NO_PASS  # See NOTE [One pass, one value]
    gt.link(parent)

    async def run() -> list[Any]:
        try:
            return await _run(gt, prep)
        finally:
            gt.unlink()

    cf = None
    try:
        cf = loop_pool.spawn(loop, run, contextvars.copy_context())
        return await adapt_await(asyncio.wrap_future(cf))
    except asyncio.CancelledError:
        # This caller was cancelled (its own graph task stopping cancels gt through the link
        # anyway, but a caller may be cancelled alone), or gt was (then this does nothing).
        request_cancel([gt])
        raise
    finally:
        gt.unlink()  # in case gt never started
        del cf  # it holds any error, whose traceback holds this frame: no cycle


async def _run(gt: GraphTask, prep: Generator[None, None, Start | None]) -> list[Any]:
    """Prepare and run ``gt`` on its loop, the running one."""
    assert gt.loop is not None
    if gt.cancel_requested:
        gt.cancel()
        raise asyncio.CancelledError("the backward pass was cancelled before it started")
    gt.future = gt.loop.create_future()
    sched = gt.sched
    clock = sched.clock
    try:
        t0 = clock()
        t_end = t0 + settings.slice_s
        try:
            while True:
                next(prep)
                now = clock()
                if now > t_end:
                    gt.stats.stall(now - t0)  # See NOTE [Engine metrics]
                    await yield_to_loop()  # behind due timers, as a worker yields
                    t0 = clock()
                    t_end = t0 + settings.slice_s * PREP_SLICE_SHARE
        except StopIteration as stop:
            start = stop.value
        prep = _SPENT
        gt.stats.stall(clock() - t0)
        if gt.done:  # cancelled through its link while preparing
            raise asyncio.CancelledError("the backward pass was cancelled")
        if start is None:
            gt.finish()
            return gt.captured
        q = sched.start_queue(gt, start[0]._device or CPU)
        # In its caller, if the scheduler lets it, else through the device's worker (See NOTE
        # [One scheduler], 5).
        if not run_here(q, gt, start[0], start[1]):
            push(gt, start[0], start[1])
        del start
        # (No local for the future: with its error in a traceback that holds this frame it
        # would close a cycle; See the finally clause.)
        assert gt.future is not None
        if gt.future.done():  # it ran here to the end: no await, no call of adapt_await
            gt.future.result()  # (its error, if it failed)
        else:
            await adapt_await(gt.future)
    except asyncio.CancelledError:
        gt.cancel()
        raise
    finally:
        # As in execute_sync: the error's traceback holds frames that hold gt, so gt must not
        # hold the error (directly or through its future), or the failed graph stays alive in a
        # reference cycle until the cyclic collector runs.
        gt.error = None
        gt.future = None
    return gt.captured


def execute_sync(p: BackwardPass) -> list[Any]:
    """Run backward pass ``p`` to completion on the calling thread, with no event loop.

    Safe inside a running loop too (the loop waits while this runs; nothing here needs it, and
    the wait counts as a stall of that loop: See NOTE [Engine metrics]).
    """
    loop = asyncio._get_running_loop()
    if loop is None:
        return _execute_sync(p, None)
    sched = scheduler.of(loop)
    t0 = sched.clock()
    try:
        return _execute_sync(p, None)
    finally:
        sched.stats.stall(sched.clock() - t0)


def _execute_sync(
    p: BackwardPass,
    _depth: tuple[int, int] | None,
    _on_task: Callable[[GraphTask], None] | None = None,  # gets the GraphTask, to cancel it
) -> list[Any]:
    parent = current_graph_task.get()
    depth = _depths(parent) if _depth is None else _depth
    # This thread waits here until the pass is done: a pool loop it runs takes no new work
    # meanwhile (See NOTE [Pool loops]).
    with blocking():
        if depth[1] > settings.max_reentrant_depth:
            # See NOTE [Reentrant depth]: continue on a pool thread, whose stack starts afresh.
            cf = thread_pool.submit(_execute_sync, p, (depth[0], 0), _on_task)
            try:
                res: list[Any] = cf.result()
                return res
            finally:
                del cf  # it holds any error, whose traceback holds this frame: no cycle
        gt, prep = build(p, depth, scheduler.BLOCKING)
        p = _NO_PASS  # See NOTE [One pass, one value]
        gt.link(parent)
        if _on_task is not None:
            _on_task(gt)
        try:
            return _run_sync(gt, prep)
        finally:
            gt.error = None
            if not gt.done:
                gt.cancel()
            gt.unlink()


def _run_sync(gt: GraphTask, prep: Generator[None, None, Start | None]) -> list[Any]:
    try:
        while True:
            next(prep)
            if gt.cancel_requested:  # from another thread, while preparing a large graph
                raise asyncio.CancelledError("the backward pass was cancelled")
    except StopIteration as stop:
        start = stop.value
    if start is None:
        gt.finish()
        return gt.captured
    queue = gt.sched.start_queue(gt, start[0]._device or CPU)
    queue.push(gt, start[0], start[1])
    del start
    # Drained in slices, so that a cancellation from another thread (See NOTE [Cancellation
    # links]) is seen within one slice, or when the node running then returns.
    while queue.heap and not gt.cancel_requested:
        drain(queue, settings.slice_s)
    if gt.cancel_requested and gt.error is None:  # not failed (failing sets the flag too)
        gt.cancel()
        raise asyncio.CancelledError("the backward pass was cancelled")
    if gt.error is None and gt.callbacks:
        try:
            run_callbacks_blocking(gt)
        except BaseException as e:
            gt.fail(e)
    if gt.error is not None:
        raise gt.error
    if gt.streams is not None and gt.streams.used:
        # The caller's streams wait for the graph task's; this thread does not (as in torch).
        try:
            streams.finish(gt.streams)
        except BaseException as e:  # a device failed (See NOTE [Sticky errors] in sim.py)
            gt.fail(e)
            raise
    gt.finish()
    return gt.captured


async def wait_idle() -> None:
    """Wait until the engine has nothing left to do on the running loop: every device worker
    has drained its queue and every task finishing an awaiting node (or running final
    callbacks) has ended, failed and cancelled graph tasks' included; and until the levels
    nested past the depth limit, on the pool's threads and loops, have ended too."""
    loop = asyncio.get_running_loop()
    while True:
        if await _settle(loop):
            continue
        jobs = jobs_in_flight()
        if jobs:
            await adapt_await(asyncio.wait([_wrap(loop, j) for j in jobs]))
            continue
        busy = False
        for lt in loop_pool.loops():
            if lt.loop is not loop:
                cf = asyncio.run_coroutine_threadsafe(_settle(lt.loop), lt.loop)
                busy = await adapt_await(asyncio.wrap_future(cf)) or busy
        if not busy:
            return


async def _settle(loop: asyncio.AbstractEventLoop) -> bool:
    """Wait for the engine's tasks on ``loop`` (the running one); whether there were any."""
    waited = False
    while True:
        pending: set[asyncio.Task[Any]] = set()
        for q in list(scheduler.of(loop).queues.values()):
            if q.worker is not None:
                pending.add(q.worker)
            pending.update(q.tasks)
        if not pending:
            return waited
        waited = True
        await adapt_await(asyncio.wait(pending))


def _wrap(loop: asyncio.AbstractEventLoop, cf: concurrent.futures.Future[Any]) -> Any:
    """An asyncio future done when ``cf`` is, carrying nothing (an error in ``cf`` belongs to
    whoever waits for its result)."""
    fut = loop.create_future()

    def done(_: Any) -> None:
        try:
            loop.call_soon_threadsafe(_resolve, fut)
        except RuntimeError:
            pass  # the loop is closed: nobody waits any more

    cf.add_done_callback(done)
    return fut


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


def queue_callback(callback: Any) -> None:
    """Run ``callback()`` once, after the current backward pass has run all its nodes.

    Only valid during backward (inside a hook or a custom Function's backward). The callback may
    be ``async def``; its exception reaches the caller of backward.
    """
    gt = current_graph_task.get()
    if gt is None:
        raise RuntimeError(
            "Final callbacks can only be installed during the backward pass (from a hook or a "
            "backward function)."
        )
    gt.add_callback(callback)
