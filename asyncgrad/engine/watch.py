"""Watched graph tasks: the engine's path for backward passes in anomaly mode or profiled."""

from __future__ import annotations

import functools
import itertools
import threading
from contextvars import ContextVar, Token
from time import perf_counter_ns
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from .._build import mypyc_attr
from .._tensor import Tensor
from ..backend import current_stream, device_of, is_device_array, namespace
from ..graph.anomaly_mode import OFF, ON_CHECK_NAN, _anomaly, anomaly_mode, anomaly_note
from .offload import run

if TYPE_CHECKING:
    from ..graph.node import Node
    from .graph_task import GraphTask

# NOTE [Watched graph tasks]
# Anomaly mode and the profiler must cost nothing to a backward pass that uses neither. So the
# decision is made once per graph task, when it is built (GraphTask.__init__ calls `watch_for`): a
# pass built in anomaly mode or inside a profiler block gets a Watch, the others None. A device
# worker looks at it once each time it switches to another graph task, not per node; a watched graph
# task's nodes all go through `run_node` / `evaluate` (See NOTE [Evaluating a node] in evaluate.py),
# which time each node for the profilers and check its gradients for NaN. A node that runs off the
# loop (See NOTE [Large nodes]) is watched on its compute thread. While a graph task's nodes run,
# the worker also takes that graph task's anomaly mode and profilers (`enter_watch`): a worker's
# task is a copy of the context of whoever started it, and what a node builds (a graph under
# create_graph, a nested backward pass) must follow the graph task it runs for, not that context.
# Unless the worker's own context is watched, this too costs nothing for unwatched graph tasks. The
# forward tracebacks of anomaly mode cost the graph building one context-variable read per node (See
# NOTE [Anomaly mode is a context variable]).


class NodeEvent(NamedTuple):
    """One node's evaluation, as a profiler records it."""

    name: str
    start_ns: int  # time.perf_counter_ns()
    end_ns: int
    device: str
    graph_task: int  # a number per graph task, in the order they were built
    depth: int  # reentrant depth: See NOTE [Reentrant depth]
    thread: str  # the thread's name
    off_loop: bool  # whether it ran on a compute thread (See NOTE [Large nodes])


@mypyc_attr(allow_interpreted_subclasses=True)  # ag.autograd.profiler.profile is one
class Recorder:
    """What the engine reports a watched node to (``ag.autograd.profiler.profile``)."""

    def __init__(self) -> None:
        self.events: list[NodeEvent] = []

    def record(self, event: NodeEvent) -> None:
        self.events.append(event)  # list.append is atomic: compute threads record too


# The profilers recording in this task or thread (a context variable, as anomaly mode).
_recorders: ContextVar[tuple[Recorder, ...]] = ContextVar("asyncgrad_profilers", default=())
recorders: Final = _recorders
_numbers = itertools.count(1)


class Watch:
    """How a watched graph task is watched (See NOTE [Watched graph tasks])."""

    __slots__ = ("anomaly", "nan_flags", "number", "recorders")

    def __init__(self, anomaly: int, recorders: tuple[Recorder, ...]) -> None:
        self.anomaly = anomaly
        self.recorders = recorders
        self.number = next(_numbers)
        # The NaN checks left to read at the end of the pass: See NOTE [NaN checks off the loop].
        self.nan_flags: list[tuple[Node, int, Any, Any]] | None = None

    def done(
        self, gt: GraphTask, node: Node, out: Any, start_ns: int, off_loop: bool = False
    ) -> None:
        """``node`` has run from ``start_ns`` to now and returned ``out``."""
        end_ns = perf_counter_ns()
        if self.recorders:
            dev = node._device
            ev = NodeEvent(
                node.name(),
                start_ns,
                end_ns,
                "cpu" if dev is None else str(dev),
                self.number,
                gt.depth,
                threading.current_thread().name,
                off_loop,
            )
            for r in self.recorders:
                r.record(ev)
        if self.anomaly == ON_CHECK_NAN and out is not None:
            check_nan(node, out, gt)


def watch_for() -> Watch | None:
    """The Watch of a graph task built now in this context, or None."""
    am = anomaly_mode()
    recs = _recorders.get()
    if not am and not recs:
        return None
    return Watch(am, recs)


def enter_watch(w: Watch | None) -> tuple[Token[int], Token[tuple[Recorder, ...]]]:
    """In a device worker: make anomaly mode and the profilers those of the graph task whose
    nodes run now (``w`` is its Watch), so that what its nodes build and start (graphs recorded
    under ``create_graph``, nested backward passes) follows it rather than the worker's context,
    which is a copy of the one that started the worker."""
    if w is None:
        return _anomaly.set(OFF), _recorders.set(())
    return _anomaly.set(w.anomaly), _recorders.set(w.recorders)


def exit_watch(tokens: tuple[Token[int], Token[tuple[Recorder, ...]]]) -> None:
    _recorders.reset(tokens[1])
    _anomaly.reset(tokens[0])


# NOTE [NaN checks off the loop]
# Anomaly mode checks every gradient a node returns for NaN, which reads it on the host. For a
# CUDA array that read waits for the device, and in an awaited pass it would block the event loop
# at every node. There the check stays on the device: a flag per gradient (``isnan(g).any()``,
# queued on the node's stream), read when all nodes have run, by a final callback of the pass that
# reads the flags on a compute thread (See NOTE [Work off the loop] in offload.py). The first flag
# set raises the error the immediate check raises, with the same notes, naming its node; the pass
# has run to its end by then instead of stopping at that node. A blocking pass and CPU gradients
# are checked at once, as before.
def check_nan(node: Node, grads: Any, gt: GraphTask | None = None) -> None:
    """Raise torch's error if a gradient ``node`` returned holds NaN (for a CUDA gradient of an
    awaited pass ``gt``, later: See NOTE [NaN checks off the loop])."""
    for i, g in enumerate(grads):
        if g is None:
            continue
        a = g._array if isinstance(g, Tensor) else g
        if a.dtype.kind not in "fc":
            continue
        xp = namespace(a)
        if gt is not None and gt.loop is not None and is_device_array(a):
            _defer_nan_check(gt, node, i, xp.isnan(a).any(), current_stream(device_of(a)))
            continue
        # A sum is NaN when any element is (and for +inf with -inf): one pass, no temporary;
        # only then look element by element.
        if bool(xp.isnan(a.sum())) and bool(xp.isnan(a).any()):
            raise _nan_error(node, i)


def _nan_error(node: Node, i: int) -> RuntimeError:
    return RuntimeError(f"Function '{node.name()}' returned nan values in its {i}th output.")


def _defer_nan_check(gt: GraphTask, node: Node, i: int, flag: Any, stream: Any) -> None:
    w = gt.watch
    assert w is not None
    flags = w.nan_flags
    if flags is None:
        flags = w.nan_flags = []
        gt.add_callback(functools.partial(_read_nan_flags, flags))
    flags.append((node, i, flag, stream))


def _first_nan(flags: list[tuple[Node, int, Any, Any]]) -> tuple[Node, int] | None:
    """On a compute thread: the first flag that is set (each read after its stream ran)."""
    for node, i, flag, stream in flags:
        if bool(flag.get(stream=stream)):
            return node, i
    return None


async def _read_nan_flags(flags: list[tuple[Node, int, Any, Any]]) -> None:
    found = await run(_first_nan, flags)
    flags.clear()
    if found is not None:
        node, i = found
        err = _nan_error(node, i)
        err.add_note(f"(raised while computing the backward of {node.name()})")
        err.add_note(anomaly_note(node))
        raise err
