"""ag.autograd.profiler.profile: per-node events, the table, and the Chrome trace."""

from __future__ import annotations

import asyncio
import itertools
import json
import math
import threading
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import asyncgrad as ag
from asyncgrad.autograd import engine
from asyncgrad.autograd.profiler import profile


def _node_names(t: ag.Tensor) -> Counter[str]:
    """The nodes of t's backward graph, by name."""
    seen: set[Any] = set()
    stack = [t.grad_fn]
    while stack:
        n = stack.pop()
        if n is None or n in seen:
            continue
        seen.add(n)
        stack.extend(f for f, _ in n.next_functions)
    return Counter(n.name() for n in seen)


def _graph(seed: int) -> tuple[ag.Tensor, ag.Tensor]:
    ag.manual_seed(seed)
    w = ag.randn(4, 3, requires_grad=True)
    x = ag.randn(5, 4)
    h = (x @ w).tanh()
    return w, (h * h).sum() + h.exp().mean() * float(seed)


def test_records_every_node_of_a_blocking_backward() -> None:
    _w, loss = _graph(1)
    want = _node_names(loss)
    with profile() as prof:
        loss.backward()
    assert Counter(e.name for e in prof.events) == want
    main = threading.current_thread().name
    for e in prof.events:
        assert prof.start_ns <= e.start_ns <= e.end_ns
        assert e.device == "cpu"
        assert e.depth == 0
        assert e.thread == main
        assert not e.off_loop
    assert len({e.graph_task for e in prof.events}) == 1


def test_table() -> None:
    _, loss = _graph(2)
    with profile() as prof:
        loss.backward(retain_graph=True)
    text = prof.table(row_limit=3)
    lines = text.splitlines()
    assert lines[1].split() == [
        "Name",
        "Count",
        "Total",
        "ms",
        "Self",
        "ms",
        "Mean",
        "us",
        "%",
        "total",
        "Devices",
    ]
    rows = lines[3:-2]
    assert len(rows) == 3
    totals = [float(r.split()[2]) for r in rows]
    assert totals == sorted(totals, reverse=True)
    by_count = prof.table(sort_by="count", row_limit=-1)
    assert "MulBackward0" in by_count
    assert "AccumulateGrad" in by_count
    assert lines[-1] == f"{len(prof.events)} node evaluations in 1 graph task"
    stats = {s.name: s for s in prof.key_averages()}
    assert stats["MulBackward0"].count == _node_names(loss)["MulBackward0"] == 2
    assert str(prof) == prof.table()
    with pytest.raises(ValueError, match="sort_by must be one of total, self, count, mean"):
        prof.table(sort_by="cpu")


def test_nothing_recorded_outside_or_when_disabled() -> None:
    _, loss = _graph(3)
    with profile(enabled=False) as off:
        loss.backward(retain_graph=True)
    assert off.events == []
    with profile() as prof:
        pass
    loss.backward()
    assert prof.events == []
    with pytest.raises(TypeError, match="enabled must be a bool"):
        profile(enabled="yes")  # type: ignore[arg-type]


def _check_trace(trace: dict[str, Any], events: int) -> None:
    evs = trace["traceEvents"]
    named = {(e["pid"], e["tid"]) for e in evs if e["ph"] == "M" and e["name"] == "thread_name"}
    xs = [e for e in evs if e["ph"] == "X"]
    assert len(xs) == 2 * events  # once on a worker's track, once on its graph task's
    tracks: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    for e in xs:
        assert "Backward" in e["name"] or e["name"] == "AccumulateGrad"
        assert (e["pid"], e["tid"]) in named  # every track has a name
        tracks[e["pid"], e["tid"]].append((e["ts"], e["ts"] + e["dur"]))
    for spans in tracks.values():
        spans.sort()
        for (_, end), (start, _) in itertools.pairwise(spans):
            assert end <= start  # no two events of one track overlap


async def test_concurrent_awaited_backwards(tmp_path: Path) -> None:
    graphs = [_graph(s) for s in range(20)]
    want = sum((_node_names(loss) for _, loss in graphs), Counter[str]())
    async with profile() as prof:
        async with asyncio.timeout(10):
            await asyncio.gather(*(ag.backward(loss) for _, loss in graphs))
    assert Counter(e.name for e in prof.events) == want
    by_task: dict[int, list[str]] = defaultdict(list)
    for e in prof.events:
        by_task[e.graph_task].append(e.name)
    assert len(by_task) == 20
    assert all(Counter(names) == _node_names(graphs[0][1]) for names in by_task.values())
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(path)
    trace = json.loads(path.read_text())
    _check_trace(trace, len(prof.events))
    thread_names = [e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"]
    assert "cpu worker (MainThread)" in thread_names
    assert sum(n.startswith("graph task ") for n in thread_names) >= 20


async def test_only_this_task_is_profiled() -> None:
    inside = asyncio.Event()
    done = asyncio.Event()
    _, mine = _graph(4)
    _, theirs = _graph(5)

    async def other() -> None:
        await inside.wait()
        await ag.backward(theirs)
        done.set()

    async with asyncio.timeout(5):
        task = asyncio.ensure_future(other())
        async with profile() as prof:
            inside.set()
            await done.wait()
            await ag.backward(mine)
        await task
    assert Counter(e.name for e in prof.events) == _node_names(mine)


@pytest.fixture
def low_offload_threshold() -> Iterator[None]:
    old = engine.offload_threshold
    engine.configure(offload_threshold=1.0)
    yield
    engine.configure(offload_threshold=old)


@pytest.mark.usefixtures("low_offload_threshold")
async def test_nodes_off_the_loop() -> None:
    w = ag.randn(8, 8, requires_grad=True)
    loss = (ag.randn(8, 8) @ w @ w).sum()
    async with profile() as prof:
        async with asyncio.timeout(5):
            await ag.backward(loss)
    off = [e for e in prof.events if e.off_loop]
    assert off
    assert all(e.name == "MatmulBackward0" for e in off)
    assert all(e.thread.startswith("asyncgrad-compute") for e in off)
    _check_trace(prof.chrome_trace(), len(prof.events))


class NestedBackward(ag.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: ag.Tensor) -> ag.Tensor:
        ctx.save_for_backward(x)
        return x * 1.0

    @staticmethod
    def backward(ctx: Any, g: ag.Tensor) -> ag.Tensor:
        (x,) = ctx.saved_tensors
        with ag.enable_grad():
            xx = x.detach().requires_grad_()
            (inner,) = ag.grad_sync((xx.exp() * 2).sum(), xx)
        return g * inner


def test_reentrant_depth_and_self_time() -> None:
    x = ag.tensor([1.0, 2.0], requires_grad=True)
    loss = NestedBackward.apply(x).sum()
    with profile() as prof:
        loss.backward()
    depths = {e.name: e.depth for e in prof.events}
    assert depths["NestedBackwardBackward"] == 0
    assert depths["ExpBackward0"] == 1
    assert len({e.graph_task for e in prof.events}) == 2
    stats = {s.name: s for s in prof.key_averages()}
    outer = stats["NestedBackwardBackward"]
    nested = sum(
        e.end_ns - e.start_ns for e in prof.events if e.depth == 1
    )  # all inside the outer node, on this thread
    assert outer.self_ns == outer.total_ns - nested
    assert stats["ExpBackward0"].self_ns == stats["ExpBackward0"].total_ns
    _check_trace(prof.chrome_trace(), len(prof.events))


def test_profiler_and_anomaly_mode_together() -> None:
    x = ag.tensor([0.0], requires_grad=True)
    with profile() as prof, ag.autograd.detect_anomaly():
        with pytest.raises(RuntimeError, match="returned nan values"):
            (x.sqrt() * 0.0).sum().backward()
    assert [e.name for e in prof.events] == ["SumBackward0", "MulBackward0", "SqrtBackward0"]


def test_a_profiler_runs_once() -> None:
    prof = profile()
    with prof, pytest.raises(RuntimeError, match="already running"):
        prof.__enter__()


class AsyncNested(ag.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: ag.Tensor) -> ag.Tensor:
        ctx.save_for_backward(x)
        return x * 1.0

    @staticmethod
    async def backward(ctx: Any, g: ag.Tensor) -> ag.Tensor:
        (x,) = ctx.saved_tensors
        with ag.enable_grad():
            xx = x.detach().requires_grad_()
            (inner,) = await ag.grad((xx.exp() * 2).sum(), xx)
        return g * inner


async def test_profilers_follow_the_graph_task_not_the_worker() -> None:
    # The device worker's task copies the context of whoever started it (here a profiled one);
    # an unprofiled graph task's nested pass, started by its node on that worker, stays
    # unprofiled.
    xa = ag.tensor([1.0], requires_grad=True)
    xb = ag.tensor([1.0], requires_grad=True)
    async with profile() as prof:
        first = asyncio.ensure_future(ag.backward((xa * 2).sum()))  # starts the worker
    async with asyncio.timeout(5):
        await asyncio.gather(ag.backward(AsyncNested.apply(xb).sum()), first)
    assert xb.grad is not None
    assert xb.grad.item() == pytest.approx(2 * math.e)
    assert Counter(e.name for e in prof.events) == Counter(
        ["SumBackward0", "MulBackward0", "AccumulateGrad"]
    )
