"""Device workers: drain a ReadyQueue, evaluate nodes, route their gradients onward."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Generator
from heapq import heappop, heappush
from time import perf_counter
from typing import TYPE_CHECKING, Any, Final

from ..autograd.grad_mode import _grad_enabled
from ..autograd.graph import AccumulateGrad, Node
from .input_buffer import InputBuffer, accumulate
from .ready_queue import next_tie
from .reentrant import config, current_graph_task, run_blocking

if TYPE_CHECKING:
    from .graph_task import GraphTask
    from .ready_queue import ReadyQueue

_isawaitable = inspect.isawaitable

# See NOTE [Yield behind timers]; tiny enough to add no measurable delay.
YIELD_DELAY_S: Final = 1e-6


def start_worker(queue: ReadyQueue) -> None:
    assert queue.loop is not None
    queue.worker = queue.loop.create_task(
        run_worker(queue), name=f"asyncgrad-worker-{queue.device}"
    )


async def run_worker(queue: ReadyQueue) -> None:
    """Drain ``queue`` in slices of ``config.slice_s`` seconds, yielding to the loop in between,
    and end when it is empty (the next push starts a new worker)."""
    heap = queue.heap
    try:
        while heap:
            drain(queue, config.slice_s)
            if heap:
                # NOTE [Yield behind timers]
                # sleep(0) would requeue the worker ahead of timers that fell due meanwhile (the
                # loop moves due timers behind already-ready callbacks), so a ticker would wait a
                # second slice. A due-now timer sorts behind every earlier timer instead.
                await asyncio.sleep(YIELD_DELAY_S)
    finally:
        queue.worker = None
        if heap:  # stopped from outside (the loop is closing): fail what is left
            for gt in {e[4] for e in heap}:
                gt.fail(RuntimeError("the asyncgrad engine worker was stopped"))
            heap.clear()


def drain(queue: ReadyQueue, budget: float) -> None:
    """Evaluate ready nodes until the heap is empty or ``budget`` seconds have passed.

    # NOTE [Direct successor]
    # Routing a plain node's gradients is inlined here. When a successor becomes ready with a key
    # that would sort before everything in the heap anyway, it is run next without the round trip
    # through the heap, so a chain of nodes costs no heap operations. The ready order (see
    # NOTE [Ready order]) is unchanged: a successor is only taken directly when it is the minimum.
    """
    heap = queue.heap
    deadline = perf_counter() + budget
    count = 0
    cur: GraphTask | None = None
    mode_tok = gt_tok = None
    direct: tuple[int, Node, list[Any]] | None = None
    try:
        while True:
            if direct is not None:
                _, node, buf = direct
                direct = None
                gt = cur  # type: ignore[assignment]
            elif heap:
                _, _, node, buf, gt = heappop(heap)
                if gt.done:
                    continue
                if gt is not cur:
                    if mode_tok is not None:
                        _grad_enabled.reset(mode_tok)
                        current_graph_task.reset(gt_tok)
                    mode_tok = _grad_enabled.set(gt.create_graph)
                    gt_tok = current_graph_task.set(gt)
                    cur = gt
                    create = gt.create_graph
                    keep = gt.keep_graph
                    deps = gt.dependencies
                    not_ready = gt.not_ready
                    key_base = gt.key_base
            else:
                break
            try:
                if node._hooks is not None or node._async_apply:
                    gen = evaluate_full(gt, node, buf)
                    try:
                        aw = gen.send(None)
                    except StopIteration:
                        pass
                    else:
                        # The node awaits something (an async hook or backward): finish it in
                        # its own task, or block on a helper loop if nobody is serving a loop.
                        if queue.loop is not None:
                            _spawn(queue, gt, node, gen, aw)
                            continue
                        _finish_blocking(gen, aw)
                elif gt.exec_info is not None:
                    evaluate(gt, node, buf)
                else:
                    # The hot path: a plain node in a plain backward.
                    out = node.apply(buf, None, create)
                    if not keep:
                        node.release_variables()
                    i = -1
                    for e in node._next_edges:
                        i += 1
                        if e is None:
                            continue
                        nxt = e[0]
                        d = deps[nxt]
                        if d != 1:
                            deps[nxt] = d - 1
                            nbuf = not_ready.get(nxt)
                            if nbuf is None:
                                nbuf = not_ready[nxt] = InputBuffer(len(nxt._input_meta))
                            accumulate(nbuf, e[1], out[i], create)
                            continue
                        # Ready (its count stays at 1: no more gradients can arrive).
                        nbuf = not_ready.pop(nxt, None) if not_ready else None
                        if nbuf is None:
                            if len(nxt._input_meta) == 1:
                                nbuf = [out[i]]
                            else:
                                nbuf = InputBuffer(len(nxt._input_meta))
                                nbuf[e[1]] = out[i]
                        else:
                            accumulate(nbuf, e[1], out[i], create)
                        gt.outstanding += 1
                        key = key_base - nxt._sequence_nr
                        if direct is None:
                            if not heap or key < heap[0][0]:
                                direct = (key, nxt, nbuf)
                                continue
                        elif key < direct[0]:
                            heappush(heap, (direct[0], next_tie(), direct[1], direct[2], gt))
                            direct = (key, nxt, nbuf)
                            continue
                        heappush(heap, (key, next_tie(), nxt, nbuf, gt))
                    # Drop our reference now: AccumulateGrad steals an array that nobody else
                    # holds instead of copying it (see AccumulateGrad.apply).
                    out = nbuf = None
            except Exception as e:
                gt.fail(e, node)
                direct = None
                continue
            gt.outstanding -= 1
            if gt.outstanding == 0:
                on_drained(gt)
            count += 1
            if count == 16:
                count = 0
                if perf_counter() > deadline:
                    break
    finally:
        if direct is not None:
            assert cur is not None
            heappush(heap, (direct[0], next_tie(), direct[1], direct[2], cur))
        if mode_tok is not None:
            _grad_enabled.reset(mode_tok)
            current_graph_task.reset(gt_tok)  # type: ignore[arg-type]


def evaluate(gt: GraphTask, node: Node, buf: list[Any]) -> None:
    """A node with no hooks and a synchronous apply, under exec_info (grad() or inputs=)."""
    exec_info = gt.exec_info
    assert exec_info is not None
    info = exec_info[node]
    if info.captures:
        for nr, idx in info.captures:
            gt.captured[idx] = buf[nr]
    if not info.needed:
        return
    needed = [e is not None and e[0] in exec_info for e in node._next_edges]
    out = node.apply(buf, needed, gt.create_graph)
    if not gt.keep_graph:
        node.release_variables()
    route(gt, node, out)


def route(gt: GraphTask, node: Node, out: Any) -> None:
    """Hand each gradient in ``out`` to the node its edge points at; push nodes that are ready."""
    deps = gt.dependencies
    exec_info = gt.exec_info
    queue = gt.queue
    assert queue is not None
    i = -1
    for e in node._next_edges:
        i += 1
        if e is None:
            continue
        nxt, nr = e
        if exec_info is not None and nxt not in exec_info:
            continue
        d = deps[nxt]
        if d == 1:  # ready; the count stays at 1 (no more gradients can arrive)
            buf = gt.not_ready.pop(nxt, None) if gt.not_ready else None
            if buf is None:
                n_in = len(nxt._input_meta)
                if n_in == 1:
                    buf = [out[i]]
                else:
                    buf = InputBuffer(n_in)
                    buf[nr] = out[i]
            else:
                accumulate(buf, nr, out[i], gt.create_graph)
            if queue.worker is None and queue.loop is not None:
                queue.push(gt, nxt, buf)
            else:
                heappush(queue.heap, (gt.key_base - nxt._sequence_nr, next_tie(), nxt, buf, gt))
                gt.outstanding += 1
        else:
            deps[nxt] = d - 1
            buf = gt.not_ready.get(nxt)
            if buf is None:
                buf = gt.not_ready[nxt] = InputBuffer(len(nxt._input_meta))
            accumulate(buf, nr, out[i], gt.create_graph)


def on_drained(gt: GraphTask) -> None:
    """All nodes of ``gt`` have run: run its final callbacks, then complete it."""
    if gt.loop is None:
        return  # a blocking caller completes it after draining (engine.execute_sync)
    if gt.callbacks:
        task = gt.loop.create_task(_run_callbacks(gt))
        gt.inflight.add(task)
        task.add_done_callback(gt.inflight.discard)
        if gt.queue is not None:
            gt.queue.tasks.add(task)
            task.add_done_callback(gt.queue.tasks.discard)
    else:
        gt.finish()


async def _run_callbacks(gt: GraphTask) -> None:
    current_graph_task.set(gt)
    try:
        while gt.callbacks and not gt.done:
            cb = gt.callbacks.pop(0)
            r = cb()
            if _isawaitable(r):
                await r
    except Exception as e:
        gt.fail(e)
        return
    gt.finish()


def run_callbacks_blocking(gt: GraphTask) -> None:
    tok = current_graph_task.set(gt)
    try:
        while gt.callbacks:
            cb = gt.callbacks.pop(0)
            r = cb()
            if _isawaitable(r):
                run_blocking(lambda r=r: _await(r))
    finally:
        current_graph_task.reset(tok)


async def _await(aw: Any) -> Any:
    return await aw


# ----------------------------------------------------------------------------------- full path
def _user(g: Any, create: bool) -> Any:
    from ..tensor import Tensor

    if g is None or create:
        return g
    return Tensor._wrap(g)


def _from_user(r: Any, node: Node, nr: int, what: str, create: bool) -> Any:
    from ..tensor import Tensor

    if r is None:
        return None
    if not isinstance(r, Tensor):
        raise TypeError(
            f"{what} for input {nr} of {node.name()} must return a Tensor or None, "
            f"got {type(r).__name__}"
        )
    meta = node._input_meta[nr] if nr < len(node._input_meta) else None
    if meta is not None and tuple(r.shape) != tuple(meta[0]):
        raise RuntimeError(
            f"{what} has changed the size of value: {node.name()} input {nr} expects a gradient "
            f"of shape {tuple(meta[0])} but the hook returned shape {tuple(r.shape)}"
        )
    if meta is not None and r.dtype != meta[1]:
        raise RuntimeError(
            f"{what} has changed the type of value: {node.name()} input {nr} expects a "
            f"gradient of dtype {meta[1]} but the hook returned {r.dtype}"
        )
    return r if create else r._array


def _hook_name(fn: Any) -> str:
    return f"hook '{getattr(fn, '__qualname__', type(fn).__name__)}'"


def evaluate_full(gt: GraphTask, node: Node, buf: list[Any]) -> Generator[Any, Any, None]:
    """Evaluate a node with hooks and/or an async apply. Yields each awaitable it meets (the
    caller awaits it and sends the result back), so one body serves the async worker and the
    blocking driver."""
    create = gt.create_graph
    hooks = node._hooks
    if hooks is not None:
        # Tensor hooks, then retains_grad, then the node's pre-hooks (PyTorch's order).
        for nr, fns in list(hooks.tensor_pre.items()):
            for fn in list(fns.values()):
                if nr >= len(buf) or buf[nr] is None:
                    break
                r = fn(_user(buf[nr], create))
                if _isawaitable(r):
                    r = yield r
                if r is not None:
                    buf[nr] = _from_user(r, node, nr, _hook_name(fn), create)
        for nr, ref in list(hooks.retains.items()):
            t = ref()
            if t is not None and nr < len(buf) and buf[nr] is not None:
                _retain(t, buf[nr], create)
    exec_info = gt.exec_info
    needed = None
    if exec_info is not None:
        info = exec_info[node]
        for nr, idx in info.captures:
            gt.captured[idx] = buf[nr]
        if not info.needed:
            return  # captured only: tensor hooks ran, the node's own hooks do not (as torch)
        needed = [e is not None and e[0] in exec_info for e in node._next_edges]
    if hooks is not None:
        if hooks.pre:
            grads = tuple(_user(g, create) for g in buf)
            for fn in list(hooks.pre.values()):
                r = fn(grads)
                if _isawaitable(r):
                    r = yield r
                if r is not None:
                    r = tuple(r)
                    if len(r) != len(buf):
                        raise RuntimeError(
                            f"{_hook_name(fn)} on {node.name()} returned {len(r)} gradients, "
                            f"expected {len(buf)}"
                        )
                    grads = r
            buf = [_from_user(g, node, i, _hook_name(fn), create) for i, g in enumerate(grads)]
    grad_outputs = tuple(buf) if hooks is not None and hooks.post else ()
    out = node.apply(buf, needed, create)
    if _isawaitable(out):
        out = yield out
    if not gt.keep_graph:
        node.release_variables()
    if hooks is not None:
        if hooks.post:
            gi = tuple(_user(g, create) for g in out)
            go = tuple(_user(g, create) for g in grad_outputs)
            for fn in list(hooks.post.values()):
                r = fn(gi, go)
                if _isawaitable(r):
                    r = yield r
                if r is not None:
                    r = tuple(r)
                    if len(r) != len(gi):
                        raise RuntimeError(
                            f"{_hook_name(fn)} on {node.name()} returned {len(r)} gradients, "
                            f"expected {len(gi)}"
                        )
                    gi = r
            out = [_post_from_user(g, node, i, create) for i, g in enumerate(gi)]
        if isinstance(node, AccumulateGrad) and hooks.post_acc:
            for fn in list(hooks.post_acc.values()):
                r = fn(node.variable)
                if _isawaitable(r):
                    yield r
    route(gt, node, out)


def _post_from_user(g: Any, node: Node, i: int, create: bool) -> Any:
    from ..tensor import Tensor

    if g is None:
        return None
    if not isinstance(g, Tensor):
        raise TypeError(f"a post hook of {node.name()} returned a {type(g).__name__}, not a Tensor")
    e = node._next_edges[i]
    if e is not None:
        shape = e[0]._input_meta[e[1]][0]
        if tuple(g.shape) != tuple(shape):
            raise RuntimeError(
                f"a post hook of {node.name()} has changed the size of value: gradient {i} must "
                f"have shape {tuple(shape)}, got {tuple(g.shape)}"
            )
    return g if create else g._array


def _retain(t: Any, g: Any, create: bool) -> None:
    from ..tensor import Tensor

    if t._grad is None:
        t._grad = g.clone() if create else Tensor._wrap(g.copy())
    else:
        t._grad = t._grad + (g if create else Tensor._wrap(g))


def _spawn(queue: ReadyQueue, gt: GraphTask, node: Node, gen: Any, aw: Any) -> None:
    assert queue.loop is not None
    task = queue.loop.create_task(_resume(gt, node, gen, aw))
    gt.inflight.add(task)
    task.add_done_callback(gt.inflight.discard)
    queue.tasks.add(task)
    task.add_done_callback(queue.tasks.discard)


async def _resume(gt: GraphTask, node: Node, gen: Any, aw: Any) -> None:
    try:
        while True:
            try:
                val = await aw
            except asyncio.CancelledError:
                raise
            except Exception as e:
                try:
                    aw = gen.throw(e)
                except StopIteration:
                    break
                continue
            try:
                aw = gen.send(val)
            except StopIteration:
                break
    except asyncio.CancelledError:
        gen.close()
        raise
    except Exception as e:
        gt.fail(e, node)
        return
    if gt.done:
        return
    gt.outstanding -= 1
    if gt.outstanding == 0:
        on_drained(gt)


def _finish_blocking(gen: Any, aw: Any) -> None:
    """Finish a node's evaluation from sync code: each awaitable runs on a helper loop."""
    while True:
        try:
            val = run_blocking(lambda aw=aw: _await(aw))
        except Exception as e:
            try:
                aw = gen.throw(e)
            except StopIteration:
                return
            continue
        try:
            aw = gen.send(val)
        except StopIteration:
            return
