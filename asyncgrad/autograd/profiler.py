"""``ag.autograd.profiler``: per-node timings of the backward passes run inside a block."""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Sequence
from contextvars import Token
from dataclasses import dataclass
from time import perf_counter_ns
from types import TracebackType
from typing import Any, Final, Self

from ..engine.watch import NodeEvent, Recorder, recorders

__all__ = ["NodeEvent", "NodeStats", "profile"]

SORT_KEYS: Final = ("total", "self", "count", "mean")


@dataclass(frozen=True)
class NodeStats:
    """The evaluations of one kind of node (by name), summed: times in nanoseconds."""

    name: str
    count: int
    total_ns: int
    self_ns: int
    devices: tuple[str, ...]

    @property
    def mean_ns(self) -> float:
        return self.total_ns / self.count


class profile(Recorder):
    """Record every node evaluated by the backward passes started inside the block (in this task
    or thread, and the tasks it starts, as grad modes): name, start and end
    (``time.perf_counter_ns``), device, graph task, reentrant depth, thread, and whether it ran
    on a compute thread off the event loop. A pass started inside is recorded whole, even where
    it runs on past the block. Backward passes that are not profiled cost nothing more.

    A context manager, ``with`` or ``async with``.

    Args:
        enabled: record (False makes the block do nothing, as in torch).

    Example:
        >>> import asyncgrad as ag
        >>> x = ag.tensor([1.0, 2.0], requires_grad=True)
        >>> with ag.autograd.profiler.profile() as prof:
        ...     (x * x).sum().backward()
        >>> sorted({e.name for e in prof.events})
        ['AccumulateGrad', 'MulBackward0', 'SumBackward0']
    """

    def __init__(self, enabled: bool = True) -> None:
        super().__init__()
        if not isinstance(enabled, bool):
            raise TypeError(f"enabled must be a bool, got {enabled!r} ({type(enabled).__name__})")
        self.enabled = enabled
        self.start_ns = 0
        self._token: Token[tuple[Recorder, ...]] | None = None

    # ------------------------------------------------------------------ the block
    def __enter__(self) -> Self:
        if self._token is not None:
            raise RuntimeError("this profiler is already running; make a new profile()")
        self.start_ns = perf_counter_ns()
        if self.enabled:
            self._token = recorders.set((*recorders.get(), self))
        return self

    def __exit__(
        self,
        et: type[BaseException] | None,
        ev: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._token is not None:
            recorders.reset(self._token)
            self._token = None

    async def __aenter__(self) -> Self:
        return self.__enter__()

    async def __aexit__(
        self,
        et: type[BaseException] | None,
        ev: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(et, ev, tb)

    # ------------------------------------------------------------------ summaries
    def key_averages(self) -> list[NodeStats]:
        """One NodeStats per node name, in order of first appearance."""
        events = list(self.events)
        self_ns = _self_times(events)
        count: dict[str, int] = defaultdict(int)
        total: dict[str, int] = defaultdict(int)
        own: dict[str, int] = defaultdict(int)
        devices: dict[str, dict[str, None]] = defaultdict(dict)
        for e, s in zip(events, self_ns, strict=True):
            count[e.name] += 1
            total[e.name] += e.end_ns - e.start_ns
            own[e.name] += s
            devices[e.name][e.device] = None
        return [NodeStats(n, count[n], total[n], own[n], tuple(devices[n])) for n in count]

    def table(self, sort_by: str = "total", row_limit: int = 20) -> str:
        """A text table of the node kinds by ``sort_by`` ("total", "self", "count" or "mean"
        time), largest first, at most ``row_limit`` rows (all for a negative limit)."""
        if sort_by not in SORT_KEYS:
            raise ValueError(f"sort_by must be one of {', '.join(SORT_KEYS)}, got {sort_by!r}")
        stats = self.key_averages()
        key = {
            "total": lambda s: s.total_ns,
            "self": lambda s: s.self_ns,
            "count": lambda s: s.count,
            "mean": lambda s: s.mean_ns,
        }[sort_by]
        stats.sort(key=key, reverse=True)
        if row_limit >= 0:
            stats = stats[:row_limit]
        all_ns = sum(e.end_ns - e.start_ns for e in self.events) or 1
        headers = ["Name", "Count", "Total ms", "Self ms", "Mean us", "% total", "Devices"]
        rows = [
            [
                s.name,
                str(s.count),
                f"{s.total_ns / 1e6:.3f}",
                f"{s.self_ns / 1e6:.3f}",
                f"{s.mean_ns / 1e3:.1f}",
                f"{100 * s.total_ns / all_ns:.1f}",
                ",".join(s.devices),
            ]
            for s in stats
        ]
        widths = [max(len(r[i]) for r in [headers, *rows]) for i in range(len(headers))]

        def line(cells: Sequence[str]) -> str:
            return "  ".join(
                c.ljust(w) if i in (0, 6) else c.rjust(w)
                for i, (c, w) in enumerate(zip(cells, widths, strict=True))
            ).rstrip()

        sep = "-" * len(line(headers))
        n_tasks = len({e.graph_task for e in self.events})
        foot = f"{len(self.events)} node evaluations in {n_tasks} graph task"
        foot += "" if n_tasks == 1 else "s"
        return "\n".join([sep, line(headers), sep, *(line(r) for r in rows), sep, foot])

    def __str__(self) -> str:
        return self.table()

    # ------------------------------------------------------------------ Chrome trace
    def export_chrome_trace(self, path: str | os.PathLike[str]) -> None:
        """Write the events as Chrome trace JSON (loads in Perfetto and chrome://tracing).

        Process 1 has a track per device worker (a device on a thread: the event loop's, a
        blocking caller's, or a compute thread's for nodes run off the loop), process 2 a track
        per graph task. A track whose nodes overlap in time (nodes that await, or large nodes
        running at once on compute threads) is split into lanes, so no two events of one track
        overlap.
        """
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.chrome_trace(), f)

    def chrome_trace(self) -> dict[str, Any]:
        """The Chrome trace (a dict ready for ``json.dump``): See ``export_chrome_trace``."""
        events = sorted(self.events, key=lambda e: (e.start_ns, -e.end_ns))
        out: list[dict[str, Any]] = [
            _meta("process_name", 1, None, {"name": "asyncgrad device workers"}),
            _meta("process_name", 2, None, {"name": "asyncgrad graph tasks"}),
            _meta("process_sort_index", 1, None, {"sort_index": 1}),
            _meta("process_sort_index", 2, None, {"sort_index": 2}),
        ]
        groups: dict[tuple[int, Any], str] = {}
        for e in events:
            worker = (e.device, e.thread, e.off_loop)
            if (1, worker) not in groups:
                kind = "compute thread" if e.off_loop else "worker"
                groups[1, worker] = f"{e.device} {kind} ({e.thread})"
            if (2, e.graph_task) not in groups:
                groups[2, e.graph_task] = f"graph task {e.graph_task} (depth {e.depth})"
        # Lanes: per group, the end of the last event of each lane.
        lanes: dict[tuple[int, Any], list[int]] = {g: [] for g in groups}
        tids: dict[tuple[tuple[int, Any], int], int] = {}
        order = 0
        for e in events:
            args = {
                "device": e.device,
                "graph_task": e.graph_task,
                "depth": e.depth,
                "thread": e.thread,
                "off_loop": e.off_loop,
            }
            for g in ((1, (e.device, e.thread, e.off_loop)), (2, e.graph_task)):
                ends = lanes[g]
                lane = next((i for i, end in enumerate(ends) if end <= e.start_ns), len(ends))
                if lane == len(ends):
                    ends.append(e.end_ns)
                else:
                    ends[lane] = e.end_ns
                tid = tids.get((g, lane))
                if tid is None:
                    order += 1
                    tid = tids[g, lane] = order
                    name = groups[g] if lane == 0 else f"{groups[g]} [{lane + 1}]"
                    out.append(_meta("thread_name", g[0], tid, {"name": name}))
                    out.append(_meta("thread_sort_index", g[0], tid, {"sort_index": tid}))
                out.append(
                    {
                        "name": e.name,
                        "cat": "backward",
                        "ph": "X",
                        "ts": (e.start_ns - self.start_ns) / 1e3,
                        "dur": (e.end_ns - e.start_ns) / 1e3,
                        "pid": g[0],
                        "tid": tid,
                        "args": args,
                    }
                )
        return {"traceEvents": out, "displayTimeUnit": "ms"}


def _meta(name: str, pid: int, tid: int | None, args: dict[str, Any]) -> dict[str, Any]:
    ev: dict[str, Any] = {"name": name, "ph": "M", "pid": pid, "args": args}
    if tid is not None:
        ev["tid"] = tid
    return ev


def _self_times(events: list[NodeEvent]) -> list[int]:
    """Each event's time less the time of the deeper (reentrant) nodes that ran inside it on its
    thread: a node whose backward runs a nested backward pass does not count that pass's
    nodes as its own."""
    own = [e.end_ns - e.start_ns for e in events]
    by_thread: dict[str, list[int]] = defaultdict(list)
    for i, e in enumerate(events):
        by_thread[e.thread].append(i)
    for idx in by_thread.values():
        if len({events[i].depth for i in idx}) < 2:
            continue
        idx.sort(key=lambda i: (events[i].start_ns, -events[i].end_ns))
        stack: list[int] = []  # open events that may contain the next ones
        for i in idx:
            e = events[i]
            while stack and events[stack[-1]].end_ns <= e.start_ns:
                stack.pop()
            # The innermost open shallower event containing this one is its parent.
            for j in reversed(stack):
                p = events[j]
                if p.depth < e.depth and p.end_ns >= e.end_ns:
                    own[j] -= e.end_ns - e.start_ns
                    break
            stack.append(i)
    return own
