"""Engine metrics per event loop (``ag.autograd.engine.stats()``; each loop's scheduler holds
its own): counters cheap enough to be always on.

NOTE [Engine metrics]
Each event loop has one ``Stats``; graph tasks run by blocking callers (no loop) count in one
more, ``BLOCKING``. A graph task counts as running from when it is built until it ends, and then
as completed, failed or cancelled; one held back by the cap on running graph tasks counts as
waiting until it is let in (See NOTE [One scheduler], 6). A device worker adds its nodes and the
time it spent running them once per slice (not per node), and the longest slice is the longest the
engine held the loop at once; preparing a graph task counts the same way (a node run on a
compute thread adds its time but holds no loop). A blocking ``backward()`` called on a thread
whose loop is running holds that loop for the whole pass, which counts as a stall of that loop
too. Counters only ever grow, except ``running`` and ``waiting``; ``reset_stats()`` starts them
afresh.
"""

from __future__ import annotations

from typing import Any


class Stats:
    __slots__ = (
        "cancelled",
        "completed",
        "failed",
        "longest_stall_s",
        "node_time_s",
        "nodes",
        "running",
        "waiting",
    )

    def __init__(self) -> None:
        self.running = 0
        self.waiting = 0  # See NOTE [One scheduler], 6
        self.completed = 0
        self.cancelled = 0
        self.failed = 0
        self.nodes: dict[str, int] = {}
        self.node_time_s: dict[str, float] = {}
        self.longest_stall_s = 0.0

    def add_slice(self, device: str, nodes: int, seconds: float) -> None:
        """A worker ran ``nodes`` nodes of ``device`` in one stretch of ``seconds``."""
        self.nodes[device] = self.nodes.get(device, 0) + nodes
        self.node_time_s[device] = self.node_time_s.get(device, 0.0) + seconds
        if seconds > self.longest_stall_s:
            self.longest_stall_s = seconds

    def add_off_loop(self, seconds: float) -> None:
        """A CPU node ran for ``seconds`` on a compute thread (counted as a node elsewhere)."""
        self.node_time_s["cpu"] = self.node_time_s.get("cpu", 0.0) + seconds

    def stall(self, seconds: float) -> None:
        if seconds > self.longest_stall_s:
            self.longest_stall_s = seconds

    def reset(self) -> None:
        """Start the counters afresh; graph tasks still running or waiting stay counted."""
        running, waiting = self.running, self.waiting
        self.__init__()  # type: ignore[misc]
        self.running, self.waiting = running, waiting

    def snapshot(self) -> dict[str, Any]:
        return {
            "graph_tasks": {
                "running": self.running,
                "waiting": self.waiting,
                "completed": self.completed,
                "failed": self.failed,
                "cancelled": self.cancelled,
            },
            "nodes": dict(self.nodes),
            "time_in_nodes_s": dict(self.node_time_s),
            "longest_stall_s": self.longest_stall_s,
        }


# Blocking callers' (no loop), and passes awaited from trio (See NOTE [Other event loops]).
BLOCKING = Stats()
