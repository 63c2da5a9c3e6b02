"""ReadyQueue: one device's heap of nodes whose gradients are all in."""

from __future__ import annotations

import asyncio
import heapq
import itertools
from heapq import heappush
from typing import TYPE_CHECKING, Any, Final

from . import metrics

if TYPE_CHECKING:
    from ..backend import Device
    from ..graph.node import Node
    from .graph_task import GraphTask

# NOTE [Ready order]
# Heap entries are (key, tie, node, input_buffer, graph_task), smallest first, with
#   key = -(priority << 80 | reentrant_depth << 64 | sequence_nr)
# so a higher graph-task priority runs first, then deeper reentrant work (a nested backward must
# finish before the node waiting on it can), then the newest node (largest sequence_nr: a node's
# outputs feed older nodes, and AccumulateGrad has the largest so gradients land early). The
# counter `tie` breaks equal keys in push order, never by comparing nodes.
PRIORITY_SHIFT: Final = 80
DEPTH_SHIFT: Final = 64

_tie = itertools.count()
next_tie = _tie.__next__

Entry = tuple[int, int, "Node", list[Any], "GraphTask"]


def key_base(priority: int, depth: int) -> int:
    return -((priority << PRIORITY_SHIFT) + (depth << DEPTH_SHIFT))


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

    __slots__ = ("device", "heap", "label", "launched", "loop", "stats", "tasks", "worker")

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

    def __len__(self) -> int:
        return len(self.heap)
