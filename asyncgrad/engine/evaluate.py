"""One node's evaluation (hooks, capture, apply, release, watching), shared by every driver.

NOTE [Evaluating a node]
Two functions evaluate a node, whoever runs it (a device worker, a caller running its own pass,
a compute thread, a task resuming a node that awaited, a blocking caller):
  - ``run_node`` for a node with no hooks and a synchronous apply: the captures and pruning of
    exec_info (``grad()``, ``inputs=``), apply, release, and the watch of a watched graph task
    (See NOTE [Watched graph tasks]). The device worker inlines its plainest case (no
    exec_info, unwatched: apply and release), the hot path;
  - ``evaluate`` for a node with hooks or an async apply: a generator that yields each
    awaitable it meets (an async hook, an async backward) and receives its result back, so the
    same body serves a device worker (which finishes an awaiting node in its own task) and a
    blocking caller (which awaits on a helper loop).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Generator
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any

from .._build import adapt_await
from ..backend import cuda
from ..graph.accumulate_grad import AccumulateGrad
from ..graph.hooks import from_user, hook_name, post_from_user, retain, to_user
from ..graph.local_state import call_user
from . import streams
from .pools import run_blocking
from .reentrant import current_graph_task

if TYPE_CHECKING:
    from ..graph.hooks import Hooks
    from ..graph.node import Node
    from .graph_task import GraphTask

isawaitable = inspect.isawaitable


def run_node(gt: GraphTask, node: Node, buf: list[Any], off_loop: bool = False) -> Any:
    """Evaluate a node with no hooks and a synchronous apply (See NOTE [Evaluating a node]);
    ``off_loop``: on a compute thread. Returns the gradients to route, or None when the node
    only captures."""
    w = gt.watch
    t0 = 0 if w is None else perf_counter_ns()
    exec_info = gt.exec_info
    needed = None
    if exec_info is not None:
        info = exec_info[node]
        if info.captures:
            for nr, idx in info.captures:
                gt.captured[idx] = buf[nr]
        if not info.needed:
            if w is not None:
                w.done(gt, node, None, t0, off_loop)
            return None
        needed = []  # (a loop, not a comprehension: no frame of its own before Python 3.12)
        for e in node._next_edges:
            needed.append(e is not None and e[0] in exec_info)
    out = node.apply(buf, needed, gt.create_graph)
    if not gt.keep_graph:
        node.release_variables()
    if w is not None:
        w.done(gt, node, out, t0, off_loop)
    return out


def evaluate(gt: GraphTask, node: Node, buf: list[Any]) -> Generator[Any, Any, Any]:
    """Evaluate a node with hooks and/or an async apply (See NOTE [Evaluating a node]); returns
    the gradients to route (None when the node only captures). A watched graph task's node is
    timed awaits included."""
    w = gt.watch
    if w is None:
        return (yield from _evaluate(gt, node, buf))
    t0 = perf_counter_ns()
    out = yield from _evaluate(gt, node, buf)
    w.done(gt, node, out, t0)
    return out


def _evaluate(gt: GraphTask, node: Node, buf: list[Any]) -> Generator[Any, Any, Any]:
    create = gt.create_graph
    hooks = node._hooks
    if hooks is not None:
        # Tensor hooks, then retains_grad, then the node's pre-hooks (PyTorch's order). The
        # tensor hooks of all outputs run in the order they were registered (their handles'
        # ids), those of an output that got no gradient with None, as in torch.
        if hooks.tensor_pre:
            for _, nr, fn in _tensor_hooks(hooks):
                g = buf[nr]
                r = call_user(fn, to_user(g, create))
                if isawaitable(r):
                    r = yield r
                if r is not None:
                    if g is None:
                        raise RuntimeError("can't replace a None gradient with a non-None value")
                    buf[nr] = from_user(r, node, nr, hook_name(fn), create)
        for nr, ref in list(hooks.retains.items()):
            t = ref()
            if t is not None and nr < len(buf) and buf[nr] is not None:
                retain(t, buf[nr], create)
    exec_info = gt.exec_info
    needed = None
    if exec_info is not None:
        info = exec_info[node]
        for nr, idx in info.captures:
            gt.captured[idx] = buf[nr]
        if not info.needed:
            return None  # captured only: tensor hooks ran, the node's own hooks do not (as torch)
        needed = [e is not None and e[0] in exec_info for e in node._next_edges]
    if hooks is not None and hooks.pre:
        grads = tuple(to_user(g, create) for g in buf)
        for fn in list(hooks.pre.values()):
            r = call_user(fn, grads)
            if isawaitable(r):
                r = yield r
            if r is not None:
                r = tuple(r)
                if len(r) != len(buf):
                    raise RuntimeError(
                        f"{hook_name(fn)} on {node.name()} returned {len(r)} gradients, "
                        f"expected {len(buf)}"
                    )
                grads = r
        buf = [from_user(g, node, i, hook_name(fn), create) for i, g in enumerate(grads)]
    grad_outputs = tuple(buf) if hooks is not None and hooks.post else ()
    out = node.apply(buf, needed, create)
    if isawaitable(out):
        out = yield out
    if not gt.keep_graph:
        node.release_variables()
    if hooks is not None:
        if hooks.post:
            gi = tuple(to_user(g, create) for g in out)
            go = tuple(to_user(g, create) for g in grad_outputs)
            for fn in list(hooks.post.values()):
                r = call_user(fn, gi, go)
                if isawaitable(r):
                    r = yield r
                if r is not None:
                    r = tuple(r)
                    if len(r) != len(gi):
                        raise RuntimeError(
                            f"{hook_name(fn)} on {node.name()} returned {len(r)} gradients, "
                            f"expected {len(gi)}"
                        )
                    gi = r
            out = [post_from_user(g, node, i, create) for i, g in enumerate(gi)]
        if isinstance(node, AccumulateGrad) and hooks.post_acc:
            for fn in list(hooks.post_acc.values()):
                r = call_user(fn, node.variable)
                if isawaitable(r):
                    r = yield r
                if r is not None:
                    raise RuntimeError("Tensor post accumulate grad hooks should return None.")
    return out


def _tensor_hooks(hooks: Hooks) -> list[tuple[int, int, Any]]:
    """``(id, output, hook)`` of every tensor hook of a node, in the order they were
    registered."""
    out = [
        (hid, nr, fn) for nr, fns in list(hooks.tensor_pre.items()) for hid, fn in list(fns.items())
    ]
    out.sort(key=_first)
    return out


def _first(entry: tuple[int, int, Any]) -> int:
    return entry[0]


def finish_blocking(gen: Generator[Any, Any, Any], aw: Any) -> Any:
    """Finish a node's evaluation from sync code: each awaitable runs on a helper loop.
    Returns the generator's result."""
    while True:
        try:
            val = run_blocking(functools.partial(_await, aw))
        except BaseException as e:
            try:
                aw = gen.throw(e)
            except StopIteration as stop:
                return stop.value
            continue
        try:
            aw = gen.send(val)
        except StopIteration as stop:
            return stop.value


async def _await(aw: Any) -> Any:
    return await adapt_await(aw)


# ----------------------------------------------------------------------------- final callbacks
def gpu_waits(gt: GraphTask) -> list[tuple[Any, int]]:
    """Finish ``gt``'s streams (the caller's wait for them); the ``(event, device index)``
    pairs it must wait for before it ends, as NOTE [Passes in flight] in
    asyncgrad/backend/cuda.py says: its own when it returns gradients to read, else those of
    the older passes in flight beyond the bound."""
    st = gt.streams
    if st is None or not st.used:
        return []
    ends = streams.finish(st)
    return cuda.pending(ends) if gt.captured else cuda.pass_queued(ends)


async def complete(gt: GraphTask, waits: list[tuple[Any, int]] | None = None) -> None:
    """Run ``gt``'s final callbacks (``queue_callback``) on its loop, wait for its GPU work
    (``waits``, when they are known already: See gpu_waits), then complete it."""
    current_graph_task.set(gt)
    try:
        if waits is None:
            while gt.callbacks and not gt.done:
                cb = gt.callbacks.pop(0)
                r = call_user(cb)
                if isawaitable(r):
                    await adapt_await(r)
            waits = [] if gt.done else gpu_waits(gt)
        if waits:
            await adapt_await(cuda.wait_until_done(waits))
    except BaseException as e:
        if own_cancellation(e):
            raise
        gt.fail(e)
        return
    gt.finish()


def run_callbacks_blocking(gt: GraphTask) -> None:
    tok = current_graph_task.set(gt)
    try:
        while gt.callbacks:
            cb = gt.callbacks.pop(0)
            r = call_user(cb)
            if isawaitable(r):
                run_blocking(functools.partial(_await, r))
    finally:
        current_graph_task.reset(tok)


def own_cancellation(e: BaseException) -> bool:
    """Whether ``e`` is the running task being cancelled (not a cancelled future it awaited)."""
    if not isinstance(e, asyncio.CancelledError):
        return False
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0
